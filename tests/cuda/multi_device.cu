// Several devices in one process: the registry's per-device presets under threads bound to
// different devices, a portable pinned pool whose buffers are used by streams of every device
// (record_use, events made on each stream's device), and the expandable preset mapping its
// memory for a peer. Cases that need two devices say so and return where there is one.
#include "late_kernels.cuh"
#include "support.hpp"

#include <poolkit/interop/device_registry.hpp>
#include <poolkit/presets.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

using namespace poolkit;
using namespace poolkit::test;

namespace {

int device_count() {
    int devices = 0;
    REQUIRE(cudaGetDeviceCount(&devices) == cudaSuccess);
    return devices;
}

// Two devices, device 1 able to reach device 0's memory; else says why the case is skipped.
bool two_peer_devices() {
    int can_access = 0;
    if (device_count() >= 2 && cudaDeviceCanAccessPeer(&can_access, 1, 0) == cudaSuccess && can_access != 0) return true;
    MESSAGE("skipped: needs two devices where device 1 can access device 0's memory");
    return false;
}

// The device of the calling thread, restored when the scope ends.
struct on_device {
    int previous = 0;
    explicit on_device(int device) {
        REQUIRE(cudaGetDevice(&previous) == cudaSuccess);
        REQUIRE(cudaSetDevice(device) == cudaSuccess);
    }
    on_device(const on_device&) = delete;
    on_device& operator=(const on_device&) = delete;
    ~on_device() { cudaSetDevice(previous); }
};

}  // namespace

TEST_CASE("several devices: threads bound to each device allocate through its registered preset at once") {
    const int devices = device_count();
    constexpr int threads_per_device = 4;
    constexpr int rounds = 200;
    std::vector<std::unique_ptr<synchronized_caching_device_resource>> pools;
    for (int d = 0; d < devices; ++d) {
        const on_device scope(d);
        pools.push_back(std::make_unique<synchronized_caching_device_resource>());
        set_device_resource(d, *pools.back());
    }
    std::atomic<int> wrong_device{0}, failures{0};
    std::vector<unsigned long long*> mismatch_counts(static_cast<std::size_t>(devices));
    for (int d = 0; d < devices; ++d) {
        const on_device scope(d);
        REQUIRE(cudaMalloc(&mismatch_counts[static_cast<std::size_t>(d)], sizeof(unsigned long long)) == cudaSuccess);
        REQUIRE(cudaMemset(mismatch_counts[static_cast<std::size_t>(d)], 0, sizeof(unsigned long long)) == cudaSuccess);
    }
    std::vector<std::thread> threads;
    for (int d = 0; d < devices; ++d) {
        for (int t = 0; t < threads_per_device; ++t) {
            threads.emplace_back([&, d, t] {
                if (cudaSetDevice(d) != cudaSuccess) return void(++failures);
                cudaStream_t stream{};
                if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return void(++failures);
                std::mt19937 random(static_cast<unsigned>(d * 100 + t));
                const auto value = static_cast<std::uint32_t>(d * 100 + t + 1);
                for (int round = 0; round < rounds; ++round) {
                    const std::size_t count = 1 + random() % (std::size_t{1} << 18);
                    device_resource_ref pool = current_device_resource();
                    auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{stream}));
                    cudaPointerAttributes attributes{};
                    if (cudaPointerGetAttributes(&attributes, data) != cudaSuccess || attributes.device != d) ++wrong_device;
                    slow_fill<<<grid, block, 0, stream>>>(data, count, value, round % 8 == 0 ? slow : 0);
                    count_other<<<grid, block, 0, stream>>>(data, count, value, 0, mismatch_counts[static_cast<std::size_t>(d)]);
                    pool.deallocate_async(data, count * 4, 256, stream_ref{stream});
                }
                if (cudaStreamSynchronize(stream) != cudaSuccess) ++failures;
                cudaStreamDestroy(stream);
            });
        }
    }
    for (auto& thread : threads) thread.join();
    CHECK(failures == 0);
    CHECK(wrong_device == 0);
    for (int d = 0; d < devices; ++d) {
        const on_device scope(d);
        unsigned long long mismatches = 1;
        REQUIRE(cudaMemcpy(&mismatches, mismatch_counts[static_cast<std::size_t>(d)], sizeof mismatches, cudaMemcpyDeviceToHost) ==
                cudaSuccess);
        CHECK(mismatches == 0);
        cudaFree(mismatch_counts[static_cast<std::size_t>(d)]);
        CHECK(pools[static_cast<std::size_t>(d)]->upstream_resource().live_blocks() == 0);
        cuda_device_resource plain;
        set_device_resource(d, plain);
    }
    MESSAGE("devices: " << devices << ", threads: " << devices * threads_per_device);
}

