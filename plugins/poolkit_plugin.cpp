// libpoolkit_plugin.so: the C ABI of include/poolkit/interop/c_api.h over one device allocator per
// device, of one kind for the whole process: the caching preset (the default) or the expandable
// one, chosen by poolkit_set_allocator() or else by POOLKIT_ALLOCATOR=caching|expandable, read
// when the first pool is made. Statistics sit outside the lock (what users hold) and, for the
// caching kind, inside it (reserved bytes); the expandable kind's reserved bytes are what its
// virtual memory has mapped.
#include <poolkit/interop/c_api.h>

#include <poolkit/adaptor/statistics.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/presets.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace {

using namespace poolkit;

using stats_map = std::map<std::string, std::int64_t>;

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

// One device's allocator as the C API uses it, whichever kind it is.
class device_pool {
public:
    virtual ~device_pool() = default;
    virtual void* allocate(std::size_t bytes, stream_ref stream) = 0;
    virtual void deallocate(void* pointer, std::size_t bytes, stream_ref stream) noexcept = 0;
    virtual void record_use(void* pointer, stream_ref stream) = 0;
    virtual void release() = 0;  // empty_cache
    [[nodiscard]] virtual stats_map memory_stats() const = 0;
};

// Reserved figures (segments, num_device_alloc) come from the inner statistics, the user-facing
// ones from the outer; the lock sits between them, so the outer counters stay lock-free.
struct caching_parts {
    using reserved_counter = statistics<cuda_device_resource>;
    reserved_counter reserved;
    statistics<synchronized<caching_allocator<ref<reserved_counter>, cuda_events>>> users{
        std::in_place, std::in_place, ref<reserved_counter>(reserved)};

    [[nodiscard]] stats_map memory_stats() const { return users.memory_stats(); }
};

// Reserved bytes are the mapped ones and device allocs and frees the map and unmap calls of the
// virtual memory (which has its own lock); there are no segments.
struct expandable_parts {
    statistics<synchronized<expandable_device_allocator>> users;

    [[nodiscard]] stats_map memory_stats() const {
        stats_map stats = users.memory_stats();
        const cuda_vmm_resource& memory = users.upstream_resource().upstream_resource().upstream_resource();
        stats["reserved_bytes.all.current"] = static_cast<std::int64_t>(memory.mapped_bytes());
        stats["reserved_bytes.all.peak"] = static_cast<std::int64_t>(memory.peak_mapped_bytes());
        stats["num_device_alloc"] = static_cast<std::int64_t>(memory.map_calls());
        stats["num_device_free"] = static_cast<std::int64_t>(memory.unmap_calls());
        return stats;
    }
};

// Parts::users is a statistics<synchronized<stream_ordered<...>>>.
template <class Parts>
class device_pool_of final : public device_pool {
public:
    void* allocate(std::size_t bytes, stream_ref stream) override {
        return parts_.users.allocate_async(bytes, default_alignment, stream);
    }
    void deallocate(void* pointer, std::size_t bytes, stream_ref stream) noexcept override {
        parts_.users.deallocate_async(pointer, bytes, default_alignment, stream);
    }
    void record_use(void* pointer, stream_ref stream) override { parts_.users.upstream_resource().record_use(pointer, stream); }
    void release() override { parts_.users.upstream_resource().release(); }
    [[nodiscard]] stats_map memory_stats() const override { return parts_.memory_stats(); }

private:
    Parts parts_;
};

std::unique_ptr<device_pool> make_pool(allocator_kind kind) {
    if (kind == allocator_kind::caching) return std::make_unique<device_pool_of<caching_parts>>();
    return std::make_unique<device_pool_of<expandable_parts>>();
}

thread_local std::string last_error;

// Makes `device` current for the scope.
class device_guard {
public:
    explicit device_guard(int device) {
        cudaGetDevice(&previous_);
        if (previous_ != device) cudaSetDevice(device);
    }
    ~device_guard() {
        int now = -1;
        cudaGetDevice(&now);
        if (now != previous_) cudaSetDevice(previous_);
    }
    device_guard(const device_guard&) = delete;
    device_guard& operator=(const device_guard&) = delete;

private:
    int previous_ = 0;
};

class registry {
public:
    static registry& instance() {
        static auto* pools = new registry;  // never destroyed: hosts free memory at exit
        return *pools;
    }

