// pipeline.hpp's benchmarks with PyTorch's caching allocator beside poolkit's presets and
// cudaMallocAsync, in one process. Built only where PyTorch's C++ library is given
// (-DPOOLKIT_TORCH_DIR=<site-packages>/torch); PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
// measures its expandable segments.
//   build/bench/poolkit-bench-pipeline_torch --benchmark_filter=PyTorch
// PyTorch frees a block to the pool of the stream it was allocated on, whatever stream the free
// names (raw_delete takes none): its pipeline/ figures order nothing across streams.
#include "../pipeline.hpp"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>

namespace {

class pytorch_caching {
public:
    pytorch_caching() {
        static const bool initialized = [] {
            c10::cuda::CUDACachingAllocator::init(c10::cuda::device_count());
            return true;
        }();
        static_cast<void>(initialized);
    }
    ~pytorch_caching() { c10::cuda::CUDACachingAllocator::emptyCache(); }
    void* allocate_async(std::size_t bytes, std::size_t, poolkit::stream_ref stream) {
        return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream.get());
    }
    void deallocate_async(void* pointer, std::size_t, std::size_t, poolkit::stream_ref) {
        c10::cuda::CUDACachingAllocator::raw_delete(pointer);
    }
    [[nodiscard]] std::size_t reserved_bytes() const {
        const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(c10::cuda::current_device());
        return static_cast<std::size_t>(stats.reserved_bytes[0].current);  // [0]: all pools (StatType::AGGREGATE)
    }
};

}  // namespace

POOLKIT_BENCH_STREAMS(pytorch_caching, "PyTorch");

int main(int argc, char** argv) { return poolkit_bench::run(argc, argv); }
