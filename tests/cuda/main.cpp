// The runner of poolkit-cuda-tests. Without a usable CUDA device it says so and exits 77, which
// ctest reports as skipped: GPU tests never pass silently on a machine that cannot run them.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cuda_runtime_api.h>

#include <cstdio>

int main(int argc, char** argv) {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
        std::printf("poolkit-cuda-tests: SKIPPED, no usable CUDA device (%s: %s); run scripts/gpu-check on a GPU machine\n",
                    cudaGetErrorName(status), cudaGetErrorString(status));
        return 77;
    }
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, 0) == cudaSuccess) {
        std::printf("poolkit-cuda-tests: %d device(s); device 0: %s, %.1f GiB\n", devices, properties.name,
                    static_cast<double>(properties.totalGlobalMem) / (1 << 30));
    }
    doctest::Context context(argc, argv);
    return context.run();
}
