// libpoolkit_plugin.so: the C ABI of include/poolkit/interop/c_api.h over one device allocator per
// device, of one kind for the whole process: the caching preset (the default) or the expandable
// one, chosen by poolkit_set_allocator() or else by POOLKIT_ALLOCATOR=caching|expandable, read
// when the first pool is made, with the options poolkit_set_option() set. What users hold is
// counted inside the pool's lock, in plain integers (atomic counters outside it cost a quarter of
// the layers' time per call); the caching kind's reserved bytes are counted below the pool, the
// expandable kind's are what its virtual memory has mapped.
//
// Built twice from this file: over CUDA (libpoolkit_plugin.so) and, with POOLKIT_PLUGIN_SIMULATED,
// over simulated memory (libpoolkit_plugin_simulated.so: the same pools, the same C ABI, no GPU,
// no CUDA call; its "devices" hand out addresses nothing may touch), so that the C ABI and the
// Python package over it are tested on machines without a GPU.
#include <poolkit/interop/c_api.h>

#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/recorded.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/detail/lasting_streams.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/captures.hpp>
#include <poolkit/interop/option_text.hpp>
#include <poolkit/interop/per_device.hpp>
#include <poolkit/observe/fragmentation.hpp>
#include <poolkit/observe/mapped_walk.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/observe/snapshot.hpp>
#include <poolkit/presets.hpp>

#if POOLKIT_PLUGIN_SIMULATED
#  include <poolkit/adaptor/completed_events.hpp>
#  include <poolkit/upstream/simulated_resource.hpp>
#  include <poolkit/upstream/simulated_vmm_resource.hpp>
#else
#  include <poolkit/core/detail/cuda_driver.hpp>

#  include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

using namespace poolkit;

using stats_map = std::map<std::string, std::int64_t>;

// Where memory comes from, and how a device is made current. `granularity` is the granule of
// the virtual memory that expandable options are checked against before there is a device to
// ask: 2 MiB, the smallest a CUDA device has (the pool checks the device's own when it is made).
#if POOLKIT_PLUGIN_SIMULATED
// The count in environment variable `name`, or `fallback` when it is unset or empty. Throws
// std::invalid_argument for text that is not a decimal count from `least` to `most`.
std::size_t environment_count(const char* name, std::size_t fallback, std::size_t least, std::size_t most) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return fallback;
    std::size_t parsed = 0;
    const auto [end, error] = std::from_chars(value, value + std::strlen(value), parsed);
    if (error != std::errc{} || *end != '\0' || parsed < least || parsed > most) {
        throw std::invalid_argument(std::string("poolkit: ") + name + "=" + value + " is not a count from " + std::to_string(least) +
                                    " to " + std::to_string(most));
    }
    return parsed;
}

struct backend {
    static constexpr const char* name = "simulated";
    using events = completed_events;
    using memory = simulated_resource;
    using virtual_memory = simulated_vmm_resource;
    static constexpr std::size_t granularity = std::size_t{2} << 20;

    // POOLKIT_SIMULATED_DEVICES devices (2; at most 1024) of POOLKIT_SIMULATED_MEMORY bytes each
    // (80 GiB; from a granule to 4 TiB, since a device reserves up to four times its memory in
    // address space).
    static int device_count() { return static_cast<int>(environment_count("POOLKIT_SIMULATED_DEVICES", 2, 0, 1024)); }
    static std::size_t device_memory() {
        return environment_count("POOLKIT_SIMULATED_MEMORY", std::size_t{80} << 30, granularity, std::size_t{4} << 40);
    }
    static simulated_options memory_options() { return {.capacity = device_memory()}; }
    static std::size_t device_total(int) { return device_memory(); }
    static simulated_vmm_options virtual_memory_options() {
        return {.capacity = 4 * device_memory(), .granularity = granularity, .physical_limit = device_memory()};
    }

    using device_scope = no_device_scope;  // the simulated devices need none made current

    // Simulated streams are told apart at no cost: nothing to declare.
    static bool declare_lasting(stream_ref) noexcept { return true; }
};
#else
struct backend {
    static constexpr const char* name = "cuda";
    using events = cuda_events;
    using memory = cuda_device_resource;
    using virtual_memory = cuda_vmm_resource;
    static constexpr std::size_t granularity = std::size_t{2} << 20;

