// cuda_mr_upstream: a CCCL resource, called in the spelling of the CCCL in use, as a poolkit
// upstream. Host memory only: this runs without a GPU.
#include <poolkit/core/config.hpp>

#if POOLKIT_HAS_CUDA
#  include "../support/cuda_mr.hpp"

#  include <poolkit/adaptor/completed_events.hpp>
#  include <poolkit/adaptor/stream_ordered.hpp>
#  include <poolkit/interop/cuda_mr_upstream.hpp>
#  include <poolkit/strategy/best_fit.hpp>
#  include <poolkit/upstream/new_delete_resource.hpp>

#  include <doctest/doctest.h>

#  include <cstring>

using namespace poolkit;

namespace {
using host_ref = test::cuda_mr_resource_ref<cuda::mr::host_accessible>;
using host_stream_ref = test::cuda_mr_stream_resource_ref<cuda::mr::host_accessible>;
using host_lanes = stream_ordered<new_delete_resource, lanes<best_fit>, completed_events>;
}  // namespace

static_assert(resource_with<cuda_mr_upstream<host_ref>, host_accessible> && !stream_resource<cuda_mr_upstream<host_ref>>);
static_assert(stream_resource_with<cuda_mr_upstream<host_stream_ref>, host_accessible>);
static_assert(!has_property<cuda_mr_upstream<host_ref>, device_accessible>);
// A poolkit block over it is a CCCL resource again.
static_assert(test::cuda_mr_resource_with<best_fit<cuda_mr_upstream<host_ref>>, cuda::mr::host_accessible>);

TEST_CASE("cuda_mr_upstream: a CCCL ref feeds a poolkit pool") {
    new_delete_resource host;
    host_ref cccl{host};
    best_fit<cuda_mr_upstream<host_ref>> pool{cccl};  // the ref converts
    void* p = pool.allocate(1000, 64);
    REQUIRE(p != nullptr);
    CHECK(is_aligned(p, 64));
    std::memset(p, 1, 1000);
    CHECK(pool.reserved_bytes() >= 1000);
    pool.deallocate(p, 1000, 64);
    pool.check_invariants();
    pool.release();
    CHECK(pool.reserved_bytes() == 0);

    cuda_mr_upstream wrapped{cccl};  // deduces cuda_mr_upstream<host_ref>
    CHECK(wrapped == cuda_mr_upstream<host_ref>{cccl});
    void* q = wrapped.allocate(64);
    wrapped.deallocate(q, 64);
}

TEST_CASE("cuda_mr_upstream: a stream-ordered CCCL ref keeps its stream calls") {
    host_lanes lanes;
    test::cuda_mr_referable<host_lanes> handle{lanes};
    host_stream_ref cccl{handle};
    cuda_mr_upstream<host_stream_ref> upstream{cccl};
    void* p = upstream.allocate_async(4096, 256, default_stream);
    std::memset(p, 2, 4096);
    upstream.deallocate_async(p, 4096, 256, default_stream);
    void* q = upstream.allocate(512, 256);
    upstream.deallocate(q, 512, 256);
    CHECK(lanes.live_blocks() == 0);
    lanes.check_invariants();
}

#endif  // POOLKIT_HAS_CUDA
