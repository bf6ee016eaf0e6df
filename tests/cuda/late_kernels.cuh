// Kernels whose writes or checks land late, and what the GPU tests of stream ordering share: a
// block reused before its earlier users finished shows up as a mismatch count above zero.
#pragma once

#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace poolkit::test {

// The kernels are static, so that each translation unit has its own. Not an unnamed namespace: with
// the GPU tests' files compiled as one unit (tests/CMakeLists.txt), nvcc's generated stubs cannot
// tell one here from a file's own unnamed namespace once that file uses namespace poolkit::test.

// Spins for about `cycles` clock cycles, then writes `value` everywhere: its writes land late.
static __global__ void slow_fill(std::uint32_t* data, std::size_t count, std::uint32_t value, long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) data[i] = value;
}

static __global__ void count_other(const std::uint32_t* data, std::size_t count, std::uint32_t value, long long cycles,
                                   unsigned long long* mismatches) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        if (data[i] != value) atomicAdd(mismatches, 1ull);
    }
}

constexpr long long slow = 2'000'000;  // ~1 ms at H200 clocks
constexpr int grid = 132;
constexpr int block = 256;

struct streams {
    std::vector<cudaStream_t> handles;
    explicit streams(int count) : handles(static_cast<std::size_t>(count)) {
        for (auto& s : handles) REQUIRE(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess);
    }
    ~streams() {
        for (auto s : handles) cudaStreamDestroy(s);
    }
};

struct counter {
    unsigned long long* device = nullptr;
    counter() {
        REQUIRE(cudaMalloc(&device, sizeof *device) == cudaSuccess);
        REQUIRE(cudaMemset(device, 0, sizeof *device) == cudaSuccess);
    }
    ~counter() { cudaFree(device); }
    unsigned long long read() {
        unsigned long long host = 0;
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(cudaMemcpy(&host, device, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess);
        return host;
    }
};

}  // namespace poolkit::test
