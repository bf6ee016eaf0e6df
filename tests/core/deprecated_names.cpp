// The names before the naming scheme of docs/concepts.md (Names) still compile, as deprecated
// aliases of the new ones, for one release: the same types, the same headers; so does the
// in-place order before the rule (docs/concepts.md, "Referring and owning").
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/limiting.hpp>
#include <poolkit/adaptor/logging.hpp>
#include <poolkit/adaptor/recording.hpp>
#include <poolkit/adaptor/retry_on_oom.hpp>
#include <poolkit/adaptor/statistics.hpp>
#include <poolkit/adaptor/tracking.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <doctest/doctest.h>

#include <type_traits>

#if defined(__GNUC__)
#  pragma GCC diagnostic push
#  pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace {
using namespace poolkit;
using upstream = new_delete_resource;
}  // namespace

static_assert(std::is_same_v<statistics<upstream>, counted<upstream>>);
static_assert(std::is_same_v<statistics<upstream, single_thread_counters>, counted<upstream, single_thread_counters>>);
static_assert(std::is_same_v<tracking<upstream>, tracked<upstream>> && std::is_same_v<tracking_options, tracked_options>);
static_assert(std::is_same_v<logging<upstream>, logged<upstream>> && std::is_same_v<logging_options, logged_options>);
static_assert(std::is_same_v<limiting<upstream>, limited<upstream>> && std::is_same_v<limiting_options, limited_options>);
static_assert(std::is_same_v<recording<upstream>, recorded<upstream>>);
static_assert(std::is_same_v<recording_memory<simulated_vmm_resource>, recorded_memory<simulated_vmm_resource>>);
static_assert(std::is_same_v<retry_on_oom<upstream>, retried_on_oom<upstream>>);
static_assert(
    std::is_same_v<caching_allocator<ref<simulated_resource>, host_events>, caching_resource<ref<simulated_resource>, host_events>>);
static_assert(std::is_same_v<expandable_allocator<ref<simulated_vmm_resource>, host_events>,
                             expandable_resource<ref<simulated_vmm_resource>, host_events>>);

TEST_CASE("the names before the naming scheme still build and run, deprecated") {
    statistics<new_delete_resource> counts;
    void* block = counts.allocate(100);
    CHECK(counts.figures().allocations.current == 1);
    counts.deallocate(block, 100);
    simulated_resource memory;
    caching_allocator<ref<simulated_resource>, host_events> pool{ref(memory)};
    pool.deallocate(pool.allocate(4096), 4096);
}

TEST_CASE("stream_ordered's in-place order before the rule (the upstream's argument first) still builds, deprecated") {
    caching_resource<simulated_resource, host_events> pool{std::in_place, simulated_options{.capacity = 64 << 20}, {.power2_divisions = 4}};
    CHECK(pool.upstream_resource().options().capacity == 64 << 20);
    CHECK(pool.pool().options().power2_divisions == 4);
    pool.deallocate(pool.allocate(4096), 4096);
}

#if defined(__GNUC__)
#  pragma GCC diagnostic pop
#endif
