// Many host threads through one allocator, on the GPU.
//   pairs:  each thread on its own non-blocking stream makes allocate/free pairs of 256 B to 2 MiB
//           (log-uniform) through one shared allocator: throughput as threads are added;
//           pairs_per_thread_stream: the same with every thread on cudaStreamPerThread.
//   server: an inference server's shape: each thread on its own stream serves requests; a request
//           allocates four buffers (64 KiB to 8 MiB), runs a short kernel on them and frees them.
//   build/bench/poolkit-bench-threads [--benchmark_filter=...]
// Compares cudaMallocAsync, the synchronized caching preset (one mutex) and the per_thread front
// over it, each preset also with capture checks only while a capture is announced (_announced).
// Items per second are summed over the threads.
#include <poolkit/presets.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <random>

namespace {

__global__ void touch(char* a, char* b, char* c, char* d) {
    const long long start = clock64();
    while (clock64() - start < 2000) {
    }
    a[threadIdx.x] = b[threadIdx.x] = c[threadIdx.x] = d[threadIdx.x] = 1;
}

// One allocator per kind for the whole process, shared by the benchmark's threads.
// The presets with capture checks only while a capture is announced (core/captures.hpp), in the
// per_thread front and in the shared pool: the eager path with no driver call for them.
struct synchronized_caching_announced : poolkit::synchronized_caching_device_resource {
    synchronized_caching_announced() {
        locked([](auto& pool) { pool.capture_checks(poolkit::capture_check::announced); });
    }
};
struct per_thread_caching_announced : poolkit::per_thread_caching_device_resource {
    per_thread_caching_announced()
        : poolkit::per_thread_caching_device_resource(
              std::in_place, poolkit::per_thread_options{.captures = poolkit::capture_check::announced}, poolkit::cuda_events{}) {
        upstream_resource().locked([](auto& pool) { pool.capture_checks(poolkit::capture_check::announced); });
    }
};

template <class Resource>
Resource& shared() {
    static auto* resource = new Resource();  // never destroyed: worker threads may outlive a run
    return *resource;
}

std::size_t log_uniform(std::mt19937_64& random, double smallest, double largest) {
    const double exponent = std::log2(smallest) + (std::log2(largest) - std::log2(smallest)) * (random() % 10000) / 10000.0;
    return static_cast<std::size_t>(std::exp2(exponent));
}

// per_thread_default: every thread on cudaStreamPerThread (its own stream under one handle).
template <class Resource, bool per_thread_default = false>
void pairs(benchmark::State& state) {
    Resource& resource = shared<Resource>();
    cudaStream_t stream{};
    if (per_thread_default) {
        stream = cudaStreamPerThread;
    } else {
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    }
    const poolkit::stream_ref on{stream};
    std::mt19937_64 random(static_cast<std::uint64_t>(state.thread_index()) + 1);
    std::size_t sizes[64];
    for (auto& size : sizes) size = log_uniform(random, 256, 2 << 20);
    for (std::size_t size : sizes) resource.deallocate_async(resource.allocate_async(size, 256, on), size, 256, on);  // warm
    std::size_t i = 0;
    for (auto _ : state) {
        const std::size_t size = sizes[i++ % 64];
        void* p = resource.allocate_async(size, 256, on);
        benchmark::DoNotOptimize(p);
        resource.deallocate_async(p, size, 256, on);
    }
    state.SetItemsProcessed(state.iterations());
    cudaStreamSynchronize(stream);
    if (!per_thread_default) cudaStreamDestroy(stream);
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
}

template <class Resource>
void server(benchmark::State& state) {
    Resource& resource = shared<Resource>();
    cudaStream_t stream{};
    cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    const poolkit::stream_ref on{stream};
    std::mt19937_64 random(static_cast<std::uint64_t>(state.thread_index()) + 101);
    for (auto _ : state) {
        std::size_t size[4];
        char* buffer[4];
        for (int b = 0; b < 4; ++b) {
            size[b] = log_uniform(random, 64 << 10, 8 << 20);
            buffer[b] = static_cast<char*>(resource.allocate_async(size[b], 256, on));
        }
        touch<<<1, 32, 0, stream>>>(buffer[0], buffer[1], buffer[2], buffer[3]);
        for (int b = 0; b < 4; ++b) resource.deallocate_async(buffer[b], size[b], 256, on);
        if (random() % 16 == 0) cudaStreamSynchronize(stream);  // a response goes out now and then
    }
    state.SetItemsProcessed(state.iterations());
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
}

}  // namespace

BENCHMARK(pairs<poolkit::cuda_async_resource>)->Name("pairs/cudaMallocAsync")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pairs<poolkit::synchronized_caching_device_resource>)->Name("pairs/synchronized_caching")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pairs<poolkit::per_thread_caching_device_resource>)->Name("pairs/per_thread_caching")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pairs<synchronized_caching_announced>)->Name("pairs/synchronized_caching_announced")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pairs<per_thread_caching_announced>)->Name("pairs/per_thread_caching_announced")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pairs<poolkit::cuda_async_resource, true>)->Name("pairs_per_thread_stream/cudaMallocAsync")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(pairs<poolkit::synchronized_caching_device_resource, true>)
    ->Name("pairs_per_thread_stream/synchronized_caching")
    ->ThreadRange(1, 16)
    ->UseRealTime();
BENCHMARK(pairs<poolkit::per_thread_caching_device_resource, true>)
    ->Name("pairs_per_thread_stream/per_thread_caching")
    ->ThreadRange(1, 16)
    ->UseRealTime();
BENCHMARK(server<poolkit::cuda_async_resource>)->Name("server/cudaMallocAsync")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(server<poolkit::synchronized_caching_device_resource>)->Name("server/synchronized_caching")->ThreadRange(1, 16)->UseRealTime();
BENCHMARK(server<poolkit::per_thread_caching_device_resource>)->Name("server/per_thread_caching")->ThreadRange(1, 16)->UseRealTime();

int main(int argc, char** argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "poolkit-bench-threads: no CUDA device\n");
        return 1;
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
