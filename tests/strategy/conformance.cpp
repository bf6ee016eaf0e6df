// The conformance suite over every strategy, each over an instrumented host upstream (memory
// that may be touched) and over simulated address space (memory that must never be touched).
#include "../support/conformance.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/exact_cache.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <limits>
#include <type_traits>

namespace {

using namespace poolkit;
using test::host_touch;
using test::instrumented;
using test::no_touch;

// A strategy over a ref to an instrumented host upstream, which checks how the strategy uses it.
template <class Strategy>
struct over_instrumented : host_touch {
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    Strategy resource_;
    explicit over_instrumented(typename Strategy::options_type options = {}) : resource_(upstream_, std::move(options)) {}
    instrumented<>* upstream() { return &upstream_; }
    Strategy& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
    ~over_instrumented() { resource_.check_invariants(); }
};

// A strategy over simulated address space: any write into a block would fault.
template <class Strategy>
struct over_simulated : no_touch {
    static constexpr bool stateless = false;
    simulated_resource addresses_{{.capacity = std::size_t{16} << 20}};
    Strategy resource_;
    explicit over_simulated(typename Strategy::options_type options = {}) : resource_(addresses_, std::move(options)) {}
    instrumented<>* upstream() { return nullptr; }
    Strategy& resource() { return resource_; }
    void exhaust_setup() {}  // the capacity above is small enough
    ~over_simulated() {
        resource_.check_invariants();
        resource_.release();
        CHECK(addresses_.live_bytes() == 0);
    }
};

struct best_fit_fixture : over_instrumented<best_fit<ref<instrumented<>>>> {
    static constexpr const char* name = "best_fit<ref<instrumented>>";
};
struct best_fit_simulated_fixture : over_simulated<best_fit<ref<simulated_resource>>> {
    static constexpr const char* name = "best_fit<ref<simulated_resource>>";
};

struct size_classes_fixture : over_instrumented<size_classes<ref<instrumented<>>>> {
    static constexpr const char* name = "size_classes<ref<instrumented>>";
};
struct size_classes_simulated_fixture : over_simulated<size_classes<ref<simulated_resource>>> {
    static constexpr const char* name = "size_classes<ref<simulated_resource>>";
    size_classes_simulated_fixture() : over_simulated({.slab_size = std::size_t{128} << 10}) {}
};

struct fixed_size_fixture : over_instrumented<fixed_size<ref<instrumented<>>>> {
    static constexpr const char* name = "fixed_size<ref<instrumented>>";
};
struct fixed_size_simulated_fixture : over_simulated<fixed_size<ref<simulated_resource>>> {
    static constexpr const char* name = "fixed_size<ref<simulated_resource>>, 4 KiB blocks";
    fixed_size_simulated_fixture() : over_simulated({.block_size = 4096}) {}
};

struct buddy_fixture : over_instrumented<buddy<ref<instrumented<>>>> {
    static constexpr const char* name = "buddy<ref<instrumented>>";
    buddy_fixture() : over_instrumented({.chunk_size = std::size_t{1} << 20}) {}
};
struct buddy_simulated_fixture : over_simulated<buddy<ref<simulated_resource>>> {
    static constexpr const char* name = "buddy<ref<simulated_resource>>";
    buddy_simulated_fixture() : over_simulated({.chunk_size = std::size_t{1} << 20}) {}
};

struct monotonic_fixture : over_instrumented<monotonic<ref<instrumented<>>>> {
    static constexpr const char* name = "monotonic<ref<instrumented>>";
};
struct monotonic_simulated_fixture : over_simulated<monotonic<ref<simulated_resource>>> {
    static constexpr const char* name = "monotonic<ref<simulated_resource>>";
};

struct exact_cache_fixture : over_instrumented<exact_cache<ref<instrumented<>>>> {
    static constexpr const char* name = "exact_cache<ref<instrumented>>";
};
struct exact_cache_simulated_fixture : over_simulated<exact_cache<ref<simulated_resource>>> {
    static constexpr const char* name = "exact_cache<ref<simulated_resource>>";
};

// Combinators: both parts draw on one instrumented upstream.
struct segregator_fixture : host_touch {
    using pools = segregator<4096, size_classes<ref<instrumented<>>>, best_fit<ref<instrumented<>>>>;
    static constexpr const char* name = "segregator<4096, size_classes, best_fit>";
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    pools resource_{size_classes<ref<instrumented<>>>{upstream_, {.slab_size = std::size_t{64} << 10}},
                    best_fit<ref<instrumented<>>>{upstream_}};
    instrumented<>* upstream() { return &upstream_; }
    pools& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
    ~segregator_fixture() { resource_.check_invariants(); }
};

struct fallback_fixture : host_touch {
    using pools = fallback<best_fit<ref<instrumented<>>>, best_fit<ref<instrumented<>>>>;
    static constexpr const char* name = "fallback<best_fit capped at 256 KiB, best_fit>";
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    pools resource_{
        best_fit<ref<instrumented<>>>{upstream_, {.initial_size = std::size_t{256} << 10, .maximum_size = std::size_t{256} << 10}},
        best_fit<ref<instrumented<>>>{upstream_}};
    instrumented<>* upstream() { return &upstream_; }
    pools& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
    ~fallback_fixture() { resource_.check_invariants(); }
};

// Over simulated virtual memory: blocks are addresses whose granules are mapped, never touched.
// Under each mapping policy; follow_live with a peak slack of 0, so that it unmaps for new mappings
// (its defaults keep what is mapped, as keep_mapped does), without stitching. Stitching: with small
// requests up to 16 KiB and physical allocations of 128 KiB, so that requests of the suite's sizes
// stitch.
template <class Policy, bool Stitch = false>
struct expandable_fixture_of : no_touch {
    static constexpr bool follows = std::is_same_v<Policy, follow_live> && !Stitch;
    static constexpr const char* name = Stitch    ? "expandable<ref<simulated_vmm_resource>> (stitch, 128 KiB allocations)"
                                        : follows ? "expandable<ref<simulated_vmm_resource>> (peak_slack 0)"
                                                  : "expandable<ref<simulated_vmm_resource>, keep_mapped>";
    static constexpr bool stateless = false;
    static expandable_options options() {
        expandable_options o{
            .span_bytes = std::size_t{64} << 20, .peak_slack = follows ? 0 : std::numeric_limits<double>::infinity(), .stitch = Stitch};
        if (Stitch) {
            o.small_size = std::size_t{16} << 10;
            o.mapping_bytes = std::size_t{128} << 10;
            o.min_stitch_bytes = 0;
        }
        return o;
    }
    simulated_vmm_resource memory_{
        {.capacity = std::size_t{16} << 30, .granularity = std::size_t{64} << 10, .physical_limit = std::size_t{128} << 20}};
    expandable<ref<simulated_vmm_resource>, Policy> resource_{memory_, options()};
    instrumented<>* upstream() { return nullptr; }
    auto& resource() { return resource_; }
    void exhaust_setup() {}  // the physical limit: 128 MiB
    ~expandable_fixture_of() {
        resource_.check_invariants();
        resource_.release();
        CHECK(memory_.mapped_bytes() == 0);
        memory_.check_invariants();
    }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(conformance, best_fit_fixture, best_fit_simulated_fixture, size_classes_fixture, size_classes_simulated_fixture,
                          fixed_size_fixture, fixed_size_simulated_fixture, buddy_fixture, buddy_simulated_fixture, monotonic_fixture,
                          monotonic_simulated_fixture, exact_cache_fixture, exact_cache_simulated_fixture, segregator_fixture,
                          fallback_fixture, expandable_fixture_of<follow_live>, expandable_fixture_of<keep_mapped>,
                          expandable_fixture_of<follow_live, true>);