TEST_CASE("several devices: a portable pinned pool's buffer waits for the streams of both devices that used it") {
    if (!two_peer_devices()) return;
    caching_pinned_resource pinned{std::in_place, cuda_pinned_options{.flags = cudaHostAllocPortable}};
    constexpr std::size_t bytes = 8 * MiB;
    constexpr int rounds = 4;
    cudaStream_t copies[2]{};
    void* targets[2][rounds]{};
    std::uint32_t* scratch[2]{};
    for (int d = 0; d < 2; ++d) {
        const on_device scope(d);
        REQUIRE(cudaStreamCreateWithFlags(&copies[d], cudaStreamNonBlocking) == cudaSuccess);
        for (auto& target : targets[d]) REQUIRE(cudaMalloc(&target, bytes) == cudaSuccess);
        REQUIRE(cudaMalloc(&scratch[d], 4) == cudaSuccess);
        // Hold the copy stream back, so every copy below is still pending when its buffer is freed.
        slow_fill<<<1, 1, 0, copies[d]>>>(scratch[d], 1, 0, slow * (d == 0 ? 5 : 20));
    }
    int reused = 0;
    void* previous = nullptr;
    for (int round = 0; round < rounds; ++round) {
        auto* staging = static_cast<unsigned char*>(pinned.allocate(bytes));
        reused += staging == previous;
        std::memset(staging, round + 1, bytes);  // would clobber a pending copy if reused too early
        for (int d = 0; d < 2; ++d) {
            const on_device scope(d);
            REQUIRE(cudaMemcpyAsync(targets[d][round], staging, bytes, cudaMemcpyHostToDevice, copies[d]) == cudaSuccess);
        }
        // Recorded with device 0 current: the event for device 1's stream must be made on device 1.
        pinned.record_use(staging, stream_ref{copies[0]});
        pinned.record_use(staging, stream_ref{copies[1]});
        pinned.deallocate(staging, bytes);
        previous = staging;
    }
    CHECK(reused == 0);
    std::vector<unsigned char> check(bytes);
    for (int d = 0; d < 2; ++d) {
        const on_device scope(d);
        REQUIRE(cudaStreamSynchronize(copies[d]) == cudaSuccess);
        for (int round = 0; round < rounds; ++round) {
            REQUIRE(cudaMemcpy(check.data(), targets[d][round], bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
            CHECK(check[0] == round + 1);
            CHECK(check[bytes - 1] == round + 1);
            cudaFree(targets[d][round]);
        }
        cudaFree(scratch[d]);
        cudaStreamDestroy(copies[d]);
    }
    // Done on both devices: a cached buffer serves the next request without cudaHostAlloc.
    void* again = pinned.allocate(bytes);
    pinned.deallocate(again, bytes);
    pinned.release();
}

TEST_CASE("several devices: the expandable preset maps its memory for a peer when asked") {
    if (!two_peer_devices()) return;
    const on_device scope(0);
    expandable_device_resource pool{std::in_place, cuda_vmm_options{.device = 0, .peers = {1}}};
    constexpr std::size_t count = (3 * MiB + 4096) / 4;
    auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, default_stream));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    {
        const on_device peer(1);  // device 1's kernel writes device 0's mapped granules
        slow_fill<<<grid, block>>>(data, count, 0xC0FFEEu, 0);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    }
    std::vector<std::uint32_t> host(count);
    REQUIRE(cudaMemcpy(host.data(), data, count * 4, cudaMemcpyDeviceToHost) == cudaSuccess);
    CHECK(host.front() == 0xC0FFEEu);
    CHECK(host.back() == 0xC0FFEEu);
    pool.deallocate_async(data, count * 4, 256, default_stream);
    pool.release();
}
