// libpoolkit_plugin.so: the C ABI of include/poolkit/interop/c_api.h over one device allocator per
// device, of one kind for the whole process: the caching preset (the default) or the expandable
// one, chosen by poolkit_set_allocator() or else by POOLKIT_ALLOCATOR=caching|expandable, read
// when the first pool is made, with the options poolkit_set_option() set. Statistics sit outside
// the lock (what users hold) and, for the caching kind, inside it (reserved bytes); the expandable
// kind's reserved bytes are what its virtual memory has mapped.
//
// Built twice from this file: over CUDA (libpoolkit_plugin.so) and, with POOLKIT_PLUGIN_SIMULATED,
// over simulated memory (libpoolkit_plugin_simulated.so: the same pools, the same C ABI, no GPU,
// no CUDA call; its "devices" hand out addresses nothing may touch), so that the C ABI and the
// Python package over it are tested on machines without a GPU.
#include <poolkit/interop/c_api.h>

#include <poolkit/adaptor/statistics.hpp>
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
#  include <cuda_runtime_api.h>
#endif

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
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

// Where memory comes from, and how a device is made current.
#if POOLKIT_PLUGIN_SIMULATED
std::size_t environment_size(const char* name, std::size_t fallback) {
    const char* value = std::getenv(name);
    if (value == nullptr || *value == '\0') return fallback;
    std::size_t parsed = 0;
    const auto [end, error] = std::from_chars(value, value + std::strlen(value), parsed);
    if (error != std::errc{} || *end != '\0') throw std::invalid_argument(std::string("poolkit: ") + name + "=" + value + " is not a count");
    return parsed;
}

struct backend {
    static constexpr const char* name = "simulated";
    using events = completed_events;
    using memory = simulated_resource;
    using virtual_memory = simulated_vmm_resource;

    // POOLKIT_SIMULATED_DEVICES devices (2) of POOLKIT_SIMULATED_MEMORY bytes each (80 GiB).
    static int device_count() { return static_cast<int>(environment_size("POOLKIT_SIMULATED_DEVICES", 2)); }
    static std::size_t device_memory() { return environment_size("POOLKIT_SIMULATED_MEMORY", std::size_t{80} << 30); }
    static simulated_options memory_options() { return {.capacity = device_memory()}; }
    static simulated_vmm_options virtual_memory_options() {
        return {.capacity = 4 * device_memory(), .granularity = std::size_t{2} << 20, .physical_limit = device_memory()};
    }

    struct device_scope {
        explicit device_scope(int) noexcept {}
    };
};
#else
struct backend {
    static constexpr const char* name = "cuda";
    using events = cuda_events;
    using memory = cuda_device_resource;
    using virtual_memory = cuda_vmm_resource;

    static int device_count() {
        int count = 0;
        return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
    }
    static cuda_vmm_options virtual_memory_options() { return {}; }

    // Makes `device` current for the scope.
    class device_scope {
    public:
        explicit device_scope(int device) {
            cudaGetDevice(&previous_);
            if (previous_ != device) cudaSetDevice(device);
        }
        ~device_scope() {
            int now = -1;
            cudaGetDevice(&now);
            if (now != previous_) cudaSetDevice(previous_);
        }
        device_scope(const device_scope&) = delete;
        device_scope& operator=(const device_scope&) = delete;

