// The resource of each CUDA device: one per device, read and replaced from any thread.
//
// current_device_resource() is the resource of the device current on the calling thread;
// set_current_device_resource(r) replaces it and returns the previous one; device_resource(d) and
// set_device_resource(d, r) name the device. Until set, every device's resource is a
// cuda_device_resource (cudaMalloc). The registry only refers to resources: each must outlive its
// registration, and allocate on the device it is registered for (make it while that device is
// current). Thread-safe: one mutex, taken for each read and write. Device numbers are checked
// against cudaGetDeviceCount (std::out_of_range).
#pragma once

#include <poolkit/core/properties.hpp>
#include <poolkit/core/resource_ref.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>
#include <poolkit/core/detail/cuda_runtime.hpp>

#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace poolkit {

using device_resource_ref = stream_resource_ref<device_accessible>;

namespace detail {
class device_registry {
public:
    static device_registry& instance() {
        static auto* registry = new device_registry;  // never destroyed: used from static destructors
        return *registry;
    }

    device_resource_ref get(int device) {
        std::lock_guard lock(mutex_);
        return slot(device).value_or(default_ref());
    }

    device_resource_ref set(int device, device_resource_ref resource) {
        std::lock_guard lock(mutex_);
        auto& entry = slot(device);
        const device_resource_ref previous = entry.value_or(default_ref());
        entry = resource;
        return previous;
    }

private:
    device_registry() {
        int count = 0;
        check_cuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
        slots_.resize(static_cast<std::size_t>(count));
    }

    std::optional<device_resource_ref>& slot(int device) {
        if (device < 0 || static_cast<std::size_t>(device) >= slots_.size()) {
            throw std::out_of_range("poolkit: no CUDA device " + std::to_string(device) + " (there are " + std::to_string(slots_.size()) +
                                    ")");
        }
        return slots_[static_cast<std::size_t>(device)];
    }

    static device_resource_ref default_ref() {
        static cuda_device_resource fallback;  // stateless: one serves every device
        return device_resource_ref{fallback};
    }

    std::mutex mutex_;
    std::vector<std::optional<device_resource_ref>> slots_;
};

inline int current_device() {
    int device = 0;
    check_cuda(cudaGetDevice(&device), "cudaGetDevice");
    return device;
}
}  // namespace detail

[[nodiscard]] inline device_resource_ref device_resource(int device) { return detail::device_registry::instance().get(device); }
inline device_resource_ref set_device_resource(int device, device_resource_ref resource) {
    return detail::device_registry::instance().set(device, resource);
}
[[nodiscard]] inline device_resource_ref current_device_resource() { return device_resource(detail::current_device()); }
inline device_resource_ref set_current_device_resource(device_resource_ref resource) {
    return set_device_resource(detail::current_device(), resource);
}

}  // namespace poolkit
