// cuda_events: the Events policy of stream_ordered on real CUDA streams.
//
// Events are created with cudaEventDisableTiming and pooled: record() takes one from the pool (or
// creates one) and records it, recycle() puts it back. wait() is cudaStreamWaitEvent (no host
// synchronization); done() is cudaEventQuery; synchronize() is cudaEventSynchronize; idle() is
// cudaStreamQuery — those three with the thread's capture mode relaxed, so that a capture the pool
// has not seen does not forbid them. The four calls made per free (record, wait, done, idle) go to
// the driver's entry points for created streams: the runtime's wrap them at 18-37% more
// (docs/costs.md). The runtime's serve the special handles and answer where the driver's did not,
// so that failures are reported as cudaError_t. An event is made on the device of the stream it is
// recorded on (the context's, see device_of) and pooled per device, so one pool may serve streams
// of several devices: pinned host memory used by all of them (cudaHostAllocPortable).
// synchronize_all() waits for every device an event was recorded on. Not thread-safe
// (stream_ordered is not either; synchronized<> guards both).
// cudaStreamPerThread — and the default stream 0 where this translation unit was compiled for the
// per-thread default stream — names a different stream on each host thread: per_thread() says so,
// and stream_ordered keeps such streams apart by thread. A stream declared lasting
// (declare_lasting: one the program never destroys) is told apart without a driver call, and
// lasting() lets stream_ordered cover its frees during another stream's call.
#pragma once

#include <poolkit/adaptor/detail/lasting_streams.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/core/detail/cuda_driver.hpp>
#include <poolkit/core/detail/cuda_runtime.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>

#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

namespace poolkit {

class cuda_events {
public:
    struct event_type {
        cudaEvent_t handle = nullptr;
        int device = 0;  // the device it was made on, whose pool takes it back
    };

    cuda_events() = default;
    cuda_events(const cuda_events&) = delete;
    cuda_events& operator=(const cuda_events&) = delete;
    cuda_events(cuda_events&& other) noexcept : free_(std::move(other.free_)), seen_(std::move(other.seen_)) {}
    cuda_events& operator=(cuda_events&& other) noexcept {
        std::swap(free_, other.free_);
        std::swap(seen_, other.seen_);
        return *this;
    }
    ~cuda_events() {
        for (std::size_t device = 0; device < free_.size(); ++device) {
            for (cudaEvent_t event : free_[device]) detail::check_cuda_in_deallocate(cudaEventDestroy(event), "cudaEventDestroy");
        }
    }

    event_type record(stream_ref stream) {
        const int device = device_of(stream);
        std::vector<cudaEvent_t>& pool = pool_of(device);
        cudaEvent_t event{};
        if (pool.empty()) {
            const detail::device_scope on(device);
            on.check();
            detail::check_cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
        } else {
            event = pool.back();
            pool.pop_back();
        }
        const bool recorded = driver().record != nullptr && !special_handle(stream) && driver().record(event, stream.get()) == CUDA_SUCCESS;
        const cudaError_t status = recorded ? cudaSuccess : cudaEventRecord(event, stream.get());
        if (status != cudaSuccess) {
            pool.push_back(event);
            detail::throw_cuda_error(status, "cudaEventRecord");
        }
        return {event, device};
    }

    void wait(stream_ref waiter, event_type event) {
        if (driver().wait != nullptr && !special_handle(waiter) && driver().wait(waiter.get(), event.handle, 0) == CUDA_SUCCESS) return;
        detail::check_cuda(cudaStreamWaitEvent(waiter.get(), event.handle, 0), "cudaStreamWaitEvent");
    }

    [[nodiscard]] bool done(event_type event) {
        return answered(
            driver().event_query != nullptr, [&] { return driver().event_query(event.handle); },
            [&] { return cudaEventQuery(event.handle); }, "cudaEventQuery");
    }

    // Whether all work issued on `stream` so far is done (cudaStreamQuery: one driver call, about
    // what an event query costs, and no event to record first). Never asked of a stream in capture.
    [[nodiscard]] static bool idle(stream_ref stream) {
        return answered(
            driver().stream_query != nullptr && !special_handle(stream), [&] { return driver().stream_query(stream.get()); },
            [&] { return cudaStreamQuery(stream.get()); }, "cudaStreamQuery");
    }

    void synchronize(event_type event) {
        detail::check_cuda(relaxed([&] { return cudaEventSynchronize(event.handle); }), "cudaEventSynchronize");
    }

    // The host waits for all work of every device an event was recorded on, or of the current
    // device before any was (for streams no event can reach).
    void synchronize_all() {
        bool any = false;
        for (std::size_t device = 0; device < free_.size(); ++device) {
            if (!seen_[device]) continue;
            any = true;
            const detail::device_scope on(static_cast<int>(device));
            on.check();
            detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        }
        if (!any) detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }

