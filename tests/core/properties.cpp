#include <poolkit/core/properties.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>

#include <doctest/doctest.h>

#if POOLKIT_HAS_CUDA
#  include "../support/cuda_mr.hpp"
#endif

using namespace poolkit;

namespace {
struct both : with_properties<both, host_accessible, device_accessible> {};
struct adaptor_over_host : forward_properties<adaptor_over_host, new_delete_resource> {};
}  // namespace

static_assert(has_property<both, host_accessible> && has_property<both, device_accessible>);
static_assert(has_property<adaptor_over_host, host_accessible>);
static_assert(!has_property<adaptor_over_host, device_accessible>);
#if POOLKIT_HAS_CUDA
// With CUDA the tags are CCCL's, so CCCL sees poolkit's properties (in the concept of its version).
static_assert(cuda::has_property<new_delete_resource, cuda::mr::host_accessible>);
static_assert(cuda::has_property<adaptor_over_host, cuda::mr::host_accessible>);
static_assert(test::cuda_mr_resource_with<new_delete_resource, cuda::mr::host_accessible>);
static_assert(!test::cuda_mr_resource_with<new_delete_resource, cuda::mr::device_accessible>);
#  if CCCL_VERSION >= 3004000
// CCCL's default answers for a property with a value; forward_properties leaves it alone.
static_assert(get_property(adaptor_over_host{}, cuda::mr::dynamic_accessibility_property{}) ==
              get_property(new_delete_resource{}, cuda::mr::dynamic_accessibility_property{}));
#  endif
#endif

TEST_CASE("properties are empty tags") {
    CHECK(sizeof(host_accessible) == 1);
    CHECK(sizeof(both) == 1);
}
