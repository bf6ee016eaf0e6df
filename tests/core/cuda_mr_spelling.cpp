// poolkit resources are CCCL cuda::mr resources in the spelling of the CCCL they are built with
// (core/cuda_mr_spelling.hpp), and adding CCCL 3.1's overloads of allocate and deallocate leaves
// poolkit's own calls unambiguous. Host memory only: this runs without a GPU.
#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/core/any_resource.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/resource_ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <cstring>

#if POOLKIT_HAS_CUDA
#  include "../support/cuda_mr.hpp"
#endif

using namespace poolkit;

namespace {

using host = new_delete_resource;
using host_pool = best_fit<host>;
using host_lanes = stream_ordered<host, lanes<best_fit>, completed_events>;

// Every call poolkit code makes, with the literals that could convert to a stream.
template <class R>
concept poolkit_calls_resolve = requires(R& r, void* p, std::size_t bytes) {
    { r.allocate(bytes) } -> std::same_as<void*>;
    { r.allocate(bytes, 256) } -> std::same_as<void*>;
    { r.allocate(0, 256) } -> std::same_as<void*>;
    { r.allocate(0) } -> std::same_as<void*>;
    r.deallocate(p, bytes);
    r.deallocate(p, bytes, 256);
    r.deallocate(nullptr, 0);
    r.deallocate(nullptr, 0, 256);
    r.deallocate(0, 0, 256);
};
template <class R>
concept poolkit_stream_calls_resolve = poolkit_calls_resolve<R> && requires(R& r, void* p, std::size_t bytes) {
    { r.allocate_async(bytes, 256, default_stream) } -> std::same_as<void*>;
    { r.allocate_async(0, 256, default_stream) } -> std::same_as<void*>;
    r.deallocate_async(p, bytes, 256, default_stream);
    r.deallocate_async(nullptr, 0, 256, default_stream);
};

static_assert(poolkit_calls_resolve<host> && poolkit_calls_resolve<host_pool> && poolkit_calls_resolve<counted<host_pool>> &&
              poolkit_calls_resolve<ref<host_pool>> && poolkit_calls_resolve<resource_ref<host_accessible>> &&
              poolkit_calls_resolve<any_resource<host_accessible>>);
static_assert(poolkit_stream_calls_resolve<simulated_resource> && poolkit_stream_calls_resolve<host_lanes> &&
              poolkit_stream_calls_resolve<synchronized<host_lanes>> &&
              poolkit_stream_calls_resolve<stream_resource_ref<host_accessible>> && poolkit_stream_calls_resolve<any_stream_resource<>>);

}  // namespace

#if POOLKIT_HAS_CUDA

using cuda::mr::device_accessible;
using cuda::mr::host_accessible;
using test::cuda_mr_resource_with;
using test::cuda_mr_stream_resource_with;

// Resources are CCCL resources with their properties; stream resources CCCL stream resources.
static_assert(cuda_mr_resource_with<host, host_accessible> && !cuda_mr_stream_resource_with<host>);
static_assert(cuda_mr_resource_with<host_pool, host_accessible> && !cuda_mr_resource_with<host_pool, device_accessible>);
static_assert(cuda_mr_resource_with<buddy<host>, host_accessible> && cuda_mr_resource_with<fixed_size<host>, host_accessible> &&
              cuda_mr_resource_with<monotonic<host>, host_accessible> && cuda_mr_resource_with<size_classes<host>, host_accessible> &&
              cuda_mr_resource_with<caching_pool<host>, host_accessible>);
static_assert(cuda_mr_resource_with<segregator<4096, fixed_size<host>, host_pool>, host_accessible>);
static_assert(cuda_mr_resource_with<fallback<host_pool, host>, host_accessible>);
static_assert(cuda_mr_resource_with<counted<host_pool>, host_accessible> && cuda_mr_resource_with<ref<host_pool>, host_accessible>);
static_assert(cuda_mr_resource_with<resource_ref<host_accessible>, host_accessible> &&
              cuda_mr_resource_with<any_resource<host_accessible>, host_accessible>);
static_assert(cuda_mr_stream_resource_with<simulated_resource> && !cuda_mr_resource_with<simulated_resource, host_accessible>);
static_assert(cuda_mr_stream_resource_with<host_lanes, host_accessible> &&
              cuda_mr_stream_resource_with<synchronized<host_lanes>, host_accessible> &&
              cuda_mr_stream_resource_with<counted<host_lanes>, host_accessible> &&
              cuda_mr_stream_resource_with<ref<host_lanes>, host_accessible>);
static_assert(cuda_mr_stream_resource_with<segregator<4096, simulated_resource, simulated_resource>>);
static_assert(cuda_mr_stream_resource_with<stream_resource_ref<host_accessible>, host_accessible> &&
              cuda_mr_stream_resource_with<any_stream_resource<host_accessible>, host_accessible>);
static_assert(!cuda_mr_stream_resource_with<resource_ref<host_accessible>>);

