// The conformance suite over the observing adaptors: statistics, tracking, logging and limiting,
// each over an instrumented host upstream and over simulated address space (stream-ordered).
#include "../support/conformance.hpp"

#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/logged.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <sstream>

namespace {

using namespace poolkit;
using test::host_touch;
using test::instrumented;
using test::no_touch;
using upstream_ref = ref<instrumented<>>;

struct observed_over_instrumented : host_touch {
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    instrumented<>* upstream() { return &upstream_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
};
struct over_simulated : no_touch {
    static constexpr bool stateless = false;
    simulated_resource addresses_{{.capacity = std::size_t{16} << 20}};
    instrumented<>* upstream() { return nullptr; }
    void exhaust_setup() {}
};

struct statistics_fixture : observed_over_instrumented {
    static constexpr const char* name = "counted<ref<instrumented>>";
    counted<upstream_ref> resource_{upstream_};
    counted<upstream_ref>& resource() { return resource_; }
    ~statistics_fixture() {
        resource_.check_invariants();
        CHECK(resource_.figures().allocations.current == 0);
    }
};
struct statistics_simulated_fixture : over_simulated {
    static constexpr const char* name = "counted<ref<simulated_resource>, single_thread_counters>";
    counted<ref<simulated_resource>, single_thread_counters> resource_{addresses_};
    auto& resource() { return resource_; }
};
struct tracking_fixture : observed_over_instrumented {
    static constexpr const char* name = "tracked<ref<instrumented>>";
    tracked<upstream_ref> resource_{upstream_};
    tracked<upstream_ref>& resource() { return resource_; }
    ~tracking_fixture() { CHECK(resource_.live_blocks() == 0); }
};
struct tracking_simulated_fixture : over_simulated {
    static constexpr const char* name = "tracked<ref<simulated_resource>>";
    tracked<ref<simulated_resource>> resource_{addresses_};
    auto& resource() { return resource_; }
};
struct logging_fixture : observed_over_instrumented {
    static constexpr const char* name = "logged<ref<instrumented>>";
    std::ostringstream log_;
    logged<upstream_ref> resource_{upstream_, log_};
    logged<upstream_ref>& resource() { return resource_; }
};
struct logging_simulated_fixture : over_simulated {
    static constexpr const char* name = "logged<ref<simulated_resource>>";
    std::ostringstream log_;
    logged<ref<simulated_resource>> resource_{addresses_, log_};
    auto& resource() { return resource_; }
};
struct limiting_fixture : observed_over_instrumented {
    static constexpr const char* name = "limited<ref<instrumented>>, 64 MiB";
    limited<upstream_ref> resource_{upstream_, {.limit_bytes = std::size_t{64} << 20}};
    limited<upstream_ref>& resource() { return resource_; }
    void exhaust_setup() { resource_.set_limit(std::size_t{1} << 20); }  // the cap, not the upstream, runs out
    ~limiting_fixture() { CHECK(resource_.live_bytes() == 0); }
};
struct limiting_simulated_fixture : over_simulated {
    static constexpr const char* name = "limited<ref<simulated_resource>>";
    limited<ref<simulated_resource>> resource_{addresses_, {.limit_bytes = std::size_t{8} << 20}};
    auto& resource() { return resource_; }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(conformance, statistics_fixture, statistics_simulated_fixture, tracking_fixture, tracking_simulated_fixture,
                          logging_fixture, logging_simulated_fixture, limiting_fixture, limiting_simulated_fixture);