    static int device_count() {
        int count = 0;
        return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
    }
    static cuda_vmm_options virtual_memory_options() { return {}; }
    static bool declare_lasting(stream_ref stream) noexcept { return cuda_events::declare_lasting(stream); }
    // The memory of the current device.
    static std::size_t device_total(int) {
        std::size_t free_bytes = 0, total_bytes = 0;
        detail::check_cuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
        return total_bytes;
    }

    // Compares the driver's current context with the device's primary one before asking the
    // runtime (cudaGetDevice costs more than the layers around the pool): detail::device_scope.
    using device_scope = detail::device_scope;
};
#endif

enum class allocator_kind { caching, expandable };

std::optional<allocator_kind> kind_named(std::string_view name) {
    if (name == "caching") return allocator_kind::caching;
    if (name == "expandable") return allocator_kind::expandable;
    return std::nullopt;
}

const char* name_of(allocator_kind kind) { return kind == allocator_kind::caching ? "caching" : "expandable"; }

// POOLKIT_ALLOCATOR, caching when unset. Throws std::invalid_argument for another value.
allocator_kind kind_from_environment() {
    const char* value = std::getenv("POOLKIT_ALLOCATOR");
    if (value == nullptr || *value == '\0') return allocator_kind::caching;
    if (const auto kind = kind_named(value)) return *kind;
    throw std::invalid_argument(std::string("poolkit: POOLKIT_ALLOCATOR=") + value + " (expected caching or expandable)");
}

// The options of both kinds; poolkit_set_option() sets those of one.
struct settings {
    caching_options caching;
    expandable_options expandable;
};

// Sets option `name` of `kind` in `s` (interop/option_text.hpp: by the options' C++ names), checked
// against the options set before it as the kind's pool will check them, expandable's against the
// smallest granule a device has. Throws std::invalid_argument for a name the kind does not have, a
// value that is not one, or one its rules refuse; `s` is then unchanged.
void set_option(settings& s, allocator_kind kind, std::string_view name, std::string_view value) {
    if (kind == allocator_kind::caching) {
        poolkit::set_option(s.caching, name, value);
    } else {
        poolkit::set_option(s.expandable, name, value, backend::granularity);
    }
}

// "0x" and the address in hexadecimal.
std::string address_text(const void* pointer) {
    char text[2 + 2 * sizeof(std::uintptr_t)] = {'0', 'x'};
    const auto end = std::to_chars(text + 2, std::end(text), reinterpret_cast<std::uintptr_t>(pointer), 16).ptr;
    return std::string(text, end);
}

// One device's allocator as the C API uses it, whichever kind it is. free and record_use throw
// std::invalid_argument, changing nothing, for a pointer that is not a live block's start or a
// size other than the block's: the pool would assert (ending the host process) or, without
// assertions, miscount its statistics and keep a block for good.
class device_pool {
public:
    virtual ~device_pool() = default;
    virtual void* allocate(std::size_t bytes, stream_ref stream) = 0;
    virtual void free(void* pointer, std::size_t bytes, stream_ref stream) = 0;
    virtual void record_use(void* pointer, stream_ref stream) = 0;
    virtual void capture_into(stream_ref stream, std::uint64_t pool) = 0;
    virtual void release_graph_pool(std::uint64_t pool) = 0;
    virtual void capture_checks(capture_check check) = 0;
    // The most bytes the pool may reserve (no_limit: none), PyTorch's memory fraction.
    static constexpr std::size_t no_limit = SIZE_MAX;
    virtual void set_limit(std::size_t bytes) = 0;
    virtual void release() = 0;  // empty_cache
    virtual void reset_peak() = 0;
    virtual void reset_accumulated() = 0;
    [[nodiscard]] virtual stats_map memory_stats() const = 0;
    [[nodiscard]] virtual std::string summary() const = 0;
    [[nodiscard]] virtual std::string snapshot_json() const = 0;
    // Starts recording the pool's history into a ring of `max_entries` events (0: stops and drops
    // it), labelled by `context`.
    virtual void record_history(std::size_t max_entries, const history_context& context) = 0;
    [[nodiscard]] virtual std::string history_json() = 0;
};

// Allocated bytes count each block as PyTorch's allocator does, its bytes rounded up to 512, so that
// torch.cuda.memory_allocated() reads the same under either allocator.
constexpr std::size_t pytorch_block_unit = 512;