    // The pool of `device`, made on first use while that device is current; nullptr if none.
    // The first pool fixes the kind. Throws std::invalid_argument for a bad POOLKIT_ALLOCATOR.
    device_pool* pool(int device) {
        std::lock_guard lock(mutex_);
        if (device < 0 || static_cast<std::size_t>(device) >= pools_.size()) return nullptr;
        auto& slot = pools_[static_cast<std::size_t>(device)];
        if (!slot) {
            if (!kind_) kind_ = kind_from_environment();
            device_guard guard(device);
            slot = make_pool(*kind_);
        }
        return slot.get();
    }

    // Chooses the kind of every pool; false once a pool exists.
    bool choose(allocator_kind kind) {
        std::lock_guard lock(mutex_);
        if (std::any_of(pools_.begin(), pools_.end(), [](const auto& pool) { return pool != nullptr; })) return false;
        kind_ = kind;
        return true;
    }

    // The kind in use, or the one the first pool would have.
    allocator_kind kind() {
        std::lock_guard lock(mutex_);
        return kind_ ? *kind_ : kind_from_environment();
    }

    template <class Visit>
    void for_each(Visit&& visit) {
        std::lock_guard lock(mutex_);
        for (std::size_t device = 0; device < pools_.size(); ++device) {
            if (pools_[device]) {
                device_guard guard(static_cast<int>(device));
                visit(*pools_[device]);
            }
        }
    }

private:
    registry() {
        int count = 0;
        if (cudaGetDeviceCount(&count) != cudaSuccess) count = 0;
        pools_.resize(static_cast<std::size_t>(count));
    }

    std::mutex mutex_;
    std::optional<allocator_kind> kind_;  // set by choose() or by the first pool, then fixed
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

}  // namespace

extern "C" {

void* poolkit_alloc(ssize_t size, int device, poolkit_stream stream) {
    if (size <= 0) return nullptr;
    try {
        device_pool* pool = registry::instance().pool(device);
        if (pool == nullptr) throw std::out_of_range("poolkit: no CUDA device " + std::to_string(device));
        device_guard guard(device);
        return pool->allocate(static_cast<std::size_t>(size), stream_ref{stream});
    } catch (const std::exception& error) {
        last_error = error.what();
        return nullptr;
    }
}

void poolkit_free(void* pointer, ssize_t size, int device, poolkit_stream stream) {
    if (pointer == nullptr || size <= 0) return;
    try {
        if (device_pool* pool = registry::instance().pool(device)) {
            device_guard guard(device);
            pool->deallocate(pointer, static_cast<std::size_t>(size), stream_ref{stream});
        }
    } catch (const std::exception& error) {
        last_error = error.what();
    }
}

void poolkit_record_stream(void* pointer, int device, poolkit_stream stream) {
    try {
        if (device_pool* pool = registry::instance().pool(device)) {
            device_guard guard(device);
            pool->record_use(pointer, stream_ref{stream});
        }
    } catch (const std::exception& error) {
        last_error = error.what();
    }
}

void poolkit_empty_cache(void) {
    try {
        registry::instance().for_each([](device_pool& pool) { pool.release(); });
    } catch (const std::exception& error) {
        last_error = error.what();
    }
}

long poolkit_memory_stats_json(int device, char* buffer, size_t capacity) {
    try {
        device_pool* pool = registry::instance().pool(device);
        return pool == nullptr ? -1 : write_text(stats_json(*pool), buffer, capacity);
    } catch (const std::exception& error) {
        last_error = error.what();
        return -1;
    }
}

long poolkit_memory_summary(int device, char* buffer, size_t capacity) {
    try {
        device_pool* pool = registry::instance().pool(device);
        return pool == nullptr ? -1 : write_text(memory_summary(pool->memory_stats()), buffer, capacity);
    } catch (const std::exception& error) {
        last_error = error.what();
        return -1;
    }
}

int poolkit_set_allocator(const char* name) {
    try {
        const auto kind = name == nullptr ? std::nullopt : kind_named(name);
        if (!kind) {
            throw std::invalid_argument(std::string("poolkit: no allocator named \"") + (name == nullptr ? "" : name) +
                                        "\" (expected caching or expandable)");
        }
        if (!registry::instance().choose(*kind)) {
            throw std::logic_error("poolkit: the allocator can only be chosen before the first pool is made");
        }
        return 0;
    } catch (const std::exception& error) {
        last_error = error.what();
        return -1;
    }
}

const char* poolkit_allocator_name(void) {
    try {
        return name_of(registry::instance().kind());
    } catch (const std::exception& error) {
        last_error = error.what();
        return nullptr;
    }
}

const char* poolkit_last_error(void) { return last_error.c_str(); }

}  // extern "C"
