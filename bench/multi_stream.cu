// The shape of RMM's multi_stream_allocations: on each of N streams in turn, allocate a block, run
// a kernel on it, free it; wait for all at the end of each iteration. A resource that orders the
// streams behind each other (or synchronizes, like cudaMalloc/cudaFree) shows up as N times slower.
//   build/bench/poolkit-bench-multi_stream [--benchmark_filter=...]
// Arguments: streams, kernels per iteration.
#include <poolkit/presets.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace {

constexpr std::size_t block_bytes = std::size_t{1} << 20;
constexpr long long kernel_cycles = 100'000;  // ~50 us at H200 clocks

__global__ void busy(char* data, long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) {
    }
    data[threadIdx.x] = 1;
}

template <class Resource>
void multi_stream(benchmark::State& state) {
    const auto stream_count = static_cast<int>(state.range(0));
    const auto kernels = static_cast<int>(state.range(1));
    std::vector<cudaStream_t> streams(static_cast<std::size_t>(stream_count));
    for (auto& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    auto resource = std::make_unique<Resource>();
    auto iteration = [&] {
        for (int k = 0; k < kernels; ++k) {
            cudaStream_t s = streams[static_cast<std::size_t>(k % stream_count)];
            void* p = resource->allocate_async(block_bytes, 256, poolkit::stream_ref{s});
            busy<<<1, 32, 0, s>>>(static_cast<char*>(p), kernel_cycles);
            resource->deallocate_async(p, block_bytes, 256, poolkit::stream_ref{s});
        }
        cudaDeviceSynchronize();
    };
    iteration();  // warm: pools filled, streams seen
    for (auto _ : state) iteration();
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
    state.SetItemsProcessed(state.iterations() * kernels);
    resource.reset();
    for (auto s : streams) cudaStreamDestroy(s);
}

void arguments(benchmark::internal::Benchmark* b) {
    for (int streams : {1, 4, 8}) b->Args({streams, 64});
    b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

}  // namespace

BENCHMARK(multi_stream<poolkit::cuda_async_resource>)->Name("multi_stream/cudaMallocAsync")->Apply(arguments);
BENCHMARK(multi_stream<poolkit::caching_device_resource>)->Name("multi_stream/caching_device_resource")->Apply(arguments);
BENCHMARK(multi_stream<poolkit::cuda_device_resource>)->Name("multi_stream/cudaMalloc")->Apply(arguments);

int main(int argc, char** argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "poolkit-bench-multi_stream: no CUDA device\n");
        return 1;
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
