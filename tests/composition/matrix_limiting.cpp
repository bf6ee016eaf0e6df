// The composition matrix row of limiting<> (matrix.hpp).
#include "matrix.hpp"

using namespace poolkit::test::matrix;

POOLKIT_MATRIX_ROW(limiting_of);
