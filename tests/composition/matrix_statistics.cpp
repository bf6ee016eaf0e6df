// The composition matrix row of statistics<> (matrix.hpp).
#include "matrix.hpp"

using namespace poolkit::test::matrix;

POOLKIT_MATRIX_ROW(statistics_of);
