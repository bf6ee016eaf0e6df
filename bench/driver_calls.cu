// What the driver calls a stream-ordered pool may make per free cost on the host, on streams with
// no work pending (the host-bound case, where allocation costs matter): recording an event, asking
// whether one is done, a stream waiting on one, asking whether a whole stream is idle
// (cudaStreamQuery, what stream_ordered asks at a cover), and the stream memory operations that
// could stand in for events (a value the stream writes to pinned host memory, read by the host
// with a load; a stream waiting for such a value). Plus the two questions stream_ordered asks on
// every call: the stream's identity and whether it is in capture; what relaxing the thread's
// capture mode around a query adds (cuda_events does); and asking which device is current, the
// runtime's way and the driver's. Four streams, in turn.
//   build/bench/poolkit-bench-driver_calls [--benchmark_filter=...]
#include <poolkit/core/detail/cuda_driver.hpp>

#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <vector>

namespace {

constexpr int stream_count = 4;

template <class Function>
Function entry(const char* symbol, unsigned version) {
    return reinterpret_cast<Function>(poolkit::detail::cuda_driver::lookup(symbol, version).function);
}

// Streams with nothing pending, events to record, and a pinned slot per stream the device writes.
struct idle_streams {
    std::array<cudaStream_t, stream_count> streams{};
    std::vector<cudaEvent_t> events = std::vector<cudaEvent_t>(1024);
    std::uint64_t* slots = nullptr;  // pinned, mapped: one per stream
    bool ok = true;

    idle_streams() {
        for (cudaStream_t& s : streams) ok = ok && cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) == cudaSuccess;
        for (cudaEvent_t& e : events) ok = ok && cudaEventCreateWithFlags(&e, cudaEventDisableTiming) == cudaSuccess;
        ok =
            ok && cudaHostAlloc(reinterpret_cast<void**>(&slots), stream_count * sizeof(std::uint64_t), cudaHostAllocMapped) == cudaSuccess;
    }
    ~idle_streams() {
        cudaDeviceSynchronize();
        for (cudaStream_t s : streams) cudaStreamDestroy(s);
        for (cudaEvent_t e : events) cudaEventDestroy(e);
        cudaFreeHost(slots);
    }
    idle_streams(const idle_streams&) = delete;
    idle_streams& operator=(const idle_streams&) = delete;
    cudaStream_t stream(std::int64_t i) const { return streams[static_cast<std::size_t>(i % stream_count)]; }
    cudaEvent_t event(std::int64_t i) const { return events[static_cast<std::size_t>(i & 1023)]; }
    CUdeviceptr slot(std::int64_t i) const { return reinterpret_cast<CUdeviceptr>(slots + i % stream_count); }  // UVA
};

// Runs `call(i)` for each iteration over idle streams; the streams drain between batches.
// `available`: the driver entry point the call needs was found.
template <class Call>
void over_idle_streams(benchmark::State& state, Call&& call, bool available = true) {
    if (!available) {
        state.SkipWithError("no CUDA driver, or it lacks this entry point");
        return;
    }
    idle_streams s;
    if (!s.ok) {
        state.SkipWithError("no GPU, or streams, events or pinned memory could not be made");
        return;
    }
    std::int64_t i = 0;
    for (auto _ : state) {
        call(s, i++);
        if ((i & 4095) == 0) {
            state.PauseTiming();
            cudaDeviceSynchronize();
            state.ResumeTiming();
        }
    }
    cudaDeviceSynchronize();
    state.SetItemsProcessed(i);
}

