// The composition matrix row of synchronized<> (matrix.hpp).
#include "matrix.hpp"

using namespace poolkit::test::matrix;

POOLKIT_MATRIX_ROW(synchronized_of);