// The statistics of what users hold, counted under the pool's lock (read under it too).
template <class Pool>
using counted_users = synchronized<counted<Pool, single_thread_counters>>;

// Reserved figures (segments, num_device_alloc) come from the inner statistics, the user-facing
// ones from the outer. The memory fraction caps the bytes reserved (limiting, between the pool
// and the counter).
struct caching_parts {
    using reserved_counter = counted<backend::memory>;
    using segments_recorder = recorded<ref<reserved_counter>>;
    using capped = limited<ref<segments_recorder>>;
    history events;  // what users and the upstream saw (record_history); first made, last gone
    reserved_counter reserved;
    segments_recorder segments;
    capped cap;
    counted_users<caching_resource<ref<capped>, backend::events>> users;

    explicit caching_parts(const settings& s)
#if POOLKIT_PLUGIN_SIMULATED
        : reserved(std::in_place, backend::memory_options()),
#else
        : reserved(),
#endif
          segments(ref<reserved_counter>(reserved), events, recording_layer::segments),
          cap(ref<segments_recorder>(segments)),
          users(std::in_place, std::in_place, ref<capped>(cap), s.caching) {
        users.locked([](auto& c) { c.count_in_units_of(pytorch_block_unit); });
    }

    // The most bytes reserved at once (no_limit: none).
    void set_limit(std::size_t bytes) { cap.set_limit(bytes); }

    // The pool's own chunks and blocks, read under its lock.
    template <class Action>
    decltype(auto) walk(Action&& action) const {
        return users.locked([&](const auto& c) { return action(c.upstream_resource()); });
    }
};

// Reserved figures are the virtual memory's, which counted<> reads below the pool (mapped
// bytes, map and unmap calls; the memory has its own lock); there are no segment.* counts.
struct expandable_parts {
    history events;  // what users and the mappings saw (record_history); first made, last gone
    backend::virtual_memory vm;
    counted_users<expandable_resource<recorded_memory<backend::virtual_memory>, backend::events>> users;
    std::size_t device_limit;  // the virtual memory's physical limit as made

    explicit expandable_parts(const settings& s)
        : vm(backend::virtual_memory_options()),
          users(std::in_place, recorded_memory(vm, events), s.expandable),
          device_limit(vm.physical_limit()) {
        users.locked([](auto& c) { c.count_in_units_of(pytorch_block_unit); });
    }

    // The most bytes mapped at once (no_limit: the device's memory; 0 maps nothing, where the
    // virtual memory's own 0 would mean its default).
    void set_limit(std::size_t bytes) { memory().set_physical_limit(std::max<std::size_t>(std::min(bytes, device_limit), 1)); }

    [[nodiscard]] const backend::virtual_memory& memory() const { return vm; }
    [[nodiscard]] backend::virtual_memory& memory() { return vm; }

    // Spans cut to their mapped granules (observe/mapped_walk.hpp), read under the pool's lock.
    template <class Action>
    decltype(auto) walk(Action&& action) const {
        return users.locked([&](const auto& c) { return action(mapped_walk(c.upstream_resource(), memory())); });
    }
};

// Parts::users is a counted_users<stream_ordered<...>>.
template <class Parts>
class device_pool_of final : public device_pool {
public:
    device_pool_of(const settings& s, int device)
        : parts_(s), recorded_(parts_.users, parts_.events), live_(recorded_), where_(" on device " + std::to_string(device)) {}

