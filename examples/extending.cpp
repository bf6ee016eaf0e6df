// docs/extending.md: an upstream, a strategy and an adaptor of your own, composed with poolkit's
// blocks as poolkit's own compose. Compiled and run by the tests; tests/composition/extending.cpp
// runs all three through the conformance suite and the composition matrix.
#include "extending/aligned_host_resource.hpp"
#include "extending/call_counter.hpp"
#include "extending/size_cache.hpp"

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/strategy/best_fit.hpp>

#include <cstdio>

namespace example {
// A stack as one template: stream_ordered makes its pool from it (poolkit::lanes).
template <class U>
using counted_best_fit = call_counter<poolkit::best_fit<U>>;
}  // namespace example

int main() {
    example::aligned_host_resource host;

    // Your strategy over your upstream, your adaptor around it, poolkit's counted<> around that.
    example::size_cache<poolkit::ref<example::aligned_host_resource>> cache{host};
    example::call_counter calls{cache};  // refers to `cache`
    poolkit::counted observed{calls};
    for (int round = 0; round < 3; ++round) {
        void* block = observed.allocate(4096);
        observed.deallocate(block, 4096);
    }
    std::printf("calls through the counter: %zu allocations, %zu deallocations\n", calls.allocations(), calls.deallocations());

    // Your adaptor over a poolkit strategy, as the pool every stream shares.
    poolkit::stream_ordered<example::aligned_host_resource, poolkit::lanes<example::counted_best_fit>, poolkit::completed_events> lanes;
    void* on_stream = lanes.allocate_async(1000, 256, poolkit::default_stream);
    lanes.deallocate_async(on_stream, 1000, 256, poolkit::default_stream);
    lanes.release();

    // Your strategy as that pool.
    poolkit::stream_ordered<example::aligned_host_resource, poolkit::lanes<example::size_cache>, poolkit::completed_events> cached_lanes;
    void* again = cached_lanes.allocate_async(512, 256, poolkit::default_stream);
    cached_lanes.deallocate_async(again, 512, 256, poolkit::default_stream);
    std::printf("streams seen: %zu\n", cached_lanes.streams());
    return calls.allocations() == 3 && calls.deallocations() == 3 ? 0 : 1;
}