// CCCL 3.1's members come only with that spelling, and the stream forms only on stream resources.
template <class R>
concept has_allocate_sync = requires(R& r, void* p) {
    { r.allocate_sync(64, 64) } -> std::same_as<void*>;
    r.deallocate_sync(p, 64, 64);
};
template <class R>
concept has_stream_first_allocate = requires(R& r, void* p) {
    { r.allocate(default_stream, 64, 64) } -> std::same_as<void*>;
    r.deallocate(default_stream, p, 64, 64);
};
static_assert(has_allocate_sync<host> == static_cast<bool>(POOLKIT_CUDA_MR_ALLOCATE_SYNC) &&
              has_allocate_sync<host_lanes> == static_cast<bool>(POOLKIT_CUDA_MR_ALLOCATE_SYNC));
static_assert(has_stream_first_allocate<host_lanes> == static_cast<bool>(POOLKIT_CUDA_MR_ALLOCATE_SYNC) &&
              !has_stream_first_allocate<host>);

TEST_CASE("CCCL's refs of the CCCL in use allocate and free through poolkit resources") {
    host_pool pool;
    test::cuda_mr_referable<host_pool> pool_handle{pool};
    test::cuda_mr_resource_ref<host_accessible> plain{pool_handle};
    void* p = test::cuda_mr_allocate(plain, 1000, 64);
    REQUIRE(p != nullptr);
    CHECK(is_aligned(p, 64));
    std::memset(p, 1, 1000);
    CHECK(pool.live_bytes() >= 1000);
    test::cuda_mr_deallocate(plain, p, 1000, 64);
    CHECK(pool.live_bytes() == 0);

    host_lanes lanes;
    test::cuda_mr_referable<host_lanes> lanes_handle{lanes};
    test::cuda_mr_stream_resource_ref<host_accessible> ordered{lanes_handle};
    void* q = test::cuda_mr_allocate_async(ordered, 4096, 256, default_stream);
    REQUIRE(q != nullptr);
    std::memset(q, 2, 4096);
    test::cuda_mr_deallocate_async(ordered, q, 4096, 256, default_stream);
    void* r = test::cuda_mr_allocate(ordered, 512, 256);
    test::cuda_mr_deallocate(ordered, r, 512, 256);
    lanes.check_invariants();

    // A poolkit type-erased ref binds too, and CCCL's ref compares through to the resource.
    resource_ref<host_accessible> erased{pool};
    test::cuda_mr_resource_ref<host_accessible> through_erased{erased};
    void* s = test::cuda_mr_allocate(through_erased, 256, 256);
    test::cuda_mr_deallocate(through_erased, s, 256, 256);
    CHECK(pool.live_bytes() == 0);
}

#  if POOLKIT_CUDA_MR_ALLOCATE_SYNC
TEST_CASE("CCCL 3.1 spelling: allocate_sync and allocate(stream, ...) through cuda::mr refs and on the resources") {
    host_pool pool;
    test::cuda_mr_referable<host_pool> pool_handle{pool};
    cuda::mr::synchronous_resource_ref<host_accessible> plain{pool_handle};
    void* p = plain.allocate_sync(1000, 64);
    std::memset(p, 1, 1000);
    plain.deallocate_sync(p, 1000, 64);

    host_lanes lanes;
    test::cuda_mr_referable<host_lanes> lanes_handle{lanes};
    cuda::mr::resource_ref<host_accessible> ordered{lanes_handle};
    void* q = ordered.allocate(default_stream, 4096, 256);
    std::memset(q, 2, 4096);
    ordered.deallocate(default_stream, q, 4096, 256);
    cuda::mr::synchronous_resource_ref<host_accessible> narrowed{ordered};
    void* r = narrowed.allocate_sync(64, 64);
    narrowed.deallocate_sync(r, 64, 64);

    // The members themselves, as CCCL's own code calls them.
    void* direct = lanes.allocate(default_stream, 128, 128);
    lanes.deallocate(default_stream, direct, 128, 128);
    counted counts{lanes};  // an adaptor has them through forwarding<>, and counts them
    void* counted_block = counts.allocate(default_stream, 256, 256);
    CHECK(counts.figures().allocations.current == 1);
    counts.deallocate_sync(counted_block, 256, 256);  // a stream block may also be freed synchronously
    CHECK(counts.figures().allocations.current == 0);
    CHECK(pool.live_bytes() == 0);
    lanes.check_invariants();
}
#  endif

#  if CCCL_VERSION >= 3002000
TEST_CASE("CCCL 3.2 and later: cuda::mr::any_resource owns a poolkit::ref to a pool") {
    host_lanes lanes;
    cuda::mr::any_resource<host_accessible> owner{ref{lanes}};
    void* p = owner.allocate(default_stream, 1000, 256);
    std::memset(p, 3, 1000);
    owner.deallocate(default_stream, p, 1000, 256);
    cuda::mr::any_resource<host_accessible> copy = owner;  // copies the ref: the same pool
    void* q = copy.allocate_sync(64, 64);
    owner.deallocate_sync(q, 64, 64);
    CHECK(copy == owner);
    lanes.check_invariants();
}
#  endif

#endif  // POOLKIT_HAS_CUDA
