// The composition matrix row of retried_on_oom<> (matrix.hpp).
#include "matrix.hpp"

using namespace poolkit::test::matrix;

POOLKIT_MATRIX_ROW(retried_on_oom_of);
