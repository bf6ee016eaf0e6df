// --upstream=cuda in a poolkit-replay built with PyTorch's C++ library (-DPOOLKIT_TORCH_DIR):
// PyTorch's CUDA caching allocator, as it is and with expandable_segments, replayed by the same
// loop and timed by the same clock as poolkit's compositions, so that every ratio is measured side
// by side. The allocator is PyTorch's process-wide one: each run starts from an empty cache with
// its setting applied (a setting reaches segments made after it), and empties it again at the end.
#pragma once

#include "compositions.hpp"

#if __has_include(<c10/core/AllocatorConfig.h>)
#  include <c10/core/AllocatorConfig.h>
#endif
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

// c10's, set by libtorch_cuda when it loads (this program links only c10): how c10 asks whether a
// device has a CUDA context before it switches to it (a device guard; record_stream's events).
namespace c10::cuda::_internal {
void setHasPrimaryContext(bool (*func)(c10::DeviceIndex));
}

namespace poolkit::replay_tool {

// PYTORCH_CUDA_ALLOC_CONF's settings, applied now: newer PyTorch parses them in c10 for every device
// type, older in its CUDA allocator.
inline void apply_pytorch_settings(const std::string& settings) {
#if __has_include(<c10/core/AllocatorConfig.h>)
    c10::CachingAllocator::setAllocatorSettings(settings);
#else
    c10::cuda::CUDACachingAllocator::setAllocatorSettings(settings);
#endif
}

// PyTorch's allocator as a poolkit stream resource. A free goes to the pool of the stream the block
// was allocated on (PyTorch's raw_delete takes no stream). Once the replay has named a second
// stream, a free first records its stream as a user of the block (PyTorch's record_stream, which
// returns at once where it is the block's own): a program that uses a block on another stream must,
// so that the block's reuse on its own stream waits for that work, as poolkit's stream-ordered
// compositions make it wait.
class pytorch_caching_resource {
public:
    // `settings`: PYTORCH_CUDA_ALLOC_CONF's syntax, e.g. "expandable_segments:True".
    explicit pytorch_caching_resource(const std::string& settings) : device_(c10::cuda::current_device()) {
        static const bool initialized = [] {
            // Every device answers yes: a guard then switches to it with cudaSetDevice, which
            // makes its context where there is none (the replay uses one device, already set up).
            c10::cuda::_internal::setHasPrimaryContext([](c10::DeviceIndex) { return true; });
            c10::cuda::CUDACachingAllocator::init(c10::cuda::device_count());
            return true;
        }();
        static_cast<void>(initialized);
        c10::cuda::CUDACachingAllocator::emptyCache();
        apply_pytorch_settings(settings);
        c10::cuda::CUDACachingAllocator::resetPeakStats(device_);
        c10::cuda::CUDACachingAllocator::resetAccumulatedStats(device_);
    }
    pytorch_caching_resource(const pytorch_caching_resource&) = delete;
    ~pytorch_caching_resource() { c10::cuda::CUDACachingAllocator::emptyCache(); }

    void* allocate(std::size_t bytes, std::size_t) { return c10::cuda::CUDACachingAllocator::raw_alloc(bytes); }
    void deallocate(void* pointer, std::size_t, std::size_t) noexcept { c10::cuda::CUDACachingAllocator::raw_delete(pointer); }
    void* allocate_async(std::size_t bytes, std::size_t, stream_ref stream) {
        if (!first_stream_) first_stream_ = stream.get();
        several_streams_ = several_streams_ || stream.get() != *first_stream_;
        return c10::cuda::CUDACachingAllocator::raw_alloc_with_stream(bytes, stream.get());
    }
    void deallocate_async(void* pointer, std::size_t, std::size_t, stream_ref stream) noexcept {
        if (!several_streams_) {
            c10::cuda::CUDACachingAllocator::raw_delete(pointer);
            return;
        }
        // Owns the block as a tensor's storage does: its deleter frees it at the end of the scope.
        const c10::DataPtr block(pointer, pointer, c10::cuda::CUDACachingAllocator::get()->raw_deleter(),
                                 c10::Device(c10::DeviceType::CUDA, device_));
        try {
            c10::cuda::CUDACachingAllocator::recordStream(block, c10::cuda::getStreamFromExternal(stream.get(), device_));
        } catch (...) {  // not recorded: freed all the same
        }
    }
    friend bool operator==(const pytorch_caching_resource& a, const pytorch_caching_resource& b) noexcept { return &a == &b; }

    // [0]: every pool together (StatType::AGGREGATE).
    [[nodiscard]] std::size_t reserved_bytes() const { return static_cast<std::size_t>(stats().reserved_bytes[0].current); }
    [[nodiscard]] std::size_t peak_reserved_bytes() const { return static_cast<std::size_t>(stats().reserved_bytes[0].peak); }
    [[nodiscard]] std::size_t device_allocations() const { return static_cast<std::size_t>(stats().num_device_alloc); }

private:
    using device_stats = decltype(c10::cuda::CUDACachingAllocator::getDeviceStats(c10::DeviceIndex{}));  // its name moved
    [[nodiscard]] device_stats stats() const { return c10::cuda::CUDACachingAllocator::getDeviceStats(device_); }
    c10::DeviceIndex device_;
    std::optional<cudaStream_t> first_stream_;  // the first stream a request named
    bool several_streams_ = false;
};

inline std::vector<composition> pytorch_compositions() {
    const auto run_with = [](std::string settings) {
        return [settings](const trace& t, const run_settings& s) {
            pytorch_caching_resource pytorch(settings);
            run_figures figures = measure_replay(
                t, s, pytorch, [&pytorch] { return pytorch.reserved_bytes(); },
                [&pytorch] { return std::optional<std::size_t>(pytorch.device_allocations()); });
            figures.peak_reserved_bytes = pytorch.peak_reserved_bytes();
            return figures;
        };
    };
    return {{"pytorch", "PyTorch's CUDA caching allocator (its C++ API, in this process; reserved: its own statistics)",
             run_with("expandable_segments:False")},
            {"pytorch/expandable_segments", "the same with expandable_segments:True (one growing virtual range per stream)",
             run_with("expandable_segments:True")}};
}

}  // namespace poolkit::replay_tool
