// CUDA graphs: what capturing and instantiating a graph of N allocate / kernel / free steps costs,
// and what launching it costs, over poolkit's caching preset (graph pools) and over
// cudaMallocAsync on the device's default pool (CUDA's graph memory nodes); and the same steps run
// eagerly, for scale. Half the blocks are freed at once (reused within the capture), half at the
// end; sizes cycle from 64 KiB to 4 MiB.
//   build/bench/poolkit-bench-graphs [--benchmark_filter=...]
#include <poolkit/presets.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace {

__global__ void touch(unsigned* data) { data[threadIdx.x] = threadIdx.x; }

// cudaMallocAsync and cudaFreeAsync: in a capture, CUDA's graph memory nodes.
struct graph_memory_nodes {
    void* allocate_async(std::size_t bytes, std::size_t, poolkit::stream_ref stream) {
        void* pointer = nullptr;
        if (cudaMallocAsync(&pointer, bytes, stream.get()) != cudaSuccess) return nullptr;
        return pointer;
    }
    void deallocate_async(void* pointer, std::size_t, std::size_t, poolkit::stream_ref stream) { cudaFreeAsync(pointer, stream.get()); }
    // The graph is gone: memory its launches left to the pool goes back to the device.
    void release_graph_pool(std::uint64_t) { cudaDeviceGraphMemTrim(0); }
};

struct stream_holder {
    cudaStream_t handle = nullptr;
    stream_holder() { cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking); }
    ~stream_holder() { cudaStreamDestroy(handle); }
};

std::size_t step_bytes(int step) { return (std::size_t{64} << 10) << (step % 7); }

// The steps on `stream`: allocate, a kernel that writes the block, and every other block freed at
// once (the rest at the end).
template <class Resource>
bool run_steps(Resource& r, cudaStream_t stream, int steps) {
    std::vector<std::pair<void*, std::size_t>> kept;
    for (int step = 0; step < steps; ++step) {
        const std::size_t bytes = step_bytes(step);
        void* p = r.allocate_async(bytes, 256, poolkit::stream_ref{stream});
        if (p == nullptr) return false;
        touch<<<1, 32, 0, stream>>>(static_cast<unsigned*>(p));
        if (step % 2 == 0) {
            r.deallocate_async(p, bytes, 256, poolkit::stream_ref{stream});
        } else {
            kept.emplace_back(p, bytes);
        }
    }
    for (const auto& [p, bytes] : kept) r.deallocate_async(p, bytes, 256, poolkit::stream_ref{stream});
    return true;
}

// The steps captured into a graph (global mode), instantiated. Returns the capture's id (the graph
// pool's, for poolkit), 0 where a call failed.
template <class Resource>
std::uint64_t capture(Resource& r, cudaStream_t stream, int steps, cudaGraph_t& graph, cudaGraphExec_t& exec) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess) return 0;
    cudaStreamCaptureStatus status{};
    unsigned long long id = 0;
    cudaStreamGetCaptureInfo(stream, &status, &id);
    const bool ran = run_steps(r, stream, steps);
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess || !ran) return 0;
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return 0;
    return id;
}

template <class Resource>
void drop(Resource& r, cudaStream_t stream, cudaGraph_t graph, cudaGraphExec_t exec, std::uint64_t pool) {
    cudaStreamSynchronize(stream);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    r.release_graph_pool(pool);
}

template <class Resource>
void capture_and_instantiate(benchmark::State& state) {
    const int steps = static_cast<int>(state.range(0));
    stream_holder stream;
    auto r = std::make_unique<Resource>();
    for (auto _ : state) {
        cudaGraph_t graph{};
        cudaGraphExec_t exec{};
        const std::uint64_t pool = capture(*r, stream.handle, steps, graph, exec);
        if (pool == 0) {
            state.SkipWithError("the capture failed");
            break;
        }
        state.PauseTiming();
        cudaGraphLaunch(exec, stream.handle);  // graph memory nodes map their memory at the first launch
        drop(*r, stream.handle, graph, exec, pool);
        state.ResumeTiming();
    }
    state.SetItemsProcessed(state.iterations() * steps);
}

template <class Resource>
void launch(benchmark::State& state) {
    const int steps = static_cast<int>(state.range(0));
    stream_holder stream;
    auto r = std::make_unique<Resource>();
    cudaGraph_t graph{};
    cudaGraphExec_t exec{};
    const std::uint64_t pool = capture(*r, stream.handle, steps, graph, exec);
    if (pool == 0) {
        state.SkipWithError("the capture failed");
        return;
    }
    cudaGraphLaunch(exec, stream.handle);
    cudaStreamSynchronize(stream.handle);
    for (auto _ : state) {
        cudaGraphLaunch(exec, stream.handle);
        cudaStreamSynchronize(stream.handle);
    }
    drop(*r, stream.handle, graph, exec, pool);
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
    state.SetItemsProcessed(state.iterations() * steps);
}

template <class Resource>
void eager(benchmark::State& state) {
    const int steps = static_cast<int>(state.range(0));
    stream_holder stream;
    auto r = std::make_unique<Resource>();
    run_steps(*r, stream.handle, steps);
    cudaStreamSynchronize(stream.handle);
    for (auto _ : state) {
        run_steps(*r, stream.handle, steps);
        cudaStreamSynchronize(stream.handle);
    }
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
    state.SetItemsProcessed(state.iterations() * steps);
}

void step_counts(benchmark::internal::Benchmark* b) {
    for (long long steps : {1, 16, 256}) b->Arg(steps);
    b->UseRealTime();
}

}  // namespace

BENCHMARK(capture_and_instantiate<poolkit::caching_device_resource>)
    ->Name("capture_and_instantiate/caching_device_resource")
    ->Apply(step_counts);
BENCHMARK(capture_and_instantiate<graph_memory_nodes>)->Name("capture_and_instantiate/cudaMallocAsync")->Apply(step_counts);
BENCHMARK(launch<poolkit::caching_device_resource>)->Name("launch/caching_device_resource")->Apply(step_counts);
BENCHMARK(launch<graph_memory_nodes>)->Name("launch/cudaMallocAsync")->Apply(step_counts);
BENCHMARK(eager<poolkit::caching_device_resource>)->Name("eager/caching_device_resource")->Apply(step_counts);
BENCHMARK(eager<graph_memory_nodes>)->Name("eager/cudaMallocAsync")->Apply(step_counts);

BENCHMARK_MAIN();
