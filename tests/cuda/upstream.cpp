// What is special about each CUDA upstream, on a real device.
#include "../support/cuda_mr.hpp"
#include "support.hpp"

#include <poolkit/core/resource_ref.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>
#include <poolkit/upstream/cuda_managed_resource.hpp>
#include <poolkit/upstream/cuda_pinned_resource.hpp>

#include <cstring>
#include <string>

namespace {

using namespace poolkit;
using test::scoped_stream;

}  // namespace

TEST_CASE("CUDA upstreams bind to CCCL's cuda::mr resource references") {
    cuda_device_resource device;
    cuda_async_resource async;
    cuda_pinned_resource pinned;
    test::cuda_mr_referable<cuda_async_resource> async_handle{async};  // move-only: a ref from CCCL 3.2 on
    test::cuda_mr_stream_resource_ref<cuda::mr::device_accessible> device_ref{device};
    test::cuda_mr_stream_resource_ref<cuda::mr::device_accessible> async_ref{async_handle};
    test::cuda_mr_resource_ref<cuda::mr::host_accessible, cuda::mr::device_accessible> pinned_ref{pinned};
    scoped_stream stream;
    for (auto* r : {&device_ref, &async_ref}) {
        void* pointer = test::cuda_mr_allocate_async(*r, 1 << 20, 256, ::cuda::stream_ref{stream.handle});
        REQUIRE(pointer != nullptr);
        CHECK(cudaMemsetAsync(pointer, 1, 1 << 20, stream.handle) == cudaSuccess);
        test::cuda_mr_deallocate_async(*r, pointer, 1 << 20, 256, ::cuda::stream_ref{stream.handle});
    }
    void* host = test::cuda_mr_allocate(pinned_ref, 4096, 256);
    std::memset(host, 7, 4096);
    test::cuda_mr_deallocate(pinned_ref, host, 4096, 256);
    CHECK(cudaStreamSynchronize(stream.handle) == cudaSuccess);
}

#if POOLKIT_CUDA_MR_ALLOCATE_SYNC
TEST_CASE("CCCL 3.1 spelling: allocate(stream, ...) and allocate_sync through cuda::mr refs to CUDA upstreams") {
    cuda_device_resource device;
    cuda_async_resource async;
    cuda_managed_resource managed;
    test::cuda_mr_referable<cuda_async_resource> async_handle{async};
    cuda::mr::resource_ref<cuda::mr::device_accessible> device_ref{device};
    cuda::mr::resource_ref<cuda::mr::device_accessible> async_ref{async_handle};
    cuda::mr::synchronous_resource_ref<cuda::mr::device_accessible, cuda::mr::host_accessible> managed_ref{managed};
    scoped_stream stream;
    for (auto* r : {&device_ref, &async_ref}) {
        void* on_stream = r->allocate(::cuda::stream_ref{stream.handle}, 1 << 20, 256);
        REQUIRE(on_stream != nullptr);
        CHECK(cudaMemsetAsync(on_stream, 1, 1 << 20, stream.handle) == cudaSuccess);
        r->deallocate(::cuda::stream_ref{stream.handle}, on_stream, 1 << 20, 256);
        void* plain = r->allocate_sync(4096, 512);
        CHECK(is_aligned(plain, 512));
        CHECK(cudaMemset(plain, 0, 4096) == cudaSuccess);
        r->deallocate_sync(plain, 4096, 512);
    }
    void* both = managed_ref.allocate_sync(4096, 256);
    std::memset(both, 3, 4096);
    CHECK(cudaMemset(both, 4, 4096) == cudaSuccess);
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(static_cast<unsigned char*>(both)[4095] == 4);
    managed_ref.deallocate_sync(both, 4096, 256);
    CHECK(cudaStreamSynchronize(stream.handle) == cudaSuccess);
}
#endif

