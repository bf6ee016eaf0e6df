// poolkit as PyTorch's whole CUDA allocator: a CUDAPluggableAllocator whose hooks beyond alloc and
// free reach libpoolkit_plugin.so too. poolkit.torch builds it on first use against the installed
// torch (torch.utils.cpp_extension) and hands it the plugin's C functions by address, so it links
// nothing of poolkit's; where it cannot be built, poolkit.torch falls back to alloc and free alone
// and capabilities() says what is missing.
//
// What reaches the plugin (include/poolkit/interop/c_api.h):
// - Tensor.record_stream -> poolkit_record_stream (recordStream, with the stream's device);
// - torch.cuda.empty_cache -> poolkit_empty_cache (the reset hook);
// - torch.cuda.memory_stats and everything built on it (memory_allocated, max_memory_reserved,
//   memory_summary ...) -> poolkit_memory_stats_json; reset_peak_memory_stats ->
//   poolkit_reset_peak_stats; reset_accumulated_memory_stats -> poolkit_reset_accumulated_stats;
// - CUDA graphs: each PyTorch mempool id a capture allocates to (beginAllocateToPool, with the
//   filter that names its streams) is one poolkit graph pool, given to the capture's streams at
//   their first call in it (poolkit_capture_into), so that graphs captured with one
//   graph_pool_handle() share it. A graph pool releases itself once CUDA destroys its graphs
//   (docs/stream_ordering.md), so releasePool only forgets the id. Each window is announced
//   (poolkit_announce_capture), so that the pools ask about captures only while one is open;
// - set_per_process_memory_fraction -> poolkit_set_memory_fraction (a cap on the bytes reserved);
// - exhaustion -> torch.OutOfMemoryError with poolkit's figures, after the out-of-memory
//   observers (torch._C._cuda_attach_out_of_memory_observer) are told.
// - allocation history: record_history() makes every pool record its history
//   (poolkit_record_history), each alloc (and free) labelled with the Python and C++ call stack
//   gathered as PyTorch's allocator gathers it (torch::CapturedTraceback); history_frames() turns
//   labels into the frames of PyTorch's snapshot. poolkit.torch routes
//   torch.cuda.memory._record_memory_history and _snapshot to them in Python.
// A tensor's DataPtr carries its block's size, device and stream to the plugin's free itself; the
// base's map under a mutex serves only raw_alloc and raw_delete, which have the pointer alone.
// Not here: torch.cuda.MemPool (not supported yet).
#include <torch/csrc/cuda/CUDAPluggableAllocator.h>
#include <torch/csrc/profiler/combined_traceback.h>
#include <torch/extension.h>

#include <pybind11/stl.h>

#include <c10/core/CachingDeviceAllocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>
#include <torch/version.h>

#include <sys/types.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace {

// The plugin's history callbacks (include/poolkit/interop/c_api.h), by value.
struct poolkit_history_callbacks {
    unsigned long long (*label)(void* user, int action);
    void (*release)(void* user, unsigned long long label);
    void* user;
};

namespace pluggable = torch::cuda::CUDAPluggableAllocator;
using c10::cuda::MempoolId_t;
using device_stats = c10::CachingDeviceAllocator::DeviceStats;

// The plugin's C ABI, by the addresses poolkit._plugin hands over.
struct plugin_api {
    void* (*alloc)(ssize_t, int, cudaStream_t) = nullptr;
    void (*free)(void*, ssize_t, int, cudaStream_t) = nullptr;
    void (*record_stream)(void*, int, cudaStream_t) = nullptr;
    void (*empty_cache)() = nullptr;
    int (*reset_peak_stats)(int) = nullptr;
    int (*reset_accumulated_stats)(int) = nullptr;
    long (*memory_stats_json)(int, char*, size_t) = nullptr;
    int (*capture_into)(int, cudaStream_t, unsigned long long) = nullptr;
    void (*announce_capture)(int) = nullptr;
    int (*set_memory_fraction)(int, double) = nullptr;
    int (*record_history)(size_t, poolkit_history_callbacks) = nullptr;
    const char* (*last_error)() = nullptr;
    int (*lasting_stream)(cudaStream_t) = nullptr;  // nullptr: a plugin built before it
};
plugin_api plugin;

