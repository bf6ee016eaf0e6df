// lasting_streams: the streams a program declares it never destroys, each with its id, so that
// cuda_events::identity() answers for them without a driver call (cuStreamGetId: 27 ns on an H100
// host, asked more than once per allocate and free on a created stream, docs/costs.md).
//
// Insert-only: a declaration is for the process's life (a destroyed stream's handle may come back
// for another stream, whose calls would then take the declared one's id: declare only streams that
// are never destroyed, as PyTorch's own). find() takes no lock: ids are published before their
// handles (release) and read after them (acquire). At most `capacity` streams; later declarations
// are refused and those streams ask the driver as before. Complexity: find() O(1) expected, one
// relaxed load when nothing is declared; declare() takes a mutex.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace poolkit::detail {

class lasting_streams {
public:
    // PyTorch's pooled streams of eight devices (32 per priority, up to four priorities each) fit.
    static constexpr std::size_t capacity = 2048;

    // Whether `handle` (not null) is declared; its id into `id` when it is.
    bool find(const void* handle, std::uint64_t& id) const noexcept {
        if (count_.load(std::memory_order_relaxed) == 0) return false;
        for (std::size_t i = home(handle), probes = 0; probes < slots; i = (i + 1) & (slots - 1), ++probes) {
            const void* key = slots_[i].handle.load(std::memory_order_acquire);
            if (key == handle) {
                id = slots_[i].id.load(std::memory_order_relaxed);
                return true;
            }
            if (key == nullptr) return false;
        }
        return false;
    }

    // Declares `handle` (not null) with `id`; true where it is declared now or was (with its first
    // id), false where `capacity` streams are declared already.
    bool declare(const void* handle, std::uint64_t id) noexcept {
        const std::lock_guard lock(mutex_);
        std::size_t i = home(handle);
        for (const void* key; (key = slots_[i].handle.load(std::memory_order_relaxed)) != nullptr; i = (i + 1) & (slots - 1)) {
            if (key == handle) return true;
        }
        if (count_.load(std::memory_order_relaxed) == capacity) return false;
        slots_[i].id.store(id, std::memory_order_relaxed);
        slots_[i].handle.store(handle, std::memory_order_release);
        count_.fetch_add(1, std::memory_order_release);
        return true;
    }

    [[nodiscard]] std::size_t size() const noexcept { return count_.load(std::memory_order_relaxed); }

private:
    static constexpr std::size_t slots = 2 * capacity;  // at most half full: short probes, always an empty slot

    // Fibonacci hashing of the handle (driver objects: the low bits carry little).
    static std::size_t home(const void* handle) noexcept {
        constexpr unsigned shift = 64 - 12;  // log2(slots) = 12
        static_assert(slots == std::size_t{1} << 12);
        return static_cast<std::size_t>((reinterpret_cast<std::uintptr_t>(handle) * 0x9E3779B97F4A7C15ull) >> shift);
    }

    struct slot {
        std::atomic<const void*> handle{nullptr};
        std::atomic<std::uint64_t> id{0};
    };
    std::array<slot, slots> slots_{};
    std::atomic<std::size_t> count_{0};
    std::mutex mutex_;
};

}  // namespace poolkit::detail