void event_record(benchmark::State& state) {
    over_idle_streams(state, [](idle_streams& s, std::int64_t i) { cudaEventRecord(s.event(i), s.stream(i)); });
}
void event_query_done(benchmark::State& state) {
    over_idle_streams(state, [](idle_streams& s, std::int64_t i) {
        if (i < 1024) cudaEventRecord(s.event(i), s.stream(i));
        benchmark::DoNotOptimize(cudaEventQuery(s.event(i)));
    });
}
void stream_wait_event(benchmark::State& state) {
    over_idle_streams(state, [](idle_streams& s, std::int64_t i) {
        if (i < 1024) cudaEventRecord(s.event(i), s.stream(i));
        cudaStreamWaitEvent(s.stream(i + 1), s.event(i), 0);
    });
}
void stream_query_idle(benchmark::State& state) {
    over_idle_streams(state, [](idle_streams& s, std::int64_t i) { benchmark::DoNotOptimize(cudaStreamQuery(s.stream(i))); });
}
void stream_write_value(benchmark::State& state) {
    static const auto write = entry<PFN_cuStreamWriteValue64_v11070>("cuStreamWriteValue64", 11070);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) { write(reinterpret_cast<CUstream>(s.stream(i)), s.slot(i), static_cast<cuuint64_t>(i), 0); },
        write != nullptr);
}
void stream_wait_value(benchmark::State& state) {
    static const auto wait = entry<PFN_cuStreamWaitValue64_v11070>("cuStreamWaitValue64", 11070);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) { wait(reinterpret_cast<CUstream>(s.stream(i + 1)), s.slot(i), 0, CU_STREAM_WAIT_VALUE_GEQ); },
        wait != nullptr);
}
void stream_identity(benchmark::State& state) {
    static const auto get_id = entry<PFN_cuStreamGetId_v12000>("cuStreamGetId", 12000);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) {
            unsigned long long id = 0;
            get_id(reinterpret_cast<CUstream>(s.stream(i)), &id);
            benchmark::DoNotOptimize(id);
        },
        get_id != nullptr);
}
void stream_is_capturing(benchmark::State& state) {
    static const auto is_capturing = entry<PFN_cuStreamIsCapturing_v10000>("cuStreamIsCapturing", 10000);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) {
            CUstreamCaptureStatus status{};
            is_capturing(reinterpret_cast<CUstream>(s.stream(i)), &status);
            benchmark::DoNotOptimize(status);
        },
        is_capturing != nullptr);
}
// cuda_events makes its queries and host waits with the thread's capture mode relaxed, by the
// driver's exchange (below) rather than this one: two exchanges around each.
void capture_mode_exchange(benchmark::State& state) {
    over_idle_streams(state, [](idle_streams&, std::int64_t) {
        cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&mode);
        benchmark::DoNotOptimize(mode);
    });
}

// Which device is current, as a scope asks before making one current: the runtime's answer, and
// the driver's current context (what the plugin compares with the device's primary context).
void current_device(benchmark::State& state) {
    over_idle_streams(state, [](idle_streams&, std::int64_t) {
        int device = -1;
        cudaGetDevice(&device);
        benchmark::DoNotOptimize(device);
    });
}
void current_context(benchmark::State& state) {
    static const auto get_current = entry<PFN_cuCtxGetCurrent_v4000>("cuCtxGetCurrent", 4000);
    over_idle_streams(
        state,
        [](idle_streams&, std::int64_t) {
            CUcontext context = nullptr;
            get_current(&context);
            benchmark::DoNotOptimize(context);
        },
        get_current != nullptr);
}
void context_device(benchmark::State& state) {
    static const auto get_device = entry<PFN_cuCtxGetDevice_v2000>("cuCtxGetDevice", 2000);
    over_idle_streams(
        state,
        [](idle_streams&, std::int64_t) {
            CUdevice device = -1;
            get_device(&device);
            benchmark::DoNotOptimize(device);
        },
        get_device != nullptr);
}
// The library's scope on the device whose primary context is current (what each call of a pool
// on it makes).
void device_scope_current(benchmark::State& state) {
    over_idle_streams(state, [](idle_streams&, std::int64_t) {
        const poolkit::detail::device_scope scope(0);
        benchmark::DoNotOptimize(&scope);
    });
}

