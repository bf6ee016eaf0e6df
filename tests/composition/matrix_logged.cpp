// The composition matrix row of logged<> (matrix.hpp). Loggers built in place (inside lanes, and
// here) write to std::clog; this binary's std::clog goes nowhere while the row runs.
#include "matrix.hpp"

namespace {
using namespace poolkit::test::matrix;

const quiet_clog quiet;
}  // namespace

POOLKIT_MATRIX_ROW(logged_of);
