// The composition matrix row of logging<> (matrix.hpp). Loggers built in place (inside lanes, and
// here) write to std::clog; this binary's std::clog goes nowhere while the row runs.
#include "matrix.hpp"

#include <iostream>
#include <streambuf>

namespace {
using namespace poolkit::test::matrix;

struct discard : std::streambuf {
    int overflow(int character) override { return character; }
};
struct quiet_clog {
    discard sink;
    std::streambuf* saved = std::clog.rdbuf(&sink);
    ~quiet_clog() { std::clog.rdbuf(saved); }
};
const quiet_clog quiet;
}  // namespace

POOLKIT_MATRIX_ROW(logging_of);
