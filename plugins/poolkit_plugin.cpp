// libpoolkit_plugin.so: the C ABI of include/poolkit/interop/c_api.h over one caching device
// allocator per device, with statistics inside (reserved bytes) and outside (what users hold).
#include <poolkit/interop/c_api.h>

#include <poolkit/adaptor/statistics.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/presets.hpp>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace {

using namespace poolkit;

// Reserved figures (segments, num_device_alloc) come from the inner statistics, the user-facing
// ones from the outer; the lock sits between them, so the outer counters stay lock-free.
using reserved_counter = statistics<cuda_device_resource>;
using outer_pool = statistics<synchronized<caching_allocator<ref<reserved_counter>, cuda_events>>>;

struct device_pool {
    reserved_counter reserved;
    outer_pool pool{std::in_place, std::in_place, ref<reserved_counter>(reserved)};
};

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
    device_pool* pool(int device) {
        std::lock_guard lock(mutex_);
        if (device < 0 || static_cast<std::size_t>(device) >= pools_.size()) return nullptr;
        auto& slot = pools_[static_cast<std::size_t>(device)];
        if (!slot) {
            device_guard guard(device);
            slot = std::make_unique<device_pool>();
        }
        return slot.get();
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

std::string stats_json(const device_pool& device) {
    std::string json = "{";
    for (const auto& [key, value] : device.pool.memory_stats()) {
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
        return pool->pool.allocate_async(static_cast<std::size_t>(size), default_alignment, stream_ref{stream});
    } catch (const std::exception& error) {
        last_error = error.what();
        return nullptr;
    }
}

void poolkit_free(void* pointer, ssize_t size, int device, poolkit_stream stream) {
    if (pointer == nullptr || size <= 0) return;
    device_pool* pool = registry::instance().pool(device);
    if (pool == nullptr) return;
    device_guard guard(device);
    pool->pool.deallocate_async(pointer, static_cast<std::size_t>(size), default_alignment, stream_ref{stream});
}

void poolkit_record_stream(void* pointer, int device, poolkit_stream stream) {
    try {
        if (device_pool* pool = registry::instance().pool(device)) {
            device_guard guard(device);
            pool->pool.upstream_resource().record_use(pointer, stream_ref{stream});
        }
    } catch (const std::exception& error) {
        last_error = error.what();
    }
}

void poolkit_empty_cache(void) {
    try {
        registry::instance().for_each([](device_pool& device) { device.pool.upstream_resource().release(); });
    } catch (const std::exception& error) {
        last_error = error.what();
    }
}

long poolkit_memory_stats_json(int device, char* buffer, size_t capacity) {
    device_pool* pool = registry::instance().pool(device);
    return pool == nullptr ? -1 : write_text(stats_json(*pool), buffer, capacity);
}

long poolkit_memory_summary(int device, char* buffer, size_t capacity) {
    device_pool* pool = registry::instance().pool(device);
    return pool == nullptr ? -1 : write_text(memory_summary(pool->pool.memory_stats()), buffer, capacity);
}

const char* poolkit_last_error(void) { return last_error.c_str(); }

}  // extern "C"