    void* allocate(std::size_t bytes, stream_ref stream) override { return live_.allocate_async(bytes, default_alignment, stream); }
    void free(void* pointer, std::size_t bytes, stream_ref stream) override {
        live_.checked_deallocate_async(pointer, bytes, default_alignment, stream, where_);
    }
    void record_use(void* pointer, stream_ref stream) override {
        live_.while_outstanding(pointer, "record_stream", where_, [&] { recorded_.record_use(pointer, stream); });
    }
    void capture_into(stream_ref stream, std::uint64_t pool) override {
        pool_locked([&](auto& p) { p.capture_into(stream, pool); });
    }
    void release_graph_pool(std::uint64_t pool) override {
        pool_locked([&](auto& p) { p.release_graph_pool(pool); });
    }
    void capture_checks(capture_check check) override {
        pool_locked([&](auto& p) { p.capture_checks(check); });
    }
    void set_limit(std::size_t bytes) override { parts_.set_limit(bytes); }
    void release() override { parts_.users.release(); }
    void reset_peak() override {
        parts_.users.locked([](auto& c) { c.reset_peak(); });
    }
    void reset_accumulated() override {
        parts_.users.locked([](auto& c) { c.reset_accumulated(); });
    }
    [[nodiscard]] stats_map memory_stats() const override {
        return parts_.users.locked([](const auto& c) { return c.memory_stats(); });
    }
    [[nodiscard]] std::string summary() const override {
        const auto figures = parts_.walk([](const auto& pool) { return fragmentation(pool); });
        return memory_summary(memory_stats(), figures);
    }
    [[nodiscard]] std::string snapshot_json() const override {
        return parts_.walk([](const auto& pool) { return snapshot(pool); });
    }
    void record_history(std::size_t max_entries, const history_context& context) override {
        if (max_entries == 0) {
            parts_.events.stop();
        } else {
            parts_.events.start(max_entries, context);
        }
    }
    [[nodiscard]] std::string history_json() override {
        recorded_.settle();
        return poolkit::history_json(parts_.events.events());
    }

private:
    // action(the stream_ordered pool), under its lock.
    template <class Action>
    decltype(auto) pool_locked(Action&& action) {
        return parts_.users.locked([&](auto& c) { return action(c.upstream_resource()); });
    }

    Parts parts_;
    recorded<ref<decltype(Parts::users)>> recorded_;  // users' calls, into parts_.events
    // The blocks handed out and not had back: every free and record_stream is checked against
    // them before the pool sees it, in every build.
    tracked<ref<recorded<ref<decltype(Parts::users)>>>> live_;
    std::string where_;  // " on device N", for the messages of refused calls
};

// Why the last call into the C API on this thread failed, "" when it succeeded: a fixed buffer
// (a longer message is cut), so that reporting a failure cannot fail.
thread_local char last_error[1024];

void set_last_error(std::string_view message) noexcept {
    const std::size_t kept = std::min(message.size(), sizeof last_error - 1);
    std::memcpy(last_error, message.data(), kept);
    last_error[kept] = '\0';
}

// The plugin's state: the kind and options every pool is made with, the memory fractions and the
// history asked for, and each device's pool (made on first use, with all of them applied).
class registry {
public:
    static registry& instance() {
        static auto* pools = new registry;  // never destroyed: hosts free memory at exit
        return *pools;
    }

    // The pool of `device`, made on first use while that device is current. The first pool fixes
    // the kind. Throws std::out_of_range for a device that does not exist, std::invalid_argument
    // for a bad POOLKIT_ALLOCATOR.
    device_pool& pool(int device) {
        if (device_pool* made = pools_.find(device)) return *made;  // no lock once made: the kind is fixed then
        std::lock_guard lock(mutex_);
        return pools_.get(device, [&]() -> std::unique_ptr<device_pool> {
            if (!kind_) kind_ = kind_from_environment();
            std::unique_ptr<device_pool> made;
            if (*kind_ == allocator_kind::caching) {
                made = std::make_unique<device_pool_of<caching_parts>>(settings_, device);
            } else {
                made = std::make_unique<device_pool_of<expandable_parts>>(settings_, device);
            }
            if (const std::size_t limit = limits_[static_cast<std::size_t>(device)]; limit != device_pool::no_limit) made->set_limit(limit);
            if (history_entries_ != 0) made->record_history(history_entries_, history_labels_);
            made->capture_checks(capture_checks_);
            return made;
        });
    }

    // The pool of `device` if it is made, else nullptr (and no pool is made). Throws
    // std::out_of_range for a device that does not exist.
    device_pool* made_pool(int device) { return pools_.find(device); }

    // Chooses the kind of every pool and forgets the options set before; false once a pool exists.
    bool choose(allocator_kind kind) {
        std::lock_guard lock(mutex_);
        if (pools_.any()) return false;
        settings_ = {};
        kind_ = kind;
        return true;
    }

    // Sets an option of the kind in use, or of the one the first pool would have (set_option()).
    // Throws std::logic_error once a pool exists, std::invalid_argument for a bad name or value,
    // or one the kind's rules refuse; the options are then as they were.
    void set(std::string_view name, std::string_view value) {
        std::lock_guard lock(mutex_);
        if (pools_.any()) throw std::logic_error("poolkit: options can only be set before the first pool is made");
        if (!kind_) kind_ = kind_from_environment();
        set_option(settings_, *kind_, name, value);
    }