std::string last_error() {
    const char* text = plugin.last_error();
    return text != nullptr ? text : "";
}

// Raises the plugin's error of the call just made, if any, as PyTorch's.
void check(const char* what) {
    const std::string error = last_error();
    TORCH_CHECK(error.empty(), "poolkit: torch.cuda ", what, " failed: ", error);
}

// Messages are built as one std::string (std::to_string, snprintf) before TORCH_CHECK: inserting a
// number into the message through c10::str (std::ostream::_M_insert<long>, compiled into this
// extension) crashed in torch 2.11's process, while inserting strings works.

// A byte count as PyTorch's messages write it ("512 bytes", "20.00 MiB").
std::string format_size(std::uint64_t bytes) {
    if (bytes <= 4096) return std::to_string(bytes) + " bytes";
    static const char* const units[] = {"KiB", "MiB", "GiB"};
    double value = static_cast<double>(bytes) / 1024.0;
    std::size_t unit = 0;
    while (value >= 1024.0 && unit + 1 < std::size(units)) {
        value /= 1024.0;
        ++unit;
    }
    char text[32];
    std::snprintf(text, sizeof text, "%.2f %s", value, units[unit]);
    return text;
}

// set_per_process_memory_fraction's last value by device (the plugin holds the cap in bytes): what
// get_per_process_memory_fraction reads back and what the out-of-memory observers are told.
class memory_fractions {
public:
    void set(int device, double fraction) {
        const std::lock_guard lock(mutex_);
        if (device >= static_cast<int>(fractions_.size())) fractions_.resize(static_cast<std::size_t>(device) + 1);
        fractions_[static_cast<std::size_t>(device)] = fraction;
    }
    // The fraction set for `device`, if one was.
    std::optional<double> get(int device) {
        const std::lock_guard lock(mutex_);
        if (device < 0 || device >= static_cast<int>(fractions_.size())) return std::nullopt;
        return fractions_[static_cast<std::size_t>(device)];
    }

private:
    std::mutex mutex_;
    std::vector<std::optional<double>> fractions_;
};
memory_fractions fractions;

// The flat {"key": integer, ...} object of poolkit_memory_stats_json; sized again where it grew
// between the sizing call and the copy (the pool made meanwhile, say).
std::unordered_map<std::string, std::int64_t> read_stats(int device) {
    long length = plugin.memory_stats_json(device, nullptr, 0);
    check("memory_stats");
    std::string text;
    for (;;) {
        text.assign(static_cast<std::size_t>(length) + 1, '\0');
        const long written = plugin.memory_stats_json(device, text.data(), text.size());
        check("memory_stats");
        if (written <= length) break;
        length = written;
    }
    std::unordered_map<std::string, std::int64_t> stats;
    for (std::size_t at = text.find('"'); at != std::string::npos; at = text.find('"', at)) {
        const std::size_t end = text.find('"', at + 1);
        if (end == std::string::npos) break;
        const std::size_t colon = text.find(':', end);
        if (colon == std::string::npos) break;
        stats[text.substr(at + 1, end - at - 1)] = std::strtoll(text.c_str() + colon + 1, nullptr, 10);
        at = colon;
    }
    return stats;
}

