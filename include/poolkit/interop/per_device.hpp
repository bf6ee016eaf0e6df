// One resource per CUDA device, owned and made on first use while its device is current: what a
// framework keeps behind its allocator (PyTorch holds one pool per device; poolkit's plugin does
// the same through this).
//
// get(device, make) returns the device's resource, calling make() -> std::unique_ptr<Resource>
// with the device current the first time; find(device) returns it if made, else nullptr, and makes
// nothing; for_each(visit) visits each made resource with its device current. A device number
// outside 0 .. count() - 1 is refused with std::out_of_range. Thread-safe: one mutex, held while a
// resource is made or visited; a resource, once made, keeps its address until the per_device is
// destroyed, so references to it are used without the lock, and get() and find() of a made one
// take none (an atomic load). Scope makes a device current for its lifetime and reports a failure
// to switch through check() (detail::device_scope with CUDA; without CUDA there is no device to
// switch to).
#pragma once

#include <poolkit/core/config.hpp>

#if POOLKIT_HAS_CUDA
#  include <poolkit/core/detail/cuda_driver.hpp>
#endif

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace poolkit {

// A scope that switches nothing: for hosts without CUDA, and for devices that are not CUDA's.
struct no_device_scope {
    explicit no_device_scope(int) noexcept {}
    void check() const noexcept {}
};

#if POOLKIT_HAS_CUDA
using current_device_scope = detail::device_scope;
#else
using current_device_scope = no_device_scope;
#endif

template <class Resource, class Scope = current_device_scope>
class per_device {
public:
    explicit per_device(int devices)
        : resources_(static_cast<std::size_t>(std::max(devices, 0))), made_(static_cast<std::size_t>(std::max(devices, 0))) {}

    [[nodiscard]] int count() const noexcept { return static_cast<int>(resources_.size()); }
    [[nodiscard]] bool contains(int device) const noexcept { return device >= 0 && device < count(); }

    template <class Make>
    Resource& get(int device, Make&& make) {
        static_assert(std::is_convertible_v<std::invoke_result_t<Make&>, std::unique_ptr<Resource>>,
                      "make() must return a std::unique_ptr to the resource (or to a type derived from it)");
        const std::size_t i = index(device);
        if (Resource* made = made_[i].load(std::memory_order_acquire)) return *made;
        std::lock_guard lock(mutex_);
        auto& slot = resources_[i];
        if (!slot) {
            const Scope scope(device);
            scope.check();
            std::unique_ptr<Resource> made = make();
            if (!made) throw std::logic_error("poolkit: per_device: make() returned no resource for device " + std::to_string(device));
            slot = std::move(made);
            made_[i].store(slot.get(), std::memory_order_release);
        }
        return *slot;
    }

    [[nodiscard]] Resource* find(int device) { return made_[index(device)].load(std::memory_order_acquire); }

    [[nodiscard]] bool any() const {
        std::lock_guard lock(mutex_);
        return std::any_of(resources_.begin(), resources_.end(), [](const auto& slot) { return slot != nullptr; });
    }

    // visit(Resource&, int device), in device order.
    template <class Visit>
    void for_each(Visit&& visit) {
        std::lock_guard lock(mutex_);
        for (std::size_t device = 0; device < resources_.size(); ++device) {
            if (!resources_[device]) continue;
            const Scope scope(static_cast<int>(device));
            scope.check();
            visit(*resources_[device], static_cast<int>(device));
        }
    }

private:
    std::size_t index(int device) const {
        if (!contains(device)) {
            throw std::out_of_range("poolkit: no device " + std::to_string(device) + " (there are " + std::to_string(count()) + ")");
        }
        return static_cast<std::size_t>(device);
    }

    mutable std::mutex mutex_;
    std::vector<std::unique_ptr<Resource>> resources_;
    // resources_ as published once made, so that get() and find() of a made resource take no lock.
    std::vector<std::atomic<Resource*>> made_;
};

}  // namespace poolkit