    // The kind in use, or the one the first pool would have.
    allocator_kind kind() {
        std::lock_guard lock(mutex_);
        return kind_ ? *kind_ : kind_from_environment();
    }

    [[nodiscard]] int device_count() const noexcept { return pools_.count(); }

    // Caps what `device`'s pool may reserve at `fraction` of the device's memory, now or when the
    // pool is made (torch.cuda.set_per_process_memory_fraction). Throws std::out_of_range for a
    // device that does not exist.
    void set_memory_fraction(int device, double fraction) {
        if (!(fraction >= 0.0 && fraction <= 1.0)) {
            throw std::invalid_argument("poolkit: memory fraction " + std::to_string(fraction) + " of device " + std::to_string(device) +
                                        ": expected a number from 0 to 1");
        }
        std::lock_guard lock(mutex_);
        device_pool* made = pools_.find(device);
        const backend::device_scope scope(device);
        const auto bytes = static_cast<std::size_t>(std::floor(fraction * static_cast<double>(backend::device_total(device))));
        limits_[static_cast<std::size_t>(device)] = bytes;
        if (made != nullptr) made->set_limit(bytes);
    }

    // Every pool, now and when made, learns of captures as `check` says.
    void set_capture_checks(capture_check check) {
        std::lock_guard lock(mutex_);
        capture_checks_ = check;
        pools_.for_each([&](device_pool& pool, int) { pool.capture_checks(check); });
    }

    [[nodiscard]] capture_check capture_checks() {
        std::lock_guard lock(mutex_);
        return capture_checks_;
    }

    // Every pool, now and when made, records its history into a ring of `max_entries` events (0:
    // none), labelled through the C callbacks `labels` (kept for the plugin's life: a label may
    // be handed back long after another call replaced them).
    void record_history(std::size_t max_entries, const poolkit_history_callbacks& labels) {
        std::lock_guard lock(mutex_);
        poolkit_history_callbacks& kept = callbacks_.emplace_back(labels);
        history_entries_ = max_entries;
        history_labels_ = history_context{[](void* user, history_action action) noexcept -> std::uint64_t {
                                              const auto& c = *static_cast<const poolkit_history_callbacks*>(user);
                                              return c.label != nullptr ? c.label(c.user, static_cast<int>(action)) : 0;
                                          },
                                          [](void* user, std::uint64_t label) noexcept {
                                              const auto& c = *static_cast<const poolkit_history_callbacks*>(user);
                                              if (c.release != nullptr) c.release(c.user, label);
                                          },
                                          &kept};
        pools_.for_each([&](device_pool& pool, int) { pool.record_history(max_entries, history_labels_); });
    }

    // visit(device_pool&) for each made pool, with its device current.
    template <class Visit>
    void for_each(Visit&& visit) {
        pools_.for_each([&](device_pool& pool, int) { visit(pool); });
    }

private:
    registry() : pools_(backend::device_count()), limits_(static_cast<std::size_t>(pools_.count()), device_pool::no_limit) {}

    // Taken before pools_' own lock, never after it.
    std::mutex mutex_;
    std::optional<allocator_kind> kind_;  // set by choose() or by the first pool, then fixed
    settings settings_;
    per_device<device_pool, backend::device_scope> pools_;
    std::vector<std::size_t> limits_;  // by device: set_memory_fraction's, else no_limit
    capture_check capture_checks_ = capture_check::every_call;
    std::size_t history_entries_ = 0;  // record_history's
    history_context history_labels_;
    std::deque<poolkit_history_callbacks> callbacks_;  // every record_history's, never moved
};

long write_text(const std::string& text, char* buffer, std::size_t capacity) {
    if (buffer != nullptr && capacity > 0) {
        const std::size_t copied = std::min(text.size(), capacity - 1);
        std::memcpy(buffer, text.data(), copied);
        buffer[copied] = '\0';
    }
    return static_cast<long>(text.size());
}

std::string stats_json(const device_pool& pool) {
    std::string json = "{";
    for (const auto& [key, value] : pool.memory_stats()) {
        if (json.size() > 1) json += ", ";
        json += "\"" + key + "\": " + std::to_string(value);
    }
    return json + "}";
}

