// The composition matrix row of tracking<> (matrix.hpp).
#include "matrix.hpp"

using namespace poolkit::test::matrix;

POOLKIT_MATRIX_ROW(tracking_of);
