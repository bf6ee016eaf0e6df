// The composition matrix row of recorded<> (matrix.hpp), recording all the while: stacks built
// without a history (lanes among them) write into default_history(), started for this row with a
// small ring, so that every call records and overwrites.
#include "matrix.hpp"

namespace {
using namespace poolkit::test::matrix;

struct recording_on {
    recording_on() { poolkit::default_history().start(64); }
    ~recording_on() { poolkit::default_history().stop(); }
    recording_on(const recording_on&) = delete;
    recording_on& operator=(const recording_on&) = delete;
};
const recording_on on;
}  // namespace

POOLKIT_MATRIX_ROW(recorded_of);