// The pool of `device` that `call` names `pointer` of; throws std::invalid_argument when there is
// none yet (so the pointer is no block of it), std::out_of_range for a device that does not exist.
device_pool& pool_for_block(int device, const char* call, const void* pointer) {
    device_pool* pool = registry::instance().made_pool(device);
    if (pool == nullptr) {
        throw std::invalid_argument("poolkit: " + std::string(call) + " of " + address_text(pointer) + " on device " +
                                    std::to_string(device) + ": not a live block (nothing was allocated there)");
    }
    return *pool;
}

// The C ABI's stream (a cudaStream_t) as poolkit's; without CUDA, handles the caller only compares.
stream_ref stream_of(poolkit_stream stream) noexcept { return stream_ref{reinterpret_cast<stream_handle>(stream)}; }

// Runs `call` for an entry point of the C API: no exception leaves it. Clears last_error, and
// turns an exception into last_error and `failed`.
template <class Result, class Call>
Result guarded(Result failed, Call&& call) noexcept {
    last_error[0] = '\0';
    try {
        return call();
    } catch (const std::exception& error) {
        set_last_error(error.what());
    } catch (...) {
        set_last_error("poolkit: unknown error");
    }
    return failed;
}

// A text of `device`'s pool (stats, summary, snapshot) into the caller's buffer: text(pool), where
// pool is nullptr while no pool is made (looking makes none, and leaves the kind open).
template <class Text>
long device_text(int device, char* buffer, std::size_t capacity, Text&& text) noexcept {
    return guarded(-1L, [&] {
        const device_pool* pool = registry::instance().made_pool(device);
        if (pool == nullptr) return write_text(text(pool), buffer, capacity);
        backend::device_scope scope(device);
        return write_text(text(pool), buffer, capacity);
    });
}

// Resets figures of `device`'s pool (reset_peak, reset_accumulated); a device with no pool yet
// has none to reset.
int reset_figures(int device, void (device_pool::*reset)()) noexcept {
    return guarded(-1, [&] {
        if (device_pool* pool = registry::instance().made_pool(device)) {
            backend::device_scope scope(device);
            (pool->*reset)();
        }
        return 0;
    });
}

}  // namespace

extern "C" {

void* poolkit_alloc(ssize_t size, int device, poolkit_stream stream) POOLKIT_C_NOEXCEPT {
    return guarded<void*>(nullptr, [&]() -> void* {
        if (size <= 0) return nullptr;  // no allocation, and no failure
        device_pool& pool = registry::instance().pool(device);
        backend::device_scope scope(device);
        return pool.allocate(static_cast<std::size_t>(size), stream_of(stream));
    });
}

void poolkit_free(void* pointer, ssize_t size, int device, poolkit_stream stream) POOLKIT_C_NOEXCEPT {
    guarded(0, [&] {
        if (pointer == nullptr) return 0;  // what an allocation of 0 bytes gave
        if (size <= 0) {
            throw std::invalid_argument("poolkit: free of " + address_text(pointer) + " with " + std::to_string(size) +
                                        " bytes on device " + std::to_string(device) + ": a block has at least 1");
        }
        device_pool& pool = pool_for_block(device, "free", pointer);
        backend::device_scope scope(device);
        pool.free(pointer, static_cast<std::size_t>(size), stream_of(stream));
        return 0;
    });
}

void poolkit_record_stream(void* pointer, int device, poolkit_stream stream) POOLKIT_C_NOEXCEPT {
    guarded(0, [&] {
        if (pointer == nullptr) return 0;  // an empty tensor's
        device_pool& pool = pool_for_block(device, "record_stream", pointer);
        backend::device_scope scope(device);
        pool.record_use(pointer, stream_of(stream));
        return 0;
    });
}

int poolkit_capture_into(int device, poolkit_stream stream, unsigned long long pool) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        device_pool& pool_of_device = registry::instance().pool(device);
        backend::device_scope scope(device);
        pool_of_device.capture_into(stream_of(stream), pool);
        return 0;
    });
}

int poolkit_release_graph_pool(int device, unsigned long long pool) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        if (device_pool* made = registry::instance().made_pool(device)) {
            backend::device_scope scope(device);
            made->release_graph_pool(pool);
        }
        return 0;
    });
}