    private:
        int previous_ = 0;
    };
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

template <class Number>
Number parse_number(std::string_view name, std::string_view text) {
    Number value{};
    const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
    bool negative = false;
    if constexpr (std::is_signed_v<Number> || std::is_floating_point_v<Number>) negative = value < Number{};
    if (error != std::errc{} || end != text.data() + text.size() || negative) {
        throw std::invalid_argument("poolkit: option " + std::string(name) + "=" + std::string(text) + " is not a number of at least 0");
    }
    return value;
}

bool parse_flag(std::string_view name, std::string_view text) {
    if (text == "1" || text == "true" || text == "True") return true;
    if (text == "0" || text == "false" || text == "False") return false;
    throw std::invalid_argument("poolkit: option " + std::string(name) + "=" + std::string(text) + " is not true or false");
}

struct option {
    const char* name;
    allocator_kind kind;
    std::function<void(settings&, std::string_view name, std::string_view value)> set;
};

template <class Options>
Options& options_of(settings& s) {
    if constexpr (std::is_same_v<Options, caching_options>) {
        return s.caching;
    } else {
        return s.expandable;
    }
}

template <class Options, class Number>
option number_option(const char* name, Number Options::*field) {
    constexpr auto kind = std::is_same_v<Options, caching_options> ? allocator_kind::caching : allocator_kind::expandable;
    return {name, kind, [field](settings& s, std::string_view n, std::string_view v) { options_of<Options>(s).*field = parse_number<Number>(n, v); }};
}

// The options of caching_options and expandable_options (poolkit/strategy/*.hpp say what each
// does), by their C++ names. large_chunk is the caching pool's growth step; 0 grows large chunks
// as needed in 2 MiB steps (PyTorch's rule).
const std::vector<option>& options() {
    using enum allocator_kind;
    static const std::vector<option> all = {
        number_option("rounding", &caching_options::rounding),
        number_option("power2_divisions", &caching_options::power2_divisions),
        number_option("small_size", &caching_options::small_size),
        number_option("small_chunk", &caching_options::small_chunk),
        {"large_chunk", caching,
         [](settings& s, std::string_view n, std::string_view v) {
             const auto bytes = parse_number<std::size_t>(n, v);
             s.caching.large_growth = bytes == 0 ? growth_policy::as_needed(std::size_t{2} << 20) : growth_policy::fixed_step(bytes);
         }},
        number_option("max_split_size", &caching_options::max_split_size),
        {"release_before_growth", caching,
         [](settings& s, std::string_view n, std::string_view v) { s.caching.release_before_growth = parse_flag(n, v); }},
        number_option("span_bytes", &expandable_options::span_bytes),
        number_option("small_size", &expandable_options::small_size),
        number_option("small_span_bytes", &expandable_options::small_span_bytes),
        number_option("rounding", &expandable_options::rounding),
        number_option("cache_fraction", &expandable_options::cache_fraction),
        number_option("peak_slack", &expandable_options::peak_slack),
        number_option("max_peak_slack", &expandable_options::max_peak_slack),
        number_option("allocations_per_remap", &expandable_options::allocations_per_remap),
        number_option("mapping_bytes", &expandable_options::mapping_bytes),
        number_option("max_cached_bytes", &expandable_options::max_cached_bytes),
        number_option("candidates", &expandable_options::candidates),
    };
    return all;
}

void set_option(settings& s, allocator_kind kind, std::string_view name, std::string_view value) {
    std::string known;
    for (const option& o : options()) {
        if (o.kind != kind) continue;
        if (o.name == name) return o.set(s, name, value);
        known += known.empty() ? "" : ", ";
        known += o.name;
    }
    throw std::invalid_argument("poolkit: the " + std::string(name_of(kind)) + " allocator has no option \"" + std::string(name) +
                                "\" (it has " + known + ")");
}

// One device's allocator as the C API uses it, whichever kind it is.
class device_pool {
public:
    virtual ~device_pool() = default;
    virtual void* allocate(std::size_t bytes, stream_ref stream) = 0;
    virtual void deallocate(void* pointer, std::size_t bytes, stream_ref stream) noexcept = 0;
    virtual void record_use(void* pointer, stream_ref stream) = 0;
    virtual void release() = 0;  // empty_cache
    virtual void reset_peak() = 0;
    [[nodiscard]] virtual stats_map memory_stats() const = 0;
    [[nodiscard]] virtual std::string summary() const = 0;
    [[nodiscard]] virtual std::string snapshot_json() const = 0;
};

// Reserved figures (segments, num_device_alloc) come from the inner statistics, the user-facing
// ones from the outer; the lock sits between them, so the outer counters stay lock-free.
struct caching_parts {
    using reserved_counter = statistics<backend::memory>;
    reserved_counter reserved;
    statistics<synchronized<caching_allocator<ref<reserved_counter>, backend::events>>> users;

