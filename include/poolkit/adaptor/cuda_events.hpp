// cuda_events: the Events policy of stream_ordered on real CUDA streams.
//
// Events are created with cudaEventDisableTiming and pooled: record() takes one from the pool (or
// creates one) and records it, recycle() puts it back. wait() is cudaStreamWaitEvent (no host
// synchronization); done() is cudaEventQuery; synchronize() is cudaEventSynchronize. Events belong
// to the device that was current when they were created: use one stream_ordered per device. Not
// thread-safe (stream_ordered is not either; synchronized<> guards both).
// cudaStreamPerThread — and the default stream 0 where this translation unit was compiled for the
// per-thread default stream — names a different stream on each host thread: per_thread() says so,
// and stream_ordered keeps such lanes apart by thread.
#pragma once

#include <poolkit/core/stream_ref.hpp>
#include <poolkit/upstream/detail/cuda_driver.hpp>
#include <poolkit/upstream/detail/cuda_runtime.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace poolkit {

class cuda_events {
public:
    using event_type = cudaEvent_t;

    cuda_events() = default;
    cuda_events(const cuda_events&) = delete;
    cuda_events& operator=(const cuda_events&) = delete;
    cuda_events(cuda_events&& other) noexcept : free_(std::move(other.free_)) {}
    cuda_events& operator=(cuda_events&& other) noexcept {
        std::swap(free_, other.free_);
        return *this;
    }
    ~cuda_events() {
        for (cudaEvent_t event : free_) detail::check_cuda_in_deallocate(cudaEventDestroy(event), "cudaEventDestroy");
    }

    event_type record(stream_ref stream) {
        cudaEvent_t event{};
        if (free_.empty()) {
            detail::check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        } else {
            event = free_.back();
            free_.pop_back();
        }
        const cudaError_t status = cudaEventRecord(event, stream.get());
        if (status != cudaSuccess) {
            free_.push_back(event);
            detail::throw_cuda_error(status, "cudaEventRecord");
        }
        return event;
    }

    void wait(stream_ref waiter, event_type event) {
        detail::check_cuda(cudaStreamWaitEvent(waiter.get(), event, 0), "cudaStreamWaitEvent");
    }

    [[nodiscard]] bool done(event_type event) {
        const cudaError_t status = cudaEventQuery(event);
        if (status == cudaErrorNotReady) return false;
        detail::check_cuda(status, "cudaEventQuery");
        return true;
    }

    void synchronize(event_type event) { detail::check_cuda(cudaEventSynchronize(event), "cudaEventSynchronize"); }

    // The host waits for all work on the current device (for streams no event can reach).
    void synchronize_all() { detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize"); }

    // The event may be recorded again at once: a wait already issued keeps the state it saw.
    void recycle(event_type event) noexcept {
        try {
            free_.push_back(event);
        } catch (...) {
            detail::check_cuda_in_deallocate(cudaEventDestroy(event), "cudaEventDestroy");
        }
    }

    // The stream's unique id over the program's life, so that a new stream that gets a destroyed
    // stream's handle is told apart: the driver's cuStreamGetId, through the runtime's entry point
    // table (cudaStreamGetId where the driver lacks it). On the H200 host the shared cudart's
    // cudaStreamGetId (65 ns) stopped scaling past two threads; the driver's call scales. The
    // special handles (0, cudaStreamLegacy, cudaStreamPerThread) are never destroyed: their bits,
    // with the top bit set, at no cost (stream_ordered keeps per-thread ones apart by thread); so
    // is any handle the driver cannot say (a stream being captured into a graph).
    [[nodiscard]] static std::uint64_t identity(stream_ref stream) noexcept {
        constexpr std::uint64_t special = std::uint64_t{1} << 63;
        if (stream.get() == nullptr || stream.get() == cudaStreamLegacy || stream.get() == cudaStreamPerThread) {
            return stream_id(stream) | special;
        }
        unsigned long long id = 0;
        if (const auto get_id = driver_stream_get_id()) {
            if (get_id(stream.get(), &id) == CUDA_SUCCESS) return id;
        } else if (cudaStreamGetId(stream.get(), &id) == cudaSuccess) {
            return id;
        }
        static_cast<void>(cudaGetLastError());
        return stream_id(stream) | special;
    }

    [[nodiscard]] static bool per_thread(stream_ref stream) noexcept {
        if (stream.get() == cudaStreamPerThread) return true;
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
        if (stream.get() == nullptr) return true;
#endif
        return false;
    }

    // Pooled events on hand (for tests).
    [[nodiscard]] std::size_t pooled() const noexcept { return free_.size(); }

private:
    // cuStreamGetId from the runtime's entry point table, once per process; nullptr where the
    // driver has none.
    static PFN_cuStreamGetId_v12000 driver_stream_get_id() noexcept {
        static const auto function = [] {
            const auto found = detail::cuda_driver::lookup("cuStreamGetId", 12000);
            if (found.function == nullptr) static_cast<void>(cudaGetLastError());
            return reinterpret_cast<PFN_cuStreamGetId_v12000>(found.function);
        }();
        return function;
    }

    std::vector<cudaEvent_t> free_;
};

}  // namespace poolkit