int poolkit_set_capture_checks(const char* mode) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        const std::string_view name = mode != nullptr ? mode : "(null)";
        if (name == "every_call") {
            registry::instance().set_capture_checks(capture_check::every_call);
        } else if (name == "announced") {
            registry::instance().set_capture_checks(capture_check::announced);
        } else {
            throw std::invalid_argument("poolkit: capture checks \"" + std::string(name) + "\" (expected every_call or announced)");
        }
        return 0;
    });
}

const char* poolkit_capture_checks(void) POOLKIT_C_NOEXCEPT {
    return guarded<const char*>(
        nullptr, [] { return registry::instance().capture_checks() == capture_check::announced ? "announced" : "every_call"; });
}

void poolkit_announce_capture(int begins) POOLKIT_C_NOEXCEPT {
    if (begins != 0) {
        announce_capture();
    } else {
        end_announced_capture();
    }
}

int poolkit_lasting_stream(poolkit_stream stream) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        if (!backend::declare_lasting(stream_of(stream))) {
            throw std::runtime_error("poolkit: stream " + address_text(stream) +
                                     " cannot be declared lasting: it is in capture, the driver cannot say its id, or " +
                                     std::to_string(detail::lasting_streams::capacity) + " streams are declared already");
        }
        return 0;
    });
}

int poolkit_set_memory_fraction(int device, double fraction) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        registry::instance().set_memory_fraction(device, fraction);
        return 0;
    });
}

void poolkit_empty_cache(void) POOLKIT_C_NOEXCEPT {
    guarded(0, [] {
        registry::instance().for_each([](device_pool& pool) { pool.release(); });
        return 0;
    });
}

int poolkit_reset_peak_stats(int device) POOLKIT_C_NOEXCEPT { return reset_figures(device, &device_pool::reset_peak); }

int poolkit_reset_accumulated_stats(int device) POOLKIT_C_NOEXCEPT { return reset_figures(device, &device_pool::reset_accumulated); }

long poolkit_memory_stats_json(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT {
    return device_text(device, buffer, capacity, [](const device_pool* pool) { return pool ? stats_json(*pool) : std::string("{}"); });
}

long poolkit_memory_summary(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT {
    return device_text(device, buffer, capacity,
                       [](const device_pool* pool) { return pool ? pool->summary() : memory_summary(stats_map{}); });
}

long poolkit_snapshot_json(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT {
    return device_text(device, buffer, capacity,
                       [](const device_pool* pool) { return pool ? pool->snapshot_json() : std::string("{\"segments\": []}"); });
}

int poolkit_record_history(size_t max_entries, poolkit_history_callbacks labels) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        registry::instance().record_history(max_entries, labels);
        return 0;
    });
}

long poolkit_history_json(int device, char* buffer, size_t capacity) POOLKIT_C_NOEXCEPT {
    return guarded(-1L, [&] {
        device_pool* pool = registry::instance().made_pool(device);
        if (pool == nullptr) return write_text("[]", buffer, capacity);
        backend::device_scope scope(device);
        return write_text(pool->history_json(), buffer, capacity);
    });
}

int poolkit_set_allocator(const char* name) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        const auto kind = name == nullptr ? std::nullopt : kind_named(name);
        if (!kind) {
            throw std::invalid_argument(std::string("poolkit: no allocator named \"") + (name == nullptr ? "" : name) +
                                        "\" (expected caching or expandable)");
        }
        if (!registry::instance().choose(*kind)) {
            throw std::logic_error("poolkit: the allocator can only be chosen before the first pool is made");
        }
        return 0;
    });
}

int poolkit_set_option(const char* name, const char* value) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [&] {
        if (name == nullptr || value == nullptr) throw std::invalid_argument("poolkit: poolkit_set_option with a null name or value");
        registry::instance().set(name, value);
        return 0;
    });
}

const char* poolkit_allocator_name(void) POOLKIT_C_NOEXCEPT {
    return guarded<const char*>(nullptr, [] { return name_of(registry::instance().kind()); });
}

int poolkit_device_count(void) POOLKIT_C_NOEXCEPT {
    return guarded(-1, [] { return registry::instance().device_count(); });
}

const char* poolkit_backend(void) POOLKIT_C_NOEXCEPT { return backend::name; }

const char* poolkit_last_error(void) POOLKIT_C_NOEXCEPT { return last_error; }

}  // extern "C"
