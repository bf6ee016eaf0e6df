// The stream-order oracle (tests/support/stream_order_oracle.hpp) over the CUDA upstreams: lanes
// of best_fit and caching_pool over cudaMalloc, cudaMallocAsync pools, pinned and managed memory,
// limited to 4 MiB so that they run out and give memory back, while simulated streams
// (host_events) decide the order. cudaFree's implicit synchronization does not hide a hole here:
// the oracle checks the order the pool promises, not what the device happens to do.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"
#include "../support/stream_order_oracle.hpp"
#include "support.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>
#include <poolkit/upstream/cuda_managed_resource.hpp>
#include <poolkit/upstream/cuda_pinned_resource.hpp>

#include <cstddef>
#include <string>

namespace {

using namespace poolkit;

using test::KiB;
using test::MiB;

template <class U>
using best_fit_lane = best_fit<U>;
template <class U>
using caching_lane = caching_pool<U>;

template <class Upstream, template <class> class Strategy, class Options>
void oracle_over(const char* upstream_name, const Options& options) {
    test::instrumented<Upstream> memory;
    memory.limit(4 * MiB);
    host_events events;
    using shared = ref<test::instrumented<Upstream>>;
    {
        stream_ordered<shared, lanes<Strategy, Options>, host_events> pool{shared{memory}, options, events};
        const test::oracle_report report =
            test::stream_order_oracle(pool, events, {.seed = 5, .streams = 41, .steps = 3000, .largest = 1 * MiB});
        const std::string seen = std::string(upstream_name) + ": " + report.describe();
        MESSAGE(seen);
        CHECK(report.violations == 0);
        CHECK(report.overlaps == 0);
        CHECK(report.exhausted > 0);
        pool.release();
    }
    CHECK(memory.live_bytes() == 0);
    CHECK(memory.errors().empty());
}

template <class Upstream>
void oracle_over_lanes(const char* name) {
    oracle_over<Upstream, best_fit_lane>(name, best_fit_options{.initial_size = 256 * KiB, .growth = growth_policy::as_needed(256 * KiB)});
    oracle_over<Upstream, caching_lane>(
        name, caching_options{.small_size = 64 * KiB, .small_chunk = 256 * KiB, .large_growth = growth_policy::fixed_step(1 * MiB)});
}

}  // namespace

TEST_CASE("stream-order oracle at exhaustion over every CUDA upstream") {
    oracle_over_lanes<cuda_device_resource>("cudaMalloc");
    oracle_over_lanes<cuda_async_resource>("cudaMallocAsync pool");
    oracle_over_lanes<cuda_pinned_resource>("pinned");
    oracle_over_lanes<cuda_managed_resource>("managed");
}