    // The capture `stream` is in (0: none, or the legacy stream, which cannot capture). Asked on
    // every call of stream_ordered: the driver's cuStreamIsCapturing first (the runtime's calls
    // cost more and stop scaling past two threads, see identity()), then, only for a stream in
    // capture, cudaStreamGetCaptureInfo for its id. An invalidated capture counts until it ends
    // (as `invalidated_capture` where the runtime gives no id for it).
    static constexpr std::uint64_t invalidated_capture = ~std::uint64_t{0};
    [[nodiscard]] static std::uint64_t capture_of(stream_ref stream) {
        // The legacy default stream cannot capture: no driver call for it (nor for handle 0, unless
        // this translation unit made that the per-thread stream).
        if (stream.get() == cudaStreamLegacy || (stream.get() == nullptr && !per_thread(stream))) return 0;
        // The driver's call needs the thread's context current: the runtime's first call on this
        // thread makes it so.
        thread_local bool context_current = false;
        const auto is_capturing = driver_stream_is_capturing();
        if (is_capturing != nullptr && context_current) {
            CUstreamCaptureStatus driver_status = CU_STREAM_CAPTURE_STATUS_NONE;
            if (is_capturing(stream.get(), &driver_status) == CUDA_SUCCESS && driver_status == CU_STREAM_CAPTURE_STATUS_NONE) return 0;
        }
        context_current = true;
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        unsigned long long id = 0;
        const cudaError_t asked = cudaStreamGetCaptureInfo(stream.get(), &status, &id);
        if (asked == cudaErrorStreamCaptureInvalidated) {
            static_cast<void>(cudaGetLastError());
            return invalidated_capture;
        }
        detail::check_cuda(asked, "cudaStreamGetCaptureInfo");
        if (status == cudaStreamCaptureStatusNone) return 0;
        return id != 0 ? static_cast<std::uint64_t>(id) : invalidated_capture;
    }

    // Runs `f` with this thread's capture mode relaxed (cudaThreadExchangeStreamCaptureMode), so
    // that a capture does not forbid the cudaMalloc it may make; then puts the mode back.
    template <class F>
    static decltype(auto) unprohibited(F&& f) {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        detail::check_cuda(cudaThreadExchangeStreamCaptureMode(&mode), "cudaThreadExchangeStreamCaptureMode");
        struct restore {
            cudaStreamCaptureMode mode;
            ~restore() { static_cast<void>(cudaThreadExchangeStreamCaptureMode(&mode)); }
        } guard{mode};
        return std::forward<F>(f)();
    }

    // `gone` runs once the graph being captured on `stream` is gone: a user object the graph retains
    // (cudaUserObjectCreate, cudaGraphRetainUserObject through cudaStreamGetCaptureInfo's graph),
    // whose destructor CUDA runs on a thread of its own after the graph and every executable made
    // from it are destroyed and their launches are done (a capture invalidated later destroys its
    // graph at cudaStreamEndCapture). `gone` must make no CUDA call. Returns false, telling
    // nothing, for a capture already invalidated: it has no graph to hold the object, and telling
    // at once would free memory (cudaFree) while the capture is still open. Throws cuda_error.
    static bool on_graph_gone(stream_ref stream, std::function<void()> gone) {
        cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
        cudaGraph_t graph = nullptr;
        detail::check_cuda(cudaStreamGetCaptureInfo(stream.get(), &status, nullptr, &graph), "cudaStreamGetCaptureInfo");
        if (status != cudaStreamCaptureStatusActive || graph == nullptr) return false;
        auto* owned = new graph_gone{std::move(gone)};
        cudaUserObject_t object{};
        if (const cudaError_t made = cudaUserObjectCreate(&object, owned, &graph_gone::run, 1, cudaUserObjectNoDestructorSync);
            made != cudaSuccess) {
            delete owned;
            detail::throw_cuda_error(made, "cudaUserObjectCreate");
        }
        if (const cudaError_t retained = cudaGraphRetainUserObject(graph, object, 1, cudaGraphUserObjectMove); retained != cudaSuccess) {
            owned->armed = false;
            static_cast<void>(cudaUserObjectRelease(object, 1));  // its destructor then does nothing
            detail::throw_cuda_error(retained, "cudaGraphRetainUserObject");
        }
        return true;
    }

    // The event may be recorded again at once: a wait already issued keeps the state it saw.
    void recycle(event_type event) noexcept {
        try {
            pool_of(event.device).push_back(event.handle);
        } catch (...) {
            detail::check_cuda_in_deallocate(cudaEventDestroy(event.handle), "cudaEventDestroy");
        }
    }