// PyTorch's figures from poolkit's: each key PyTorch's Python side builds (allocated_bytes.all.peak,
// num_device_alloc ...) is read from the same key of poolkit's stats, 0 where poolkit has none.
device_stats to_device_stats(const std::unordered_map<std::string, std::int64_t>& stats) {
    const auto get = [&](const std::string& key) {
        const auto found = stats.find(key);
        return found == stats.end() ? std::int64_t{0} : found->second;
    };
    const auto fill = [&](c10::CachingDeviceAllocator::Stat& stat, const std::string& prefix) {
        stat.current = get(prefix + ".current");
        stat.peak = get(prefix + ".peak");
        stat.allocated = get(prefix + ".allocated");
        stat.freed = get(prefix + ".freed");
    };
    const auto fill_array = [&](c10::CachingDeviceAllocator::StatArray& array, const std::string& name) {
        static const char* const pools[] = {"all", "small_pool", "large_pool"};
        for (std::size_t i = 0; i < array.size() && i < 3; ++i) fill(array[i], name + "." + pools[i]);
    };
    device_stats out;
    fill_array(out.allocation, "allocation");
    fill_array(out.segment, "segment");
    fill_array(out.active, "active");
    fill_array(out.inactive_split, "inactive_split");
    fill_array(out.allocated_bytes, "allocated_bytes");
    fill_array(out.reserved_bytes, "reserved_bytes");
    fill_array(out.active_bytes, "active_bytes");
    fill_array(out.inactive_split_bytes, "inactive_split_bytes");
    fill_array(out.requested_bytes, "requested_bytes");
    fill(out.oversize_allocations, "oversize_allocations");
    fill(out.oversize_segments, "oversize_segments");
    out.num_alloc_retries = get("num_alloc_retries");
    out.num_ooms = get("num_ooms");
    out.num_sync_all_streams = get("num_sync_all_streams");
    out.num_device_alloc = get("num_device_alloc");
    out.num_device_free = get("num_device_free");
    out.max_split_size = get("max_split_size");
    return out;
}

// The captures PyTorch announces (beginAllocateToPool .. endAllocateToPool) and the poolkit graph
// pool of each mempool id. A stream a capture's filter accepts is routed at its first call in the
// window; calls outside any window cost one atomic load. Each window is announced to the plugin
// too (PyTorch opens it before cudaStreamBeginCapture and closes it after cudaStreamEndCapture), so
// that its pools ask the driver whether a stream is in capture only while one may be
// (poolkit_set_capture_checks("announced"), which poolkit.torch sets).
class graph_routes {
public:
    void begin(int device, MempoolId_t id, std::function<bool(cudaStream_t)> filter) {
        const std::lock_guard lock(mutex_);
        auto [named, made] = pools_.try_emplace(id, pool_name{next_name_, 0});
        if (made) ++next_name_;
        ++named->second.captures;
        open_.push_back({device, id, std::move(filter), named->second.name, {}});
        plugin.announce_capture(1);
        open_count_.fetch_add(1, std::memory_order_release);
    }
    void end(int device, MempoolId_t id) {
        const std::lock_guard lock(mutex_);
        const auto found = std::find_if(open_.begin(), open_.end(), [&](const window& w) { return w.device == device && w.id == id; });
        if (found == open_.end()) return;
        open_.erase(found);
        open_count_.fetch_sub(1, std::memory_order_release);
        plugin.announce_capture(0);
    }
    // PyTorch is done with `id` (a graph reset, a MemPool gone): forgotten once no capture uses it.
    void release(MempoolId_t id) {
        const std::lock_guard lock(mutex_);
        const auto found = pools_.find(id);
        if (found != pools_.end() && --found->second.captures <= 0) pools_.erase(found);
    }
    // Whether a capture window is open.
    bool open() const noexcept { return open_count_.load(std::memory_order_acquire) != 0; }

    // Before a call on `stream`: a stream of an open capture allocates from its mempool's pool (the
    // first window whose filter takes it, as PyTorch's allocator picks). Never throws: a filter
    // that fails (a stream destroyed since) routes nothing, and frees run from deleters.
    void route(int device, cudaStream_t stream) noexcept {
        if (open_count_.load(std::memory_order_acquire) == 0) [[likely]]
            return;
        try {
            const std::lock_guard lock(mutex_);
            for (window& w : open_) {
                if (w.device != device) continue;
                if (std::find(w.routed.begin(), w.routed.end(), stream) != w.routed.end()) return;
                if (!w.filter(stream)) continue;
                w.routed.push_back(stream);
                // A stream not in capture (MemPool's use_mem_pool) is served by the shared pool.
                static_cast<void>(plugin.capture_into(device, stream, w.name));
                return;
            }
        } catch (...) {
            static_cast<void>(cudaGetLastError());
        }
    }

private:
    struct pool_name {
        unsigned long long name;
        int captures;
    };
    struct window {
        int device;
        MempoolId_t id;
        std::function<bool(cudaStream_t)> filter;
        unsigned long long name;
        std::vector<cudaStream_t> routed;
    };
    std::mutex mutex_;
    std::atomic<int> open_count_{0};
    std::vector<window> open_;
    std::map<MempoolId_t, pool_name> pools_;
    unsigned long long next_name_ = 1ull << 62;  // apart from capture ids, each capture's own name
};
graph_routes routes;