TEST_CASE("alignments beyond 256 are met by over-allocating, and the base is freed") {
    cuda_device_resource device;
    cuda_async_resource async;
    for (std::size_t alignment : {std::size_t{512}, std::size_t{64} << 10, std::size_t{2} << 20}) {
        CAPTURE(alignment);
        void* a = device.allocate(1000, alignment);
        void* b = async.allocate(1000, alignment);
        CHECK(is_aligned(a, alignment));
        CHECK(is_aligned(b, alignment));
        CHECK(cudaMemset(a, 0, 1000) == cudaSuccess);
        CHECK(cudaMemset(b, 0, 1000) == cudaSuccess);
        device.deallocate(a, 1000, alignment);
        async.deallocate(b, 1000, alignment);
    }
    CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("device exhaustion throws out_of_memory with what the device has free, and is not sticky") {
    cuda_device_resource device;
    cuda_async_resource async;
    std::size_t free_bytes = 0, total_bytes = 0;
    REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
    const std::size_t too_much = total_bytes * 4;
    try {
        static_cast<void>(device.allocate(too_much));
        FAIL("cudaMalloc of four times the device succeeded");
    } catch (const out_of_memory& error) {
        const std::string message = error.what();
        CHECK(message.find("cuda_device_resource") != std::string::npos);
        CHECK(message.find("available on the device") != std::string::npos);
        CHECK(error.figures().limit_bytes == total_bytes);
    }
    try {
        static_cast<void>(async.allocate(too_much));
        FAIL("cudaMallocFromPoolAsync of four times the device succeeded");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().reserved_bytes.has_value());
    }
    CHECK(cudaGetLastError() == cudaSuccess);
    void* after = device.allocate(1 << 20);  // the device still works
    device.deallocate(after, 1 << 20);
}

TEST_CASE("cuda_async_resource: owned pools, views, stream order, release") {
    scoped_stream stream;
    cuda_async_resource owned{{.release_threshold = std::size_t{1} << 30}};
    CHECK(owned.owns_pool());
    CHECK(owned == owned);
    CHECK_FALSE(owned == cuda_async_resource::device_default());
    CHECK(cuda_async_resource::device_default() == cuda_async_resource::device_default());
    CHECK(cuda_async_resource::view(owned.pool_handle()) == owned);

    void* pointer = owned.allocate_async(32 << 20, 256, stream_ref{stream.handle});
    REQUIRE(cudaMemsetAsync(pointer, 3, 32 << 20, stream.handle) == cudaSuccess);
    CHECK(owned.live_bytes() >= (32 << 20));
    CHECK(owned.reserved_bytes() >= (32 << 20));
    owned.deallocate_async(pointer, 32 << 20, 256, stream_ref{stream.handle});
    REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
    CHECK(owned.live_bytes() == 0);
    CHECK(owned.reserved_bytes() >= (32 << 20));  // kept under the release threshold
    owned.release();
    CHECK(owned.reserved_bytes() == 0);

    cuda_async_resource moved = std::move(owned);
    CHECK(moved.owns_pool());
    CHECK_FALSE(owned.owns_pool());  // NOLINT(bugprone-use-after-move): the moved-from state is defined
    void* again = moved.allocate(4096);
    moved.deallocate(again, 4096);
}

TEST_CASE("cuda_device_resource::deallocate_async waits for the stream's work before freeing") {
    cuda_device_resource device;
    scoped_stream stream;
    for (int round = 0; round < 8; ++round) {
        void* pointer = device.allocate_async(64 << 20, 256, stream_ref{stream.handle});
        REQUIRE(cudaMemsetAsync(pointer, round, 64 << 20, stream.handle) == cudaSuccess);
        device.deallocate_async(pointer, 64 << 20, 256, stream_ref{stream.handle});
    }
    CHECK(cudaStreamSynchronize(stream.handle) == cudaSuccess);
}

TEST_CASE("pinned and managed memory are usable from the host and the device") {
    cuda_pinned_resource pinned{{.flags = cudaHostAllocPortable}};
    cuda_managed_resource managed;
    cuda_device_resource device;
    constexpr std::size_t bytes = 1 << 20;
    auto* host = static_cast<unsigned char*>(pinned.allocate(bytes));
    auto* unified = static_cast<unsigned char*>(managed.allocate(bytes));
    void* on_device = device.allocate(bytes);
    std::memset(host, 0x11, bytes);
    std::memset(unified, 0x22, bytes);
    REQUIRE(cudaMemcpy(on_device, host, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    REQUIRE(cudaMemcpy(unified, on_device, bytes, cudaMemcpyDeviceToDevice) == cudaSuccess);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(unified[0] == 0x11);
    CHECK(unified[bytes - 1] == 0x11);
    CHECK(pinned == cuda_pinned_resource{});
    device.deallocate(on_device, bytes);
    managed.deallocate(unified, bytes);
    pinned.deallocate(host, bytes);
}

TEST_CASE("type-erased references carry device_accessible") {
    cuda_device_resource device;
    stream_resource_ref<device_accessible> erased{device};
    scoped_stream stream;
    void* pointer = erased.allocate_async(4096, 256, stream_ref{stream.handle});
    CHECK(cudaMemsetAsync(pointer, 0, 4096, stream.handle) == cudaSuccess);
    erased.deallocate_async(pointer, 4096, 256, stream_ref{stream.handle});
    static_assert(has_property<stream_resource_ref<device_accessible>, device_accessible>);
    static_assert(!has_property<stream_resource_ref<device_accessible>, host_accessible>);
}
