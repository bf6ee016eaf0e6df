// Several streams through one allocator on the GPU, the CPU cost per call (no kernels: what the
// allocator itself costs, as in the bundled traces' replays):
//   streams/<resource>/N:   allocate + free pairs, each on the next of N streams in turn
//   pipeline/<resource>/N:  a pipeline handing buffers on: each step allocates on the next of N
//                           streams and frees, on that stream, the block the step before allocated
//                           on its own — every free is on another stream than the allocation
// Items are calls (allocate or free); compare each N with N = 1 and each resource with the others
// in the same run. Included by pipeline.cu, and by torch/pipeline_torch.cpp, which adds PyTorch's
// caching allocator (c10's raw_alloc_with_stream / raw_delete) where its C++ library is at hand.
#pragma once

#include <poolkit/presets.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>

#include <benchmark/benchmark.h>

#include <cuda_runtime_api.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace poolkit_bench {

// Sizes of a pipeline's buffers: a few shapes, 4 KiB to 4 MiB.
inline constexpr std::size_t sizes[] = {4096, 262144, 1 << 20, 4 << 20, 65536, 12288};
inline constexpr std::size_t size_count = sizeof(sizes) / sizeof(sizes[0]);

inline std::vector<cudaStream_t> make_streams(std::size_t count) {
    std::vector<cudaStream_t> streams(count);
    for (auto& s : streams) cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    return streams;
}

// Device memory the resource holds at the end, where it says (MiB).
template <class Resource>
void count_reserved(benchmark::State& state, const Resource& resource) {
    if constexpr (requires { resource.reserved_bytes(); }) {
        state.counters["reserved_MiB"] = static_cast<double>(resource.reserved_bytes()) / (1 << 20);
    }
}

inline void finish(benchmark::State& state, std::vector<cudaStream_t>& streams) {
    cudaDeviceSynchronize();
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
    for (auto s : streams) cudaStreamDestroy(s);
}

template <class Resource>
void streams(benchmark::State& state) {
    auto streams = make_streams(static_cast<std::size_t>(state.range(0)));
    {
        auto resource = std::make_unique<Resource>();
        const auto step = [&](std::size_t i) {
            const poolkit::stream_ref on{streams[i % streams.size()]};
            const std::size_t size = sizes[i % size_count];
            void* p = resource->allocate_async(size, 256, on);
            benchmark::DoNotOptimize(p);
            resource->deallocate_async(p, size, 256, on);
        };
        for (std::size_t i = 0; i < streams.size() * size_count * 2; ++i) step(i);  // warm: every stream seen, the pool filled
        std::size_t i = 0;
        for (auto _ : state) step(i++);
        state.SetItemsProcessed(state.iterations() * 2);
        count_reserved(state, *resource);
        cudaDeviceSynchronize();
    }
    finish(state, streams);
}

template <class Resource>
void pipeline(benchmark::State& state) {
    auto streams = make_streams(static_cast<std::size_t>(state.range(0)));
    {
        auto resource = std::make_unique<Resource>();
        void* held = nullptr;
        std::size_t held_size = 0;
        const auto step = [&](std::size_t i) {
            const poolkit::stream_ref on{streams[i % streams.size()]};
            const std::size_t size = sizes[i % size_count];
            void* p = resource->allocate_async(size, 256, on);
            benchmark::DoNotOptimize(p);
            if (held != nullptr) resource->deallocate_async(held, held_size, 256, on);  // the last stage's buffer
            held = p;
            held_size = size;
        };
        for (std::size_t i = 0; i < streams.size() * size_count * 2; ++i) step(i);
        std::size_t i = 0;
        for (auto _ : state) step(i++);
        state.SetItemsProcessed(state.iterations() * 2);
        count_reserved(state, *resource);
        resource->deallocate_async(held, held_size, 256, poolkit::stream_ref{streams.front()});
        cudaDeviceSynchronize();
    }
    finish(state, streams);
}

inline void stream_counts(benchmark::internal::Benchmark* b) {
    for (int n : {1, 4, 256, 4096}) b->Arg(n);
}

inline int run(int argc, char** argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "%s: no CUDA device\n", argv[0]);
        return 1;
    }
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}

}  // namespace poolkit_bench

#define POOLKIT_BENCH_STREAMS(Resource, name)                                                                \
    BENCHMARK(poolkit_bench::streams<Resource>)->Name("streams/" name)->Apply(poolkit_bench::stream_counts); \
    BENCHMARK(poolkit_bench::pipeline<Resource>)->Name("pipeline/" name)->Apply(poolkit_bench::stream_counts)

POOLKIT_BENCH_STREAMS(poolkit::caching_device_resource, "caching_device_resource");
POOLKIT_BENCH_STREAMS(poolkit::cuda_async_resource, "cudaMallocAsync");
