// Kernels write and check patterns in blocks from each CUDA upstream: the memory is real device
// memory on the stream it was allocated for. Compiled by nvcc (the other GPU tests use g++).
#include "support.hpp"

#include <poolkit/poolkit.hpp>

#include <cstdint>

namespace {

__global__ void write_pattern(std::uint32_t* data, std::size_t count, std::uint32_t seed) {
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        data[i] = seed ^ static_cast<std::uint32_t>(i * 2654435761u);
    }
}

__global__ void count_mismatches(const std::uint32_t* data, std::size_t count, std::uint32_t seed, unsigned long long* mismatches) {
    for (std::size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        if (data[i] != (seed ^ static_cast<std::uint32_t>(i * 2654435761u))) atomicAdd(mismatches, 1ull);
    }
}

template <class Resource>
void round_trip_on_stream(Resource& resource, cudaStream_t stream) {
    constexpr std::size_t count = std::size_t{16} << 20;  // 64 MiB of uint32
    auto* mismatches = static_cast<unsigned long long*>(resource.allocate_async(sizeof(unsigned long long), 256, stream));
    REQUIRE(cudaMemsetAsync(mismatches, 0, sizeof(unsigned long long), stream) == cudaSuccess);
    for (std::uint32_t round = 0; round < 4; ++round) {
        auto* data = static_cast<std::uint32_t*>(resource.allocate_async(count * sizeof(std::uint32_t), 256, stream));
        write_pattern<<<264, 256, 0, stream>>>(data, count, round);
        count_mismatches<<<264, 256, 0, stream>>>(data, count, round, mismatches);
        resource.deallocate_async(data, count * sizeof(std::uint32_t), 256, stream);
    }
    REQUIRE(cudaGetLastError() == cudaSuccess);
    unsigned long long host = 1;
    REQUIRE(cudaMemcpyAsync(&host, mismatches, sizeof host, cudaMemcpyDeviceToHost, stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(host == 0);
    resource.deallocate_async(mismatches, sizeof(unsigned long long), 256, stream);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
}

}  // namespace

TEST_CASE("kernels write and read back blocks from every CUDA upstream on a stream") {
    cudaStream_t stream{};
    REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
    poolkit::cuda_device_resource device;
    poolkit::cuda_async_resource async;
    poolkit::cuda_managed_resource managed;
    SUBCASE("cuda_device_resource") { round_trip_on_stream(device, stream); }
    SUBCASE("cuda_async_resource") { round_trip_on_stream(async, stream); }
    SUBCASE("cuda_managed_resource") { round_trip_on_stream(managed, stream); }
    cudaStreamDestroy(stream);
}
