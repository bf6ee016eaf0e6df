// Whether kernels run slower over memory mapped from small physical allocations: a streaming copy
// of 1 GiB and a random gather over it (bound by address translation), over cudaMalloc and over
// cuda_vmm_resource mappings made of 2 MiB (map: one allocation per granule, what expandable does
// in small spans and near the physical limit), 32 MiB (its large spans' default) and 1 GiB
// physical allocations (map_whole). Kernel time by CUDA events.
//   build/bench/poolkit-bench-page_sizes [--benchmark_filter=...]
#include <poolkit/upstream/cuda_device_resource.hpp>
#include <poolkit/upstream/cuda_vmm_resource.hpp>

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>

namespace {

constexpr std::size_t bytes = std::size_t{1} << 30;
constexpr std::size_t gathered = std::size_t{64} << 20;  // elements read at random per gather

__global__ void copy(const float4* in, float4* out, std::size_t n) {
    for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
        out[i] = in[i];
    }
}

__global__ void gather(const float* in, float* out, std::size_t n, std::size_t mask) {
    for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n; i += std::size_t{gridDim.x} * blockDim.x) {
        out[i & ((std::size_t{1} << 20) - 1)] += in[(i * 2654435761u + 12345u) & mask];
    }
}

// 1 GiB to read from: cudaMalloc (piece 0) or a claimed range of virtual memory mapped in
// physical allocations of `piece` bytes.
class source {
public:
    explicit source(std::size_t piece) : piece_(piece) {
        if (piece == 0) {
            at_ = device_.allocate(bytes);
            return;
        }
        vm_ = std::make_unique<poolkit::cuda_vmm_resource>();
        at_ = vm_->claim(bytes);
        if (piece == vm_->granularity()) {
            vm_->map(at_, bytes);
        } else {
            for (std::size_t offset = 0; offset < bytes; offset += piece) vm_->map_whole(static_cast<std::byte*>(at_) + offset, piece);
        }
    }
    ~source() {
        cudaDeviceSynchronize();
        if (piece_ == 0) {
            device_.deallocate(at_, bytes);
            return;
        }
        if (piece_ == vm_->granularity()) {
            vm_->unmap(at_, bytes);
        } else {
            for (std::size_t offset = 0; offset < bytes; offset += piece_) vm_->unmap(static_cast<std::byte*>(at_) + offset, piece_);
        }
        vm_->unclaim(at_, bytes);
    }
    source(const source&) = delete;
    source& operator=(const source&) = delete;
    [[nodiscard]] float* data() const noexcept { return static_cast<float*>(at_); }

private:
    std::size_t piece_;
    poolkit::cuda_device_resource device_;
    std::unique_ptr<poolkit::cuda_vmm_resource> vm_;
    void* at_ = nullptr;
};

template <bool Gather>
void kernel_over(benchmark::State& state, const source& in, void* out) {
    cudaMemset(in.data(), 0, bytes);
    cudaEvent_t start, stop;
    cudaEventCreate(&start);
    cudaEventCreate(&stop);
    for (auto _ : state) {
        cudaEventRecord(start);
        if constexpr (Gather) {
            gather<<<1024, 256>>>(in.data(), static_cast<float*>(out), gathered, bytes / sizeof(float) - 1);
        } else {
            copy<<<1024, 256>>>(reinterpret_cast<const float4*>(in.data()), static_cast<float4*>(out), bytes / sizeof(float4));
        }
        cudaEventRecord(stop);
        cudaEventSynchronize(stop);
        float ms = 0;
        cudaEventElapsedTime(&ms, start, stop);
        state.SetIterationTime(ms / 1e3);
    }
    if (cudaGetLastError() != cudaSuccess) state.SkipWithError("a CUDA call failed");
    state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) *
                            static_cast<std::int64_t>(Gather ? gathered * sizeof(float) : bytes));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
}

// No GPU, or one without virtual memory management: the benchmark is skipped with the reason.
template <bool Gather>
void kernel_over(benchmark::State& state) {
    try {
        const source in(static_cast<std::size_t>(state.range(0)));
        poolkit::cuda_device_resource device;
        void* out = device.allocate(bytes);
        kernel_over<Gather>(state, in, out);
        device.deallocate(out, bytes);
    } catch (const std::exception& error) {
        state.SkipWithError(error.what());
    }
}

// 0: cudaMalloc; else the bytes of each physical allocation.
void pieces(benchmark::internal::Benchmark* b) {
    for (long long piece : {0LL, 2LL << 20, 32LL << 20, 1LL << 30}) b->Arg(piece);
    b->ArgName("piece")->UseManualTime()->Unit(benchmark::kMillisecond);
}

BENCHMARK(kernel_over<false>)->Name("copy_1GiB")->Apply(pieces);
BENCHMARK(kernel_over<true>)->Name("random_gather")->Apply(pieces);

}  // namespace

BENCHMARK_MAIN();
