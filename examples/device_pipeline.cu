// A small pipeline entirely on poolkit's owning device buffers over the caching preset: fill,
// transform with Thrust, reduce — every buffer, and Thrust's temporary storage, allocated and freed
// on one stream through the pool: no cudaMalloc after its first chunk. Run by the tests where there
// is a GPU (exit 77 elsewhere: skipped).
#include <poolkit/interop/device_uvector.hpp>
#include <poolkit/interop/thrust_allocator.hpp>
#include <poolkit/presets.hpp>

#include <thrust/reduce.h>
#include <thrust/sequence.h>
#include <thrust/transform.h>

#include <cstdint>
#include <cstdio>

struct scale_and_shift {
    float scale, shift;
    __device__ float operator()(float x) const { return x * scale + shift; }
};

int main() {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::puts("device_pipeline: no GPU, skipped");
        return 77;
    }
    poolkit::caching_device_resource pool;  // stream-ordered caching pool over cudaMalloc
    cudaStream_t stream = nullptr;
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    const auto on_stream = poolkit::thrust_policy(pool, poolkit::stream_ref{stream});  // temporaries from the pool too

    double total = 0;
    for (int step = 0; step < 10; ++step) {
        const std::size_t count = std::size_t{1} << (16 + step % 4);  // shapes vary, as in real work
        poolkit::device_uvector<float> input(count, stream, pool);  // uninitialized: no fill kernel
        poolkit::device_uvector<float> output(count, stream, pool);
        thrust::sequence(on_stream, input.begin(), input.end());
        thrust::transform(on_stream, input.begin(), input.end(), output.begin(), scale_and_shift{0.5f, 1.0f});
        total += thrust::reduce(on_stream, output.begin(), output.end(), 0.0);
        // input and output go back to the pool on `stream` here; the next step reuses them.
    }
    cudaStreamSynchronize(stream);
    // sum over steps of (0.5 * n(n-1)/2 + n) for n = 2^16, 2^17, 2^18, 2^19, 2^16, ...
    double expected = 0;
    for (int step = 0; step < 10; ++step) {
        const double n = static_cast<double>(std::size_t{1} << (16 + step % 4));
        expected += 0.5 * n * (n - 1) / 2 + n;
    }
    std::printf("device_pipeline: sum %.0f (expected %.0f); pool reserves %.1f MiB\n", total, expected,
                static_cast<double>(pool.reserved_bytes()) / (1 << 20));
    cudaStreamDestroy(stream);
    return total == expected ? 0 : 1;
}
