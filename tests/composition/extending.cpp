// The blocks of docs/extending.md (examples/extending/) join the suite like poolkit's own: the
// upstream and the strategy through the conformance suite, the adaptor's row and the strategy's
// column of the composition matrix. Loggers in the matrix write to std::clog, silenced here.
#include "matrix.hpp"

#include "../../examples/extending/aligned_host_resource.hpp"
#include "../../examples/extending/call_counter.hpp"
#include "../../examples/extending/size_cache.hpp"

namespace poolkit::test::matrix {
template <class U>
using call_counter_of = example::call_counter<U>;
template <class U>
using size_cache_over = example::size_cache<U>;
}  // namespace poolkit::test::matrix

namespace {
using namespace poolkit::test::matrix;

const quiet_clog quiet;

struct aligned_host_fixture : poolkit::test::host_touch {
    static constexpr const char* name = "example::aligned_host_resource";
    static constexpr bool stateless = true;
    example::aligned_host_resource resource_;
    poolkit::test::instrumented<>* upstream() { return nullptr; }
    auto& resource() { return resource_; }
};
}  // namespace

TEST_CASE_TEMPLATE_INVOKE(conformance, aligned_host_fixture);
POOLKIT_MATRIX_ROW(call_counter_of);
POOLKIT_MATRIX_COLUMN(size_cache_over);