// The call stacks of the history's events: a label per captured stack, kept until the plugin hands
// the label back. A stack handed back is destroyed later, on a thread holding no lock of
// poolkit's (its Python frames need the GIL).
class history_stacks {
public:
    // What to gather: Python frames, C++ frames, and stacks for frees too (else allocs only).
    void configure(bool python, bool cpp, bool frees) {
        const std::lock_guard lock(mutex_);
        python_ = python;
        cpp_ = cpp;
        frees_ = frees;
    }

    // The plugin's label callback: action 0 is alloc, 1 free_requested, 7 oom.
    static unsigned long long label(void* user, int action) {
        auto& self = *static_cast<history_stacks*>(user);
        bool python = false, cpp = false, frees = false;
        {
            const std::lock_guard lock(self.mutex_);
            python = self.python_;
            cpp = self.cpp_;
            frees = self.frees_;
        }
        if ((action == 1 && !frees) || (!python && !cpp)) return 0;
        try {
            std::shared_ptr<torch::CapturedTraceback> stack = torch::CapturedTraceback::gather(python, false, cpp);
            std::vector<std::shared_ptr<torch::CapturedTraceback>> gone;
            const std::lock_guard lock(self.mutex_);
            gone.swap(self.released_);  // destroyed after the lock, here
            const unsigned long long id = ++self.next_;
            self.live_.emplace(id, std::move(stack));
            return id;
        } catch (...) {
            return 0;
        }
    }
    // The plugin's release callback, under a pool's lock: the stack is only set aside.
    static void release(void* user, unsigned long long label) {
        auto& self = *static_cast<history_stacks*>(user);
        try {
            const std::lock_guard lock(self.mutex_);
            const auto found = self.live_.find(label);
            if (found == self.live_.end()) return;
            self.released_.push_back(std::move(found->second));
            self.live_.erase(found);
        } catch (...) {
        }
    }

    // For each label, its stack as PyTorch's snapshot writes frames: [{"filename", "line",
    // "name"}, ...], innermost first; [] for 0 or a label handed back already.
    py::list frames(const std::vector<unsigned long long>& labels) {
        std::vector<std::shared_ptr<torch::CapturedTraceback>> stacks(labels.size());
        std::vector<std::shared_ptr<torch::CapturedTraceback>> gone;
        {
            const std::lock_guard lock(mutex_);
            gone.swap(released_);
            for (std::size_t i = 0; i < labels.size(); ++i) {
                const auto found = live_.find(labels[i]);
                if (found != live_.end()) stacks[i] = found->second;
            }
        }
        std::vector<torch::CapturedTraceback*> known;
        for (const auto& stack : stacks) {
            if (stack) known.push_back(stack.get());
        }
        const torch::SymbolizedTracebacks symbols = torch::symbolize(known);
        std::vector<py::dict> all_frames;
        all_frames.reserve(symbols.all_frames.size());
        for (const auto& frame : symbols.all_frames) {
            py::dict d;
            d["filename"] = frame.filename;
            d["line"] = frame.lineno;
            d["name"] = frame.funcname;
            all_frames.push_back(std::move(d));
        }
        py::list out;
        std::size_t next = 0;
        for (const auto& stack : stacks) {
            py::list frames_of;
            if (stack) {
                // The innermost C++ frames, down to the plugin's entry point (poolkit_alloc ...), are
                // poolkit's own gathering: the stack starts at PyTorch's call.
                const std::vector<std::uint64_t>& indices = symbols.tracebacks[next++];
                std::size_t first = 0;
                for (std::size_t i = 0; i < indices.size(); ++i) {
                    if (symbols.all_frames[indices[i]].funcname.starts_with("poolkit_")) first = i + 1;
                }
                for (std::size_t i = first; i < indices.size(); ++i) frames_of.append(all_frames[indices[i]]);
            }
            out.append(std::move(frames_of));
        }
        return out;
    }

private:
    std::mutex mutex_;
    bool python_ = true, cpp_ = false, frees_ = true;
    unsigned long long next_ = 0;
    std::unordered_map<unsigned long long, std::shared_ptr<torch::CapturedTraceback>> live_;
    std::vector<std::shared_ptr<torch::CapturedTraceback>> released_;
};
history_stacks stacks;

