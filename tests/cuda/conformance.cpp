// The conformance suite over the CUDA upstreams, on a real device.
#include "support.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>
#include <poolkit/upstream/cuda_managed_resource.hpp>
#include <poolkit/upstream/cuda_pinned_resource.hpp>
#include <poolkit/upstream/cuda_vmm_resource.hpp>

namespace {

using namespace poolkit;
using test::device_touch;
using test::host_touch;
using test::instrumented;

template <class R, bool Stateless, class Touch>
struct leaf_fixture : Touch {
    static constexpr bool stateless = Stateless;
    R resource_;
    R& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
};

struct device_fixture : leaf_fixture<cuda_device_resource, true, device_touch> {
    static constexpr const char* name = "cuda_device_resource";
};
struct pinned_fixture : leaf_fixture<cuda_pinned_resource, true, host_touch> {
    static constexpr const char* name = "cuda_pinned_resource";
};
struct managed_fixture : leaf_fixture<cuda_managed_resource, true, host_touch> {
    static constexpr const char* name = "cuda_managed_resource";
    ~managed_fixture() { cudaDeviceSynchronize(); }
};
struct async_fixture : leaf_fixture<cuda_async_resource, false, device_touch> {
    static constexpr const char* name = "cuda_async_resource (owned pool)";
};
struct async_default_pool_fixture : device_touch {
    static constexpr const char* name = "cuda_async_resource (device default pool)";
    static constexpr bool stateless = true;  // every view of the default pool is equal
    cuda_async_resource resource_ = cuda_async_resource::device_default();
    cuda_async_resource& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
};
struct vmm_fixture : device_touch {
    static constexpr const char* name = "cuda_vmm_resource";
    static constexpr bool stateless = false;
    cuda_vmm_resource resource_{{.physical_limit = std::size_t{1} << 30}};
    cuda_vmm_resource& resource() { return resource_; }
    instrumented<>* upstream() { return nullptr; }
    void exhaust_setup() {}  // the physical limit above is small enough
    ~vmm_fixture() { resource_.check_invariants(); }
};

}  // namespace

TEST_CASE_TEMPLATE_INVOKE(conformance, device_fixture, pinned_fixture, managed_fixture, async_fixture, async_default_pool_fixture,
                          vmm_fixture);