    // The stream's unique id over the program's life, so that a new stream that gets a destroyed
    // stream's handle is told apart: the driver's cuStreamGetId, through the runtime's entry point
    // table (cudaStreamGetId where the driver lacks it): the shared cudart's cudaStreamGetId
    // stopped scaling past two threads on the H200 host, the driver's call scales. The
    // special handles (0, cudaStreamLegacy, cudaStreamPerThread) are never destroyed: their bits,
    // with the top bit set, at no cost (stream_ordered keeps per-thread ones apart by thread); so
    // is any handle the driver cannot say. A stream declared lasting keeps the id it had then,
    // with no driver call. Never asked of a stream in capture: cuStreamGetId fails there, and the
    // failure invalidates the capture.
    [[nodiscard]] static std::uint64_t identity(stream_ref stream) noexcept {
        if (special_handle(stream)) return stream_id(stream) | special;
        if (std::uint64_t declared = 0; lasting_table().find(stream.get(), declared)) return declared;
        unsigned long long id = 0;
        if (const auto get_id = driver_stream_get_id()) {
            if (get_id(stream.get(), &id) == CUDA_SUCCESS) return id;
        } else if (cudaStreamGetId(stream.get(), &id) == cudaSuccess) {
            return id;
        }
        static_cast<void>(cudaGetLastError());
        return stream_id(stream) | special;
    }

    // Declares `stream` lasting, for the process's life: identity() then answers for it without a
    // driver call, and stream_ordered may ask about it during other streams' calls (lasting()).
    // Only for a stream the program never destroys (PyTorch's pooled streams, say): a stream
    // created later at a destroyed lasting stream's handle would take its id, and blocks freed on
    // the one could be taken by the other before the first's work is done. True where it
    // is declared now or was, or needs no declaring (a special handle); false, declaring nothing,
    // for a stream in capture (asking its id would invalidate the capture), one the driver cannot
    // say the id of, or past detail::lasting_streams::capacity streams.
    static bool declare_lasting(stream_ref stream) noexcept {
        if (special_handle(stream)) return true;
        std::uint64_t id = 0;
        if (lasting_table().find(stream.get(), id)) return true;
        CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
        const auto is_capturing = driver_stream_is_capturing();
        if (is_capturing == nullptr || is_capturing(stream.get(), &status) != CUDA_SUCCESS || status != CU_STREAM_CAPTURE_STATUS_NONE) {
            static_cast<void>(cudaGetLastError());
            return false;
        }
        id = identity(stream);
        return (id & special) == 0 && lasting_table().declare(stream.get(), id);
    }

    // Whether `stream` outlives every call: declared lasting, or the legacy stream (any special
    // handle that does not name a per-thread stream), which is never destroyed.
    [[nodiscard]] static bool lasting(stream_ref stream) noexcept {
        if (special_handle(stream)) return !per_thread(stream);
        std::uint64_t id = 0;
        return lasting_table().find(stream.get(), id);
    }

    [[nodiscard]] static bool per_thread(stream_ref stream) noexcept {
        if (stream.get() == cudaStreamPerThread) return true;
#if defined(CUDA_API_PER_THREAD_DEFAULT_STREAM)
        if (stream.get() == nullptr) return true;
#endif
        return false;
    }

    // Pooled events on hand, of every device (for tests).
    [[nodiscard]] std::size_t pooled() const noexcept {
        std::size_t count = 0;
        for (const auto& pool : free_) count += pool.size();
        return count;
    }

    // The device of `stream`: its context's (cuStreamGetCtx, cuCtxGetDevice_v2), as a stream in
    // capture allows those calls where cudaStreamGetDevice would invalidate the capture; the current
    // device where the driver lacks them. The legacy and per-thread default streams are the
    // current device's.
    [[nodiscard]] static int device_of(stream_ref stream) {
        int device = 0;
        if (stream.get() != nullptr && stream.get() != cudaStreamLegacy && stream.get() != cudaStreamPerThread) {
            static const auto get_context = driver_entry<PFN_cuStreamGetCtx_v9020>("cuStreamGetCtx", 9020);
            static const auto context_device = driver_entry<PFN_cuCtxGetDevice_v13000>("cuCtxGetDevice", 13000);
            CUcontext context = nullptr;
            CUdevice found = 0;
            if (get_context != nullptr && context_device != nullptr && get_context(stream.get(), &context) == CUDA_SUCCESS &&
                context_device(&found, context) == CUDA_SUCCESS) {
                return static_cast<int>(found);
            }
        }
        detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
        return device;
    }

private:
    // `call`, a query of or a host wait for work outside any capture, with this thread's capture
    // mode relaxed. A global-mode capture forbids such calls to every thread in global mode,
    // although they cannot touch it, and the pool may not have seen that capture yet: PyTorch's
    // first calls in a capture free blocks of other streams (zero_grad), whose covers query them.
    // The driver's exchange, a seventh of the runtime's, which would double a query's cost
    // (docs/costs.md); the runtime's where the driver lacks it.
    template <class Call>
    static std::invoke_result_t<Call> relaxed(Call&& call) noexcept {
        static const auto exchange = driver_entry<PFN_cuThreadExchangeStreamCaptureMode_v10010>("cuThreadExchangeStreamCaptureMode", 10010);
        if (exchange == nullptr) [[unlikely]] {
            cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
            const bool exchanged = cudaThreadExchangeStreamCaptureMode(&mode) == cudaSuccess;
            const auto status = std::forward<Call>(call)();
            if (exchanged) static_cast<void>(cudaThreadExchangeStreamCaptureMode(&mode));
            return status;
        }
        CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
        const bool exchanged = exchange(&mode) == CUDA_SUCCESS;
        const auto status = std::forward<Call>(call)();
        if (exchanged) static_cast<void>(exchange(&mode));
        return status;
    }

