// The composition matrix row of retry_on_oom<> (matrix.hpp).
#include "matrix.hpp"

using namespace poolkit::test::matrix;

POOLKIT_MATRIX_ROW(retry_on_oom_of);