    explicit caching_parts(const settings& s)
#if POOLKIT_PLUGIN_SIMULATED
        : reserved(std::in_place, backend::memory_options()),
#else
        : reserved(),
#endif
          users(std::in_place, std::in_place, ref<reserved_counter>(reserved), s.caching) {
    }

    [[nodiscard]] stats_map memory_stats() const { return users.memory_stats(); }
    void reset_peak() {
        users.reset_peak();
        reserved.reset_peak();
    }
    // The pool's own chunks and blocks, read under its lock.
    template <class Action>
    decltype(auto) walk(Action&& action) const {
        return users.upstream_resource().locked([&](const auto& pool) { return action(pool); });
    }
};

// Reserved bytes are the mapped ones and device allocs and frees the map and unmap calls of the
// virtual memory (which has its own lock); there are no segment.* counts.
struct expandable_parts {
    statistics<synchronized<expandable_allocator<backend::virtual_memory, backend::events>>> users;

    explicit expandable_parts(const settings& s)
        : users(std::in_place, std::in_place, backend::virtual_memory_options(), s.expandable) {}

    [[nodiscard]] const backend::virtual_memory& memory() const { return users.upstream_resource().upstream_resource().upstream_resource(); }
    [[nodiscard]] backend::virtual_memory& memory() { return users.upstream_resource().upstream_resource().upstream_resource(); }

    [[nodiscard]] stats_map memory_stats() const {
        stats_map stats = users.memory_stats();
        stats["reserved_bytes.all.current"] = static_cast<std::int64_t>(memory().mapped_bytes());
        stats["reserved_bytes.all.peak"] = static_cast<std::int64_t>(memory().peak_mapped_bytes());
        stats["num_device_alloc"] = static_cast<std::int64_t>(memory().map_calls());
        stats["num_device_free"] = static_cast<std::int64_t>(memory().unmap_calls());
        return stats;
    }
    void reset_peak() {
        users.reset_peak();
        memory().reset_peak_mapped_bytes();
    }
    // Spans cut to their mapped granules (observe/mapped_walk.hpp), read under the pool's lock.
    template <class Action>
    decltype(auto) walk(Action&& action) const {
        return users.upstream_resource().locked([&](const auto& pool) { return action(mapped_walk(pool, memory())); });
    }
};

// Parts::users is a statistics<synchronized<stream_ordered<...>>>.
template <class Parts>
class device_pool_of final : public device_pool {
public:
    explicit device_pool_of(const settings& s) : parts_(s) {}

    void* allocate(std::size_t bytes, stream_ref stream) override {
        return parts_.users.allocate_async(bytes, default_alignment, stream);
    }
    void deallocate(void* pointer, std::size_t bytes, stream_ref stream) noexcept override {
        parts_.users.deallocate_async(pointer, bytes, default_alignment, stream);
    }
    void record_use(void* pointer, stream_ref stream) override { parts_.users.upstream_resource().record_use(pointer, stream); }
    void release() override { parts_.users.upstream_resource().release(); }
    void reset_peak() override { parts_.reset_peak(); }
    [[nodiscard]] stats_map memory_stats() const override { return parts_.memory_stats(); }
    [[nodiscard]] std::string summary() const override {
        const auto figures = parts_.walk([](const auto& pool) { return fragmentation(pool); });
        return memory_summary(parts_.memory_stats(), figures);
    }
    [[nodiscard]] std::string snapshot_json() const override {
        return parts_.walk([](const auto& pool) { return snapshot(pool); });
    }

private:

    Parts parts_;
};

thread_local std::string last_error;

class registry {
public:
    static registry& instance() {
        static auto* pools = new registry;  // never destroyed: hosts free memory at exit
        return *pools;
    }

    // The pool of `device`, made on first use while that device is current; nullptr if there is
    // no such device. The first pool fixes the kind. Throws std::invalid_argument for a bad
    // POOLKIT_ALLOCATOR.
    device_pool* pool(int device) {
        std::lock_guard lock(mutex_);
        if (!exists(device)) return nullptr;
        auto& slot = pools_[static_cast<std::size_t>(device)];
        if (!slot) {
            if (!kind_) kind_ = kind_from_environment();
            backend::device_scope scope(device);
            if (*kind_ == allocator_kind::caching) {
                slot = std::make_unique<device_pool_of<caching_parts>>(settings_);
            } else {
                slot = std::make_unique<device_pool_of<expandable_parts>>(settings_);
            }
        }
        return slot.get();
    }

    // The pool of `device` if it is made, else nullptr (and no pool is made).
    device_pool* made_pool(int device) {
        std::lock_guard lock(mutex_);
        return exists(device) ? pools_[static_cast<std::size_t>(device)].get() : nullptr;
    }

    [[nodiscard]] bool exists(int device) const noexcept { return device >= 0 && static_cast<std::size_t>(device) < pools_.size(); }

    // Chooses the kind of every pool and forgets the options set before; false once a pool exists.
    bool choose(allocator_kind kind) {
        std::lock_guard lock(mutex_);
        if (any_pool()) return false;
        settings_ = {};
        kind_ = kind;
        return true;
    }

    // Sets an option of the kind in use, or of the one the first pool would have. Throws
    // std::logic_error once a pool exists, std::invalid_argument for a bad name or value.
    void set(std::string_view name, std::string_view value) {
        std::lock_guard lock(mutex_);
        if (any_pool()) throw std::logic_error("poolkit: options can only be set before the first pool is made");
        if (!kind_) kind_ = kind_from_environment();
        settings next = settings_;
        set_option(next, *kind_, name, value);
        settings_ = next;
    }

    // The kind in use, or the one the first pool would have.
    allocator_kind kind() {
        std::lock_guard lock(mutex_);
        return kind_ ? *kind_ : kind_from_environment();
    }

    [[nodiscard]] int device_count() const noexcept { return static_cast<int>(pools_.size()); }

    template <class Visit>
    void for_each(Visit&& visit) {
        std::lock_guard lock(mutex_);
        for (std::size_t device = 0; device < pools_.size(); ++device) {
            if (pools_[device]) {
                backend::device_scope scope(static_cast<int>(device));
                visit(*pools_[device]);
            }
        }
    }

private:
    registry() { pools_.resize(static_cast<std::size_t>(std::max(backend::device_count(), 0))); }

    bool any_pool() const {
        return std::any_of(pools_.begin(), pools_.end(), [](const auto& pool) { return pool != nullptr; });
    }

