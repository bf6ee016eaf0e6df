// The conformance suite over every host block. Each later block adds its fixture here.
#include "support/conformance.hpp"

#include <poolkit/core/any_resource.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/resource_ref.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

namespace {

using namespace poolkit;
using test::host_touch;
using test::instrumented;
using test::no_touch;

struct new_delete_fixture : host_touch {
    static constexpr const char* name = "new_delete_resource";
    static constexpr bool stateless = true;
    new_delete_resource resource_;
    new_delete_resource& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
};

struct simulated_fixture : no_touch {
    static constexpr const char* name = "simulated_resource";
    static constexpr bool stateless = false;
    simulated_resource resource_{{.capacity = std::size_t{16} << 20}};
    simulated_resource& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
    void exhaust_setup() {}  // the capacity above is small enough
    ~simulated_fixture() { resource_.check_invariants(); }
};

struct simulated_vmm_fixture : no_touch {
    static constexpr const char* name = "simulated_vmm_resource";
    static constexpr bool stateless = false;
    simulated_vmm_resource resource_{{.capacity = std::size_t{4} << 30, .physical_limit = std::size_t{1} << 30}};
    simulated_vmm_resource& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
    void exhaust_setup() {}  // the physical limit above is small enough
    ~simulated_vmm_fixture() { resource_.check_invariants(); }
};

// Fixtures for wrappers over an instrumented host upstream.
struct over_instrumented : host_touch {
    static constexpr bool stateless = false;
    instrumented<> upstream_;
    instrumented<>* upstream() { return &upstream_; }
    void exhaust_setup() { upstream_.limit(std::size_t{1} << 20); }
};

struct instrumented_fixture : over_instrumented {
    static constexpr const char* name = "instrumented";
    instrumented<>& resource() { return upstream_; }
};

struct ref_fixture : over_instrumented {
    static constexpr const char* name = "ref<instrumented>";
    ref<instrumented<>> resource_{upstream_};
    ref<instrumented<>>& resource() { return resource_; }
};

struct resource_ref_fixture : over_instrumented {
    static constexpr const char* name = "resource_ref<host_accessible>";
    resource_ref<host_accessible> resource_{upstream_};
    resource_ref<host_accessible>& resource() { return resource_; }
};

struct any_resource_fixture : over_instrumented {
    static constexpr const char* name = "any_resource<host_accessible>";
    any_resource<host_accessible> resource_{ref<instrumented<>>(upstream_)};
    any_resource<host_accessible>& resource() { return resource_; }
};

struct stream_resource_ref_fixture : no_touch {
    static constexpr const char* name = "stream_resource_ref<> over simulated_resource";
    static constexpr bool stateless = false;
    simulated_resource simulated_{{.capacity = std::size_t{16} << 20}};
    stream_resource_ref<> resource_{simulated_};
    stream_resource_ref<>& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
    void exhaust_setup() {}
};

struct any_stream_resource_fixture : no_touch {
    static constexpr const char* name = "any_stream_resource<> over ref<simulated_resource>";
    static constexpr bool stateless = false;
    simulated_resource simulated_{{.capacity = std::size_t{16} << 20}};
    any_stream_resource<> resource_{ref<simulated_resource>(simulated_)};
    any_stream_resource<>& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
    void exhaust_setup() {}
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(conformance, new_delete_fixture, simulated_fixture, simulated_vmm_fixture, instrumented_fixture, ref_fixture,
                          resource_ref_fixture, any_resource_fixture, stream_resource_ref_fixture, any_stream_resource_fixture);