// The same calls through the driver's entry points (what cuda_events makes for created streams).
void driver_event_record(benchmark::State& state) {
    static const auto record = entry<PFN_cuEventRecord_v2000>("cuEventRecord", 2000);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) { record(reinterpret_cast<CUevent>(s.event(i)), reinterpret_cast<CUstream>(s.stream(i))); },
        record != nullptr);
}
void driver_event_query_done(benchmark::State& state) {
    static const auto query = entry<PFN_cuEventQuery_v2000>("cuEventQuery", 2000);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) {
            if (i < 1024) cudaEventRecord(s.event(i), s.stream(i));
            benchmark::DoNotOptimize(query(reinterpret_cast<CUevent>(s.event(i))));
        },
        query != nullptr);
}
void driver_stream_wait_event(benchmark::State& state) {
    static const auto wait = entry<PFN_cuStreamWaitEvent_v3020>("cuStreamWaitEvent", 3020);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) {
            if (i < 1024) cudaEventRecord(s.event(i), s.stream(i));
            wait(reinterpret_cast<CUstream>(s.stream(i + 1)), reinterpret_cast<CUevent>(s.event(i)), 0);
        },
        wait != nullptr);
}
void driver_stream_query_idle(benchmark::State& state) {
    static const auto query = entry<PFN_cuStreamQuery_v2000>("cuStreamQuery", 2000);
    over_idle_streams(
        state, [](idle_streams& s, std::int64_t i) { benchmark::DoNotOptimize(query(reinterpret_cast<CUstream>(s.stream(i)))); },
        query != nullptr);
}
const auto driver_exchange = entry<PFN_cuThreadExchangeStreamCaptureMode_v10010>("cuThreadExchangeStreamCaptureMode", 10010);
void driver_capture_mode_exchange(benchmark::State& state) {
    over_idle_streams(
        state,
        [](idle_streams&, std::int64_t) {
            CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            driver_exchange(&mode);
            benchmark::DoNotOptimize(mode);
        },
        driver_exchange != nullptr);
}
// What cuda_events::idle() makes: the query between two of the driver's exchanges.
void stream_query_idle_relaxed(benchmark::State& state) {
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) {
            CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            driver_exchange(&mode);
            benchmark::DoNotOptimize(cudaStreamQuery(s.stream(i)));
            driver_exchange(&mode);
        },
        driver_exchange != nullptr);
}
// The same through the driver's query.
void driver_stream_query_idle_relaxed(benchmark::State& state) {
    static const auto query = entry<PFN_cuStreamQuery_v2000>("cuStreamQuery", 2000);
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) {
            CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            driver_exchange(&mode);
            benchmark::DoNotOptimize(query(reinterpret_cast<CUstream>(s.stream(i))));
            driver_exchange(&mode);
        },
        driver_exchange != nullptr && query != nullptr);
}
void event_query_done_relaxed(benchmark::State& state) {
    over_idle_streams(
        state,
        [](idle_streams& s, std::int64_t i) {
            if (i < 1024) cudaEventRecord(s.event(i), s.stream(i));
            CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
            driver_exchange(&mode);
            benchmark::DoNotOptimize(cudaEventQuery(s.event(i)));
            driver_exchange(&mode);
        },
        driver_exchange != nullptr);
}

}  // namespace

BENCHMARK(event_record);
BENCHMARK(event_query_done);
BENCHMARK(stream_wait_event);
BENCHMARK(stream_query_idle);
BENCHMARK(stream_write_value);
BENCHMARK(stream_wait_value);
BENCHMARK(stream_identity);
BENCHMARK(stream_is_capturing);
BENCHMARK(capture_mode_exchange);
BENCHMARK(current_device);
BENCHMARK(current_context);
BENCHMARK(context_device);
BENCHMARK(device_scope_current);
BENCHMARK(driver_event_record);
BENCHMARK(driver_event_query_done);
BENCHMARK(driver_stream_wait_event);
BENCHMARK(driver_stream_query_idle);
BENCHMARK(driver_capture_mode_exchange);
BENCHMARK(stream_query_idle_relaxed);
BENCHMARK(driver_stream_query_idle_relaxed);
BENCHMARK(event_query_done_relaxed);

BENCHMARK_MAIN();