// torch.cuda.memory._record_memory_history's effect on every pool: a ring of `max_entries` events
// (0 stops), each alloc labelled with its stack where `python` or `cpp`, each free too where `frees`.
void record_history(std::size_t max_entries, bool python, bool cpp, bool frees) {
    stacks.configure(python, cpp, frees);
    const int failed =
        plugin.record_history(max_entries, poolkit_history_callbacks{&history_stacks::label, &history_stacks::release, &stacks});
    TORCH_CHECK(failed == 0, "poolkit: _record_memory_history failed: ", last_error());
}

// The plugin's alloc and free as the base calls them, a capture's stream routed to its pool first.
void* plugin_alloc(std::size_t size, int device, cudaStream_t stream) {
    routes.route(device, stream);
    return plugin.alloc(static_cast<ssize_t>(size), device, stream);
}
void plugin_free(void* pointer, std::size_t size, int device, cudaStream_t stream) {
    routes.route(device, stream);
    plugin.free(pointer, static_cast<ssize_t>(size), device, stream);
}

// Declares `stream` lasting to the plugin where it is one of PyTorch's own (its default and pooled
// streams, never destroyed; their StreamIds are odd since torch 2.1, where an external stream's is
// its even handle), so that the pools tell it apart with no driver call at each call on it. Once
// per stream and thread, as the last four streams each thread offered are remembered, declared or
// refused (a refused one asks the driver at each call, as before); never while a capture window is
// open (asking a capturing stream's id would break the capture).
void declare_if_lasting(const c10::cuda::CUDAStream& stream) noexcept {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
    thread_local std::array<cudaStream_t, 4> offered{};
    thread_local std::size_t next = 0;
    const cudaStream_t handle = stream.stream();
    if (handle == nullptr || std::find(offered.begin(), offered.end(), handle) != offered.end()) return;
    if ((stream.id() & 1) == 0 || plugin.lasting_stream == nullptr || routes.open()) return;
    static_cast<void>(plugin.lasting_stream(handle));
    offered[next] = handle;
    next = (next + 1) % offered.size();
#else
    static_cast<void>(stream);
#endif
}

// What a tensor's DataPtr holds to give its block back (the base's bookkeeping, without the map).
struct block_context {
    void* pointer;
    std::size_t size;
    int device;
    cudaStream_t stream;
};

// The deleter of a tensor's DataPtr. A free the plugin refuses leaves its error in
// poolkit_last_error, as the base's deleter does: a deleter cannot raise.
void free_block(void* context) {
    const std::unique_ptr<block_context> block(static_cast<block_context*>(context));
    plugin_free(block->pointer, block->size, block->device, block->stream);
}

// CUDAPluggableAllocator with the overrides the setters cannot reach.
class poolkit_allocator final : public pluggable::CUDAPluggableAllocator {
public:
    poolkit_allocator() : CUDAPluggableAllocator(&plugin_alloc, &plugin_free) {
        set_reset_fn([] {
            plugin.empty_cache();
            check("empty_cache");
        });
        set_begin_allocate_to_pool(
            [](int device, MempoolId_t id, std::function<bool(cudaStream_t)> filter) { routes.begin(device, id, std::move(filter)); });
        set_end_allocate_to_pool_fn([](int device, MempoolId_t id) { routes.end(device, id); });
        set_release_pool([](int, MempoolId_t id) { routes.release(id); });
        set_memory_fraction_fn([](double fraction, int device) {
            plugin.set_memory_fraction(device, fraction);
            check("set_per_process_memory_fraction");
            fractions.set(device, fraction);
        });
    }

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 9)  // where CUDAAllocator has it
    // torch.cuda.get_per_process_memory_fraction (the base raises): 1 until one is set.
    double getMemoryFraction(c10::DeviceIndex device) override { return fractions.get(device).value_or(1.0); }
