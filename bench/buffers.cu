// The cost of an owning buffer: make a device_uvector<float> of N elements on a stream and let it
// go (one allocate and one free through its resource, no kernel), over the caching preset, a
// cudaMallocAsync pool and plain cudaMalloc; then the same with a fill and a reduction on it
// (Thrust), where the allocator's share is what is left over the kernels.
//   build/bench/poolkit-bench-buffers [--benchmark_filter=...]
#include <poolkit/interop/device_uvector.hpp>
#include <poolkit/interop/thrust_allocator.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>

#include <benchmark/benchmark.h>
#include <thrust/fill.h>
#include <thrust/reduce.h>

#include <memory>

namespace {

struct stream_holder {
    cudaStream_t handle = nullptr;
    stream_holder() { cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking); }
    ~stream_holder() { cudaStreamDestroy(handle); }
};

template <class Resource>
void make_and_drop(benchmark::State& state) {
    const auto count = static_cast<std::size_t>(state.range(0));
    stream_holder stream;
    auto resource = std::make_unique<Resource>();
    { poolkit::device_uvector<float> warm(count, poolkit::stream_ref{stream.handle}, *resource); }
    for (auto _ : state) {
        poolkit::device_uvector<float> v(count, poolkit::stream_ref{stream.handle}, *resource);
        benchmark::DoNotOptimize(v.data());
    }
    cudaStreamSynchronize(stream.handle);
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
    state.SetItemsProcessed(state.iterations());
}

template <class Resource>
void fill_and_reduce(benchmark::State& state) {
    const auto count = static_cast<std::size_t>(state.range(0));
    stream_holder stream;
    auto resource = std::make_unique<Resource>();
    const auto on_stream = poolkit::thrust_policy(*resource, poolkit::stream_ref{stream.handle});
    float sum = 0;
    for (auto _ : state) {
        poolkit::device_uvector<float> v(count, poolkit::stream_ref{stream.handle}, *resource);
        thrust::fill(on_stream, v.begin(), v.end(), 1.0f);
        sum += thrust::reduce(on_stream, v.begin(), v.end(), 0.0f);  // waits for the stream
    }
    benchmark::DoNotOptimize(sum);
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
    state.SetItemsProcessed(state.iterations());
}

void sizes(benchmark::internal::Benchmark* b) {
    for (long long count : {1LL << 10, 1LL << 20, 1LL << 26}) b->Arg(count);  // 4 KiB, 4 MiB, 256 MiB
    b->UseRealTime();
}

}  // namespace

BENCHMARK(make_and_drop<poolkit::caching_device_resource>)->Name("make_and_drop/caching_device_resource")->Apply(sizes);
BENCHMARK(make_and_drop<poolkit::cuda_async_resource>)->Name("make_and_drop/cudaMallocAsync")->Apply(sizes);
BENCHMARK(make_and_drop<poolkit::cuda_device_resource>)->Name("make_and_drop/cudaMalloc")->Apply(sizes);
BENCHMARK(fill_and_reduce<poolkit::caching_device_resource>)->Name("fill_and_reduce/caching_device_resource")->Apply(sizes);
BENCHMARK(fill_and_reduce<poolkit::cuda_async_resource>)->Name("fill_and_reduce/cudaMallocAsync")->Apply(sizes);
BENCHMARK(fill_and_reduce<poolkit::cuda_device_resource>)->Name("fill_and_reduce/cudaMalloc")->Apply(sizes);

BENCHMARK_MAIN();
