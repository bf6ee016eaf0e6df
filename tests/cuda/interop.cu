// Thrust, cuda::mr, the device registry and std::pmr on a real GPU.
#include "../support/cuda_mr.hpp"
#include "support.hpp"

#include <poolkit/interop/cuda_mr_upstream.hpp>
#include <poolkit/interop/device_registry.hpp>
#include <poolkit/interop/pmr_adaptor.hpp>
#include <poolkit/interop/thrust_allocator.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_pinned_resource.hpp>

#include <thrust/device_vector.h>
#include <thrust/execution_policy.h>
#include <thrust/functional.h>
#include <thrust/host_vector.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform.h>

#include <memory_resource>
#include <random>
#include <vector>

namespace poolkit::test {

// Counts what passes through, to show where Thrust took its memory.
template <class Upstream>
struct counting : forward_properties<counting<Upstream>, Upstream> {
    Upstream* upstream;
    std::size_t calls = 0;
    std::size_t largest = 0;
    void* allocate(std::size_t n, std::size_t a) { return note(n), upstream->allocate(n, a); }
    void deallocate(void* p, std::size_t n, std::size_t a) noexcept { upstream->deallocate(p, n, a); }
    void* allocate_async(std::size_t n, std::size_t a, stream_ref s) { return note(n), upstream->allocate_async(n, a, s); }
    void deallocate_async(void* p, std::size_t n, std::size_t a, stream_ref s) noexcept { upstream->deallocate_async(p, n, a, s); }
    void note(std::size_t n) {
        ++calls;
        largest = std::max(largest, n);
    }
    friend bool operator==(const counting& a, const counting& b) { return &a == &b; }
};

}  // namespace poolkit::test

namespace {

using namespace poolkit;
using test::counting;

using test::scoped_stream;

}  // namespace

TEST_CASE("thrust::sort of 10 million keys takes its temporary storage from a poolkit pool") {
    scoped_stream stream;
    caching_device_resource pool;
    counting<caching_device_resource> counted{{}, &pool};
    constexpr std::size_t count = 10'000'000;
    using allocator = thrust_allocator<unsigned, counting<caching_device_resource>>;
    thrust::device_vector<unsigned, allocator> keys(count, allocator{counted, stream_ref{stream.handle}});
    const std::size_t after_vector = counted.calls;
    CHECK(after_vector >= 1);
    CHECK(counted.largest >= count * sizeof(unsigned));

    std::vector<unsigned> host(count);
    std::mt19937 random(17);
    for (auto& key : host) key = random();
    thrust::copy(host.begin(), host.end(), keys.begin());
    thrust::sort(thrust_policy(counted, stream_ref{stream.handle}), keys.begin(), keys.end());
    REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
    CHECK(counted.calls > after_vector);  // the sort's temporary storage came through the pool

    std::vector<unsigned> sorted(count);
    thrust::copy(keys.begin(), keys.end(), sorted.begin());
    std::sort(host.begin(), host.end());
    CHECK(sorted == host);

    // A second sort reuses the cached temporary storage: no new upstream chunk.
    const std::size_t reserved = pool.reserved_bytes();
    thrust::sort(thrust_policy_nosync(counted, stream_ref{stream.handle}), keys.begin(), keys.end(), thrust::greater<unsigned>());
    REQUIRE(cudaStreamSynchronize(stream.handle) == cudaSuccess);
    CHECK(pool.reserved_bytes() == reserved);
}

TEST_CASE("any cuda::mr resource serves as a poolkit upstream, and poolkit pools as cuda::mr resources") {
    cuda_async_resource async;
    test::cuda_mr_referable<cuda_async_resource> async_handle{async};  // move-only: a ref from CCCL 3.2 on
    using cccl_ref = test::cuda_mr_stream_resource_ref<cuda::mr::device_accessible>;
    cccl_ref cccl{async_handle};
    best_fit<cuda_mr_upstream<cccl_ref>> pool{cccl};
    void* p = pool.allocate(1 << 20);
    CHECK(cudaMemset(p, 0, 1 << 20) == cudaSuccess);
    pool.deallocate(p, 1 << 20);
    cuda_mr_upstream<cccl_ref> ordered{cccl};
    void* o = ordered.allocate_async(1 << 20, 256, stream_ref{cudaStreamPerThread});
    CHECK(cudaMemsetAsync(o, 0, 1 << 20, cudaStreamPerThread) == cudaSuccess);
    ordered.deallocate_async(o, 1 << 20, 256, stream_ref{cudaStreamPerThread});
#if !POOLKIT_CUDA_MR_ALLOCATE_SYNC
    // CCCL 3.0's resources already have poolkit's spelling: they serve unwrapped.
    best_fit<cccl_ref> direct{cccl};
    void* d = direct.allocate(1 << 20);
    direct.deallocate(d, 1 << 20);
#endif

    caching_device_resource caching;
    test::cuda_mr_referable<caching_device_resource> caching_handle{caching};
    test::cuda_mr_stream_resource_ref<cuda::mr::device_accessible> as_cccl{caching_handle};
    void* q = test::cuda_mr_allocate_async(as_cccl, 4096, 256, ::cuda::stream_ref{cudaStreamPerThread});
    test::cuda_mr_deallocate_async(as_cccl, q, 4096, 256, ::cuda::stream_ref{cudaStreamPerThread});
    REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
}

TEST_CASE("the device registry keeps one resource per device, for every device present") {
    int devices = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    int original = 0;
    REQUIRE(cudaGetDevice(&original) == cudaSuccess);
    std::vector<std::unique_ptr<caching_device_resource>> pools;
    for (int d = 0; d < devices; ++d) {
        REQUIRE(cudaSetDevice(d) == cudaSuccess);
        pools.push_back(std::make_unique<caching_device_resource>());
        const device_resource_ref previous = set_current_device_resource(*pools.back());
        CHECK_FALSE(previous == device_resource_ref{*pools.back()});
        void* p = current_device_resource().allocate_async(1 << 20, 256, stream_ref{cudaStreamPerThread});
        cudaPointerAttributes attributes{};
        REQUIRE(cudaPointerGetAttributes(&attributes, p) == cudaSuccess);
        CHECK(attributes.device == d);
        current_device_resource().deallocate_async(p, 1 << 20, 256, stream_ref{cudaStreamPerThread});
        REQUIRE(cudaStreamSynchronize(cudaStreamPerThread) == cudaSuccess);
    }
    for (int d = 0; d < devices; ++d) {
        CHECK(device_resource(d) == device_resource_ref{*pools[static_cast<std::size_t>(d)]});
        cuda_device_resource plain;
        set_device_resource(d, plain);  // leave the default behaviour behind
    }
    CHECK_THROWS_AS(static_cast<void>(device_resource(devices)), std::out_of_range);
    REQUIRE(cudaSetDevice(original) == cudaSuccess);
    MESSAGE("devices tested: " << devices);
}

TEST_CASE("std::pmr containers over pinned host memory") {
    caching_pinned_resource pinned;
    pmr_adaptor<ref<caching_pinned_resource>> memory{pinned};
    std::pmr::vector<double> values{&memory};
    for (int i = 0; i < 100000; ++i) values.push_back(i * 0.5);
    CHECK(values[99999] == 49999.5);
    cudaPointerAttributes attributes{};
    REQUIRE(cudaPointerGetAttributes(&attributes, values.data()) == cudaSuccess);
    CHECK(attributes.type == cudaMemoryTypeHost);  // page-locked
}