#endif

    // A tensor's block: its DataPtr carries what giving it back needs, where the base would keep
    // it in a map under a mutex taken at both ends (allocation_metadata_).
    c10::DataPtr allocate(std::size_t size) override {
        c10::DeviceIndex device = -1;
        C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
        const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device);
        declare_if_lasting(current);
        const cudaStream_t stream = current;
        void* pointer = plugin_alloc(size, device, stream);
        if (pointer == nullptr) {
            if (size != 0) raise_failed_alloc(size, device);
            return {nullptr, nullptr, &free_block, c10::Device(c10::DeviceType::CUDA, device)};
        }
        block_context* context = nullptr;
        try {
            context = new block_context{pointer, size, device, stream};
        } catch (...) {
            plugin_free(pointer, size, device, stream);
            throw;
        }
        return {pointer, context, &free_block, c10::Device(c10::DeviceType::CUDA, device)};
    }
    void* raw_alloc(std::size_t size) override {
        c10::DeviceIndex device = -1;
        C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
        const c10::cuda::CUDAStream current = c10::cuda::getCurrentCUDAStream(device);
        declare_if_lasting(current);
        return checked_malloc(size, device, current);
    }
    void* raw_alloc_with_stream(std::size_t size, cudaStream_t stream) override {
        c10::DeviceIndex device = -1;
        C10_CUDA_CHECK(c10::cuda::GetDevice(&device));
        return checked_malloc(size, device, stream);
    }

    // A size-0 allocation's null pointer was never the plugin's (and shares one bookkeeping entry).
    void raw_delete(void* pointer) override {
        if (pointer != nullptr) CUDAPluggableAllocator::raw_delete(pointer);
    }

    void recordStream(const c10::DataPtr& pointer, c10::cuda::CUDAStream stream) override {
        if (pointer.get() == nullptr) return;
        plugin.record_stream(pointer.get(), stream.device_index(), stream.stream());
        check("record_stream");
    }

    device_stats getDeviceStats(c10::DeviceIndex device) override { return to_device_stats(read_stats(device)); }
    void resetPeakStats(c10::DeviceIndex device) override {
        plugin.reset_peak_stats(device);
        check("reset_peak_memory_stats");
    }
    void resetAccumulatedStats(c10::DeviceIndex device) override {
        plugin.reset_accumulated_stats(device);
        check("reset_accumulated_memory_stats");
    }

    void attachOutOfMemoryObserver(c10::cuda::CUDACachingAllocator::OutOfMemoryObserver observer) override {
        const std::lock_guard lock(observers_mutex_);
        observers_.push_back(std::move(observer));
    }

private:
    // The base's malloc (the plugin's alloc and PyTorch's bookkeeping of the block, which
    // raw_delete reads), with a failure raised as PyTorch raises its own.
    void* checked_malloc(std::size_t size, c10::DeviceIndex device, cudaStream_t stream) {
        void* pointer = malloc(size, device, stream);
        if (pointer != nullptr || size == 0) return pointer;
        {
            const std::lock_guard lock(allocator_mutex_);
            allocation_metadata_.erase(nullptr);
        }
        raise_failed_alloc(size, device);
    }

    // The plugin's failure of the allocation just tried: OutOfMemoryError for exhaustion.
    [[noreturn]] void raise_failed_alloc(std::size_t size, c10::DeviceIndex device) {
        const std::string error = last_error();
        if (error.find("out of memory") != std::string::npos) raise_out_of_memory(size, device, error);
        C10_THROW_ERROR(
            Error, "poolkit: allocation of " + std::to_string(size) + " bytes on device " + std::to_string(device) + " failed: " + error);
    }

    // Tells the observers (with the bytes allowed where a fraction is set, as PyTorch's allocator
    // does), then raises OutOfMemoryError in PyTorch's words with poolkit's figures.
    [[noreturn]] void raise_out_of_memory(std::size_t size, c10::DeviceIndex device, const std::string& error) {
        std::size_t free_bytes = 0, total_bytes = 0;
        if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) static_cast<void>(cudaGetLastError());
        const std::optional<double> fraction = fractions.get(device);
        const auto allowed = static_cast<std::size_t>(fraction.value_or(1.0) * static_cast<double>(total_bytes));
        std::vector<c10::cuda::CUDACachingAllocator::OutOfMemoryObserver> observers;
        {
            const std::lock_guard lock(observers_mutex_);
            observers = observers_;
        }
        for (const auto& observer : observers) observer(device, size, fraction ? allowed : total_bytes, free_bytes);

        std::int64_t allocated = 0, reserved = 0;
        try {
            const auto stats = read_stats(device);
            const auto get = [&](const char* key) {
                const auto found = stats.find(key);
                return found == stats.end() ? std::int64_t{0} : found->second;
            };
            allocated = get("allocated_bytes.all.current");
            reserved = get("reserved_bytes.all.current");
        } catch (const c10::Error&) {  // the figures are a courtesy: the error raised is the OOM
        }
        std::string message = "CUDA out of memory. Tried to allocate " + format_size(size) + ". GPU " + std::to_string(device) +
                              " has a total capacity of " + format_size(total_bytes) + " of which " + format_size(free_bytes) +
                              " is free. ";
        if (fraction) message += format_size(allowed) + " allowed; ";
        message += "Of the allocated memory " + format_size(static_cast<std::uint64_t>(allocated)) + " is allocated by poolkit, and " +
                   format_size(static_cast<std::uint64_t>(std::max<std::int64_t>(reserved - allocated, 0))) +
                   " is reserved by poolkit but unallocated. " + error;
        C10_THROW_ERROR(OutOfMemoryError, message);
    }

    std::mutex observers_mutex_;
    std::vector<c10::cuda::CUDACachingAllocator::OutOfMemoryObserver> observers_;
};

