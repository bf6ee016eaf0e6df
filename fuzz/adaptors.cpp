// Fuzzes a stack of adaptors over best_fit — statistics over tracking over limiting over
// retry_on_oom — so that the limit refuses requests, the retry releases and tries again, and the
// figures of every layer must agree with the pool's after each step and at the end (the pool's own
// check_invariants(), which walks every block, runs where the driver samples it).
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

namespace {

using pool_type = poolkit::best_fit<poolkit::ref<poolkit::simulated_resource>>;
using stack_type = poolkit::counted<poolkit::tracked<poolkit::limited<poolkit::retried_on_oom<pool_type>>>>;

// The resource the driver runs: the stack, with the layers' figures checked against one another
// after every call, and the pool's invariants as well where the driver checks them.
struct checked_stack {
    stack_type& stack;
    void* allocate(std::size_t bytes, std::size_t alignment) {
        try {
            void* pointer = stack.allocate(bytes, alignment);
            check_figures();
            return pointer;
        } catch (const std::bad_alloc&) {
            check_figures();
            throw;
        }
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment) noexcept {
        stack.deallocate(pointer, bytes, alignment);
        check_figures();
    }
    void check_invariants() const {
        stack.upstream_resource().upstream_resource().upstream_resource().upstream_resource().check_invariants();
        check_figures();
    }
    void check_figures() const {
        auto& tracked = stack.upstream_resource();
        auto& limited = tracked.upstream_resource();
        const pool_type& pool = limited.upstream_resource().upstream_resource();
        if (tracked.live_blocks() != pool.live_blocks()) std::abort();
        if (limited.live_bytes() > limited.limit() || limited.live_bytes() != tracked.live_bytes()) std::abort();
        const auto figures = stack.figures();
        if (figures.allocations.current != static_cast<std::int64_t>(pool.live_blocks()) ||
            figures.requested_bytes.current != static_cast<std::int64_t>(tracked.live_bytes())) {
            std::abort();
        }
    }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource memory{{.capacity = std::size_t{256} << 20}};
    {
        stack_type stack{std::in_place, poolkit::ref(memory), poolkit::best_fit_options{.initial_size = std::size_t{1} << 20}};
        stack.upstream_resource().upstream_resource().set_limit(std::size_t{4} << (20 + size % 4));
        checked_stack checked{stack};
        poolkit::fuzz::run(checked, data, size, 256);
        stack.upstream_resource().upstream_resource().upstream_resource().upstream_resource().release();
        checked.check_invariants();
        if (stack.figures().allocations.current != 0) std::abort();
    }
    if (memory.live_bytes() != 0) std::abort();
    return 0;
}