    // A query's answer, relaxed: the driver's call where `use_driver`, and where it says done or not
    // ready; else the runtime's, which throws cuda_error on failure.
    template <class Driver, class Runtime>
    static bool answered(bool use_driver, Driver&& by_driver, Runtime&& by_runtime, const char* call) {
        if (use_driver) {
            const CUresult answer = relaxed(std::forward<Driver>(by_driver));
            if (answer == CUDA_SUCCESS) return true;
            if (answer == CUDA_ERROR_NOT_READY) return false;
        }
        const cudaError_t status = relaxed(std::forward<Runtime>(by_runtime));
        if (status == cudaErrorNotReady) return false;
        detail::check_cuda(status, call);
        return true;
    }

    // The handles that name no created stream: 0, cudaStreamLegacy, cudaStreamPerThread (the
    // driver reads 0 as the legacy stream, where this translation unit may mean the per-thread one).
    [[nodiscard]] static bool special_handle(stream_ref stream) noexcept {
        return stream.get() == nullptr || stream.get() == cudaStreamLegacy || stream.get() == cudaStreamPerThread;
    }

    // What a graph's user object holds (on_graph_gone).
    struct graph_gone {
        std::function<void()> gone;
        bool armed = true;
        static void CUDART_CB run(void* self) {
            auto* owned = static_cast<graph_gone*>(self);
            if (owned->armed) owned->gone();
            delete owned;
        }
    };

    std::vector<cudaEvent_t>& pool_of(int device) {
        const auto index = static_cast<std::size_t>(device);
        if (index >= free_.size()) {
            free_.resize(index + 1);
            seen_.resize(index + 1, false);
        }
        seen_[index] = true;
        return free_[index];
    }

    // A driver entry point from the runtime's table, as `Function`; nullptr where the driver has none.
    template <class Function>
    static Function driver_entry(const char* symbol, unsigned int version) noexcept {
        const auto found = detail::cuda_driver::lookup(symbol, version);
        if (found.function == nullptr) static_cast<void>(cudaGetLastError());
        return reinterpret_cast<Function>(found.function);
    }
    // The driver's entry points for the calls made per free, looked up once per process.
    struct per_free_calls {
        PFN_cuEventRecord_v2000 record = driver_entry<PFN_cuEventRecord_v2000>("cuEventRecord", 2000);
        PFN_cuStreamWaitEvent_v3020 wait = driver_entry<PFN_cuStreamWaitEvent_v3020>("cuStreamWaitEvent", 3020);
        PFN_cuEventQuery_v2000 event_query = driver_entry<PFN_cuEventQuery_v2000>("cuEventQuery", 2000);
        PFN_cuStreamQuery_v2000 stream_query = driver_entry<PFN_cuStreamQuery_v2000>("cuStreamQuery", 2000);
    };
    static const per_free_calls& driver() noexcept {
        static const per_free_calls calls;
        return calls;
    }
    static constexpr std::uint64_t special = std::uint64_t{1} << 63;  // identity()'s mark of a handle's own bits

    // The streams declared lasting (declare_lasting), of the process.
    static detail::lasting_streams& lasting_table() noexcept {
        static detail::lasting_streams streams;
        return streams;
    }

    // cuStreamGetId and cuStreamIsCapturing, looked up once per process.
    static PFN_cuStreamGetId_v12000 driver_stream_get_id() noexcept {
        static const auto function = driver_entry<PFN_cuStreamGetId_v12000>("cuStreamGetId", 12000);
        return function;
    }
    static PFN_cuStreamIsCapturing_v10000 driver_stream_is_capturing() noexcept {
        static const auto function = driver_entry<PFN_cuStreamIsCapturing_v10000>("cuStreamIsCapturing", 10000);
        return function;
    }

    std::vector<std::vector<cudaEvent_t>> free_;  // by device
    std::vector<bool> seen_;  // by device: an event was recorded there
};

}  // namespace poolkit
