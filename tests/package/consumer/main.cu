// Compiled by nvcc with nothing but poolkit::poolkit's usage requirements: C++20 and CUDA come from
// the package. Runs without a GPU (the kernel only where there is one). One header: main.cpp
// includes them all, and tests/cuda/kernels.cu compiles them all under nvcc.
#include <poolkit/upstream/cuda_device_resource.hpp>

#include <cstdio>

static_assert(__cplusplus >= 202002L, "poolkit::poolkit gives nvcc C++20");
static_assert(POOLKIT_HAS_CUDA == 1, "a .cu consumer gets poolkit with CUDA");

__global__ void fill(int* data, int value) { data[threadIdx.x] = value; }

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("consumer_cuda: C++20 under nvcc, poolkit with CUDA; no GPU, so no kernel\n");
        return 0;
    }
    poolkit::cuda_device_resource device;
    auto* data = static_cast<int*>(device.allocate(32 * sizeof(int)));
    fill<<<1, 32>>>(data, 7);
    int host[32] = {};
    const bool ok = cudaMemcpy(host, data, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess && host[31] == 7;
    device.deallocate(data, 32 * sizeof(int));
    std::printf("consumer_cuda: C++20 under nvcc, poolkit with CUDA; kernel %s\n", ok ? "ran" : "FAILED");
    return ok ? 0 : 1;
}
