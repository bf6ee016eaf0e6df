// The conformance suite over the stream-ordering blocks and the adaptors around them.
#include "../support/conformance.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/per_thread.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

namespace {

using namespace poolkit;
using test::host_touch;
using test::instrumented;
using test::no_touch;

using upstream_ref = ref<instrumented<>>;

template <class Block>
struct streams_over_instrumented : host_touch {
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    Block resource_{upstream_ref{upstream_}};
    instrumented<>* upstream() { return &upstream_; }
    Block& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{8} << 20); }
    ~streams_over_instrumented() {
        resource_.check_invariants();
        resource_.release();
        CHECK(upstream_.live_bytes() == 0);
    }
};

struct caching_pool_fixture : streams_over_instrumented<caching_pool<upstream_ref>> {
    static constexpr const char* name = "caching_pool<ref<instrumented>>";
};
struct stream_ordered_fixture : streams_over_instrumented<stream_ordered<upstream_ref, lanes<best_fit>, host_events>> {
    static constexpr const char* name = "stream_ordered<ref<instrumented>, lanes<best_fit>, host_events>";
};
struct caching_allocator_fixture : streams_over_instrumented<caching_resource<upstream_ref, host_events>> {
    static constexpr const char* name = "caching_resource<ref<instrumented>, host_events>";
};

struct caching_allocator_simulated_fixture : no_touch {
    static constexpr const char* name = "caching_resource<ref<simulated_resource>, host_events>";
    static constexpr bool stateless = false;
    simulated_resource addresses_{{.capacity = std::size_t{16} << 20}};
    caching_resource<ref<simulated_resource>, host_events> resource_{ref<simulated_resource>(addresses_)};
    instrumented<>* upstream() { return nullptr; }
    auto& resource() { return resource_; }
    void exhaust_setup() {}
    ~caching_allocator_simulated_fixture() {
        resource_.release();
        CHECK(addresses_.live_bytes() == 0);
    }
};

struct synchronized_fixture : host_touch {
    static constexpr const char* name = "synchronized<best_fit<ref<instrumented>>>";
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    synchronized<best_fit<upstream_ref>> resource_{std::in_place, upstream_ref{upstream_}};
    instrumented<>* upstream() { return &upstream_; }
    auto& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{8} << 20); }
};

// Retries once after the callback lifts the limit a little: the suite's exhaustion still ends in
// out_of_memory once the raised limit is reached too.
struct retry_fixture : host_touch {
    static constexpr const char* name = "retried_on_oom<ref<instrumented>>";
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    retried_on_oom<upstream_ref> resource_{upstream_ref{upstream_}, {.callback = [](const oom_event&) { return false; }}};
    instrumented<>* upstream() { return &upstream_; }
    auto& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
};

// Small caches, so that the suite's traffic overflows them and gives blocks back.
struct per_thread_fixture : host_touch {
    static constexpr const char* name =
        "per_thread<synchronized<stream_ordered<ref<instrumented>, lanes<best_fit>, host_events>>, host_events>";
    static constexpr bool stateless = false;
    using shared = synchronized<stream_ordered<upstream_ref, lanes<best_fit>, host_events>>;
    instrumented<> upstream_;
    host_events events_;
    per_thread<shared, host_events> resource_{
        std::in_place, {.max_cached_bytes = 256 << 10, .max_blocks_per_class = 4}, events_, upstream_ref{upstream_}, best_fit_options{},
        events_};
    instrumented<>* upstream() { return &upstream_; }
    auto& resource() { return resource_; }
    void exhaust_setup() { upstream_.limit(std::size_t{8} << 20); }
    ~per_thread_fixture() {
        resource_.check_invariants();
        resource_.release();
        CHECK(resource_.cached_bytes() == 0);
        CHECK(resource_.live_bytes() == 0);
        CHECK(upstream_.live_bytes() == 0);
    }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(conformance, caching_pool_fixture, stream_ordered_fixture, caching_allocator_fixture,
                          caching_allocator_simulated_fixture, synchronized_fixture, retry_fixture, per_thread_fixture);