    std::mutex mutex_;
    std::optional<allocator_kind> kind_;  // set by choose() or by the first pool, then fixed
    settings settings_;
    std::vector<std::unique_ptr<device_pool>> pools_;
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

// Throws std::out_of_range, naming the devices there are, for a device that does not exist.
void check_device(int device) {
    if (!registry::instance().exists(device)) {
        throw std::out_of_range("poolkit: no device " + std::to_string(device) + " (this " + backend::name + " plugin sees " +
                                std::to_string(registry::instance().device_count()) + ")");
    }
}

// The pool of `device`, made on first use.
device_pool& existing_pool(int device) {
    check_device(device);
    return *registry::instance().pool(device);
}

// The C ABI's stream (a cudaStream_t) as poolkit's; without CUDA, handles the caller only compares.
stream_ref stream_of(poolkit_stream stream) noexcept { return stream_ref{reinterpret_cast<stream_handle>(stream)}; }

// Runs `call`, turning an exception into last_error and `failed`.
template <class Result, class Call>
Result guarded(Result failed, Call&& call) noexcept {
    try {
        return call();
    } catch (const std::exception& error) {
        last_error = error.what();
    } catch (...) {
        last_error = "poolkit: unknown error";
    }
    return failed;
}

// A text of `device`'s pool (stats, summary, snapshot) into the caller's buffer: text(pool), where
// pool is nullptr while no pool is made (looking makes none, and leaves the kind open).
template <class Text>
long device_text(int device, char* buffer, std::size_t capacity, Text&& text) noexcept {
    return guarded(-1L, [&] {
        check_device(device);
        const device_pool* pool = registry::instance().made_pool(device);
        if (pool == nullptr) return write_text(text(pool), buffer, capacity);
        backend::device_scope scope(device);
        return write_text(text(pool), buffer, capacity);
    });
}

}  // namespace

extern "C" {

void* poolkit_alloc(ssize_t size, int device, poolkit_stream stream) {
    if (size <= 0) return nullptr;
    return guarded<void*>(nullptr, [&] {
        device_pool& pool = existing_pool(device);
        backend::device_scope scope(device);
        return pool.allocate(static_cast<std::size_t>(size), stream_of(stream));
    });
}

void poolkit_free(void* pointer, ssize_t size, int device, poolkit_stream stream) {
    if (pointer == nullptr || size <= 0) return;
    guarded(0, [&] {
        device_pool& pool = existing_pool(device);
        backend::device_scope scope(device);
        pool.deallocate(pointer, static_cast<std::size_t>(size), stream_of(stream));
        return 0;
    });
}

void poolkit_record_stream(void* pointer, int device, poolkit_stream stream) {
    guarded(0, [&] {
        device_pool& pool = existing_pool(device);
        backend::device_scope scope(device);
        pool.record_use(pointer, stream_of(stream));
        return 0;
    });
}

void poolkit_empty_cache(void) {
    guarded(0, [] {
        registry::instance().for_each([](device_pool& pool) { pool.release(); });
        return 0;
    });
}

int poolkit_reset_peak_stats(int device) {
    return guarded(-1, [&] {
        check_device(device);
        if (device_pool* pool = registry::instance().made_pool(device)) {
            backend::device_scope scope(device);
            pool->reset_peak();
        }
        return 0;
    });
}

long poolkit_memory_stats_json(int device, char* buffer, size_t capacity) {
    return device_text(device, buffer, capacity, [](const device_pool* pool) { return pool ? stats_json(*pool) : std::string("{}"); });
}

long poolkit_memory_summary(int device, char* buffer, size_t capacity) {
    return device_text(device, buffer, capacity, [](const device_pool* pool) { return pool ? pool->summary() : memory_summary(stats_map{}); });
}

long poolkit_snapshot_json(int device, char* buffer, size_t capacity) {
    return device_text(device, buffer, capacity,
                       [](const device_pool* pool) { return pool ? pool->snapshot_json() : std::string("{\"segments\": []}"); });
}

int poolkit_set_allocator(const char* name) {
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

int poolkit_set_option(const char* name, const char* value) {
    return guarded(-1, [&] {
        if (name == nullptr || value == nullptr) throw std::invalid_argument("poolkit: poolkit_set_option with a null name or value");
        registry::instance().set(name, value);
        return 0;
    });
}

const char* poolkit_allocator_name(void) {
    return guarded<const char*>(nullptr, [] { return name_of(registry::instance().kind()); });
}

int poolkit_device_count(void) { return registry::instance().device_count(); }

const char* poolkit_backend(void) { return backend::name; }

const char* poolkit_last_error(void) { return last_error.c_str(); }

}  // extern "C"
