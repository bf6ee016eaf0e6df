// The conformance suite over stream_ordered<> with lanes of strategies other than best_fit: each
// serves a lane through its try_allocate_cached.
#include "../support/conformance.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

namespace {

using namespace poolkit;
using test::host_touch;
using test::instrumented;

using upstream_ref = ref<instrumented<>>;

static_assert(cached_pool<size_classes<upstream_ref>>);
static_assert(cached_pool<size_classes<upstream_ref, buddy<upstream_ref>>>);
static_assert(cached_pool<buddy<upstream_ref>>);
static_assert(cached_pool<fixed_size<upstream_ref>>);

template <class Block>
struct over_instrumented : host_touch {
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    Block resource_{upstream_ref{upstream_}};
    instrumented<>* upstream() { return &upstream_; }
    Block& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{8} << 20); }
    ~over_instrumented() {
        resource_.check_invariants();
        resource_.release();
        CHECK(upstream_.live_bytes() == 0);
    }
};

struct size_classes_lanes_fixture : over_instrumented<stream_ordered<upstream_ref, lanes<size_classes>, host_events>> {
    static constexpr const char* name = "stream_ordered<ref<instrumented>, lanes<size_classes>, host_events>";
};
struct buddy_lanes_fixture : over_instrumented<stream_ordered<upstream_ref, lanes<buddy>, host_events>> {
    static constexpr const char* name = "stream_ordered<ref<instrumented>, lanes<buddy>, host_events>";
};
struct fixed_size_lanes_fixture : over_instrumented<stream_ordered<upstream_ref, lanes<fixed_size>, host_events>> {
    static constexpr const char* name = "stream_ordered<ref<instrumented>, lanes<fixed_size>, host_events>";
};

// The expandable preset's shape over simulated virtual memory, without stitching; with it, small
// requests up to 16 KiB and physical allocations of 128 KiB over 64 KiB granules, so that requests
// of the suite's sizes stitch.
template <bool Stitch>
struct expandable_lanes_fixture_of : test::no_touch {
    static constexpr const char* name = Stitch ? "stream_ordered<ref<simulated_vmm_resource>, lanes<expandable>, host_events> (stitch)"
                                               : "stream_ordered<ref<simulated_vmm_resource>, lanes<expandable>, host_events>";
    static constexpr bool stateless = false;
    static expandable_options options() {
        if (!Stitch) return {.span_bytes = std::size_t{256} << 20, .stitch = false};
        return {.span_bytes = std::size_t{256} << 20,
                .small_size = std::size_t{16} << 10,
                .mapping_bytes = std::size_t{128} << 10,
                .stitch = true,
                .min_stitch_bytes = 0};
    }
    simulated_vmm_resource memory_{{.capacity = std::size_t{16} << 30,
                                    .granularity = Stitch ? std::size_t{64} << 10 : std::size_t{2} << 20,
                                    .physical_limit = std::size_t{128} << 20}};
    stream_ordered<ref<simulated_vmm_resource>, lanes<expandable>, host_events> resource_{ref<simulated_vmm_resource>(memory_), options()};
    instrumented<>* upstream() { return nullptr; }
    auto& resource() { return resource_; }
    void exhaust_setup() {}  // the physical limit: 128 MiB
    ~expandable_lanes_fixture_of() {
        resource_.check_invariants();
        resource_.release();
        CHECK(memory_.mapped_bytes() == 0);
        memory_.check_invariants();
    }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(conformance, expandable_lanes_fixture_of<false>, expandable_lanes_fixture_of<true>, size_classes_lanes_fixture,
                          buddy_lanes_fixture, fixed_size_lanes_fixture);