// A function the plugin may lack: nullptr then.
template <class Function>
void bind_optional(Function& slot, const std::map<std::string, std::uintptr_t>& functions, const std::string& name) {
    const auto found = functions.find(name);
    slot = found != functions.end() ? reinterpret_cast<Function>(found->second) : nullptr;
}

template <class Function>
void bind_function(Function& slot, const std::map<std::string, std::uintptr_t>& functions, const std::string& name) {
    const auto found = functions.find(name);
    TORCH_CHECK(found != functions.end() && found->second != 0, "poolkit: the plugin's ", name, " was not handed over");
    slot = reinterpret_cast<Function>(found->second);
}

// Makes poolkit PyTorch's allocator; `functions` maps the C ABI's names to their addresses.
// Raises where PyTorch's allocator is already in use.
void install(const std::map<std::string, std::uintptr_t>& functions, int device_count) {
    bind_function(plugin.alloc, functions, "poolkit_alloc");
    bind_function(plugin.free, functions, "poolkit_free");
    bind_function(plugin.record_stream, functions, "poolkit_record_stream");
    bind_function(plugin.empty_cache, functions, "poolkit_empty_cache");
    bind_function(plugin.reset_peak_stats, functions, "poolkit_reset_peak_stats");
    bind_function(plugin.reset_accumulated_stats, functions, "poolkit_reset_accumulated_stats");
    bind_function(plugin.memory_stats_json, functions, "poolkit_memory_stats_json");
    bind_function(plugin.capture_into, functions, "poolkit_capture_into");
    bind_function(plugin.announce_capture, functions, "poolkit_announce_capture");
    bind_function(plugin.set_memory_fraction, functions, "poolkit_set_memory_fraction");
    bind_function(plugin.record_history, functions, "poolkit_record_history");
    bind_function(plugin.last_error, functions, "poolkit_last_error");
    bind_optional(plugin.lasting_stream, functions, "poolkit_lasting_stream");
    auto allocator = std::make_shared<poolkit_allocator>();
    allocator->init(device_count);
    pluggable::changeCurrentAllocator(allocator);
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, module) {
    module.doc() = "poolkit's PyTorch allocator hooks (poolkit.torch builds and loads this)";
    module.def("install", &install, "Makes poolkit PyTorch's CUDA allocator, every hook wired");
    module.def("record_history", &record_history, "Starts (max_entries > 0) or stops every pool's history, labelled with call stacks");
    module.def(
        "history_frames", [](const std::vector<unsigned long long>& labels) { return stacks.frames(labels); },
        "The frames of each label's call stack, as PyTorch's snapshot writes them");
}
