// per_thread_parts: the parts of per_thread (adaptor/per_thread.hpp) that know nothing of its
// Upstream or Events.
//
// Contract:
// - class_of / class_size: the size classes of the thread caches — 256 B, then four per doubling
//   (320, 384, 448, 512, 640, ...): a request is rounded up by at most 25%.
// - registry / this_thread(): each thread's caches (cache_base, one per per_thread object it
//   used), given back by their thread_exit() when the thread's thread_locals are destroyed; after
//   that this_thread() is nullptr, so that a later call (from a thread_local or static object
//   destroyed after them) skips the caches instead of using a destroyed one.
// - next_id(): ids that tell per_thread objects apart where one is made at a dead one's address.
// - owned_counter: a counter that only its thread writes and any thread may read, exactly.
// - marked_blocks: live blocks that must go back to the upstream at their free (a graph pool's),
//   asked at every free: a filter of address bits answers most with one relaxed load, no lock.
// Thread safety: as stated per part.
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

namespace poolkit::detail::per_thread_parts {

// Size classes: 256 B, then four per doubling (320, 384, 448, 512, 640, ...).
inline constexpr std::size_t smallest_class = 256;

[[nodiscard]] constexpr std::size_t class_of(std::size_t bytes) noexcept {
    if (bytes <= smallest_class) return 0;
    const std::size_t top = static_cast<std::size_t>(std::bit_width(bytes - 1));  // 2^(top-1) < bytes <= 2^top
    const std::size_t quarter = ((bytes - 1) >> (top - 3)) & 3;
    return 1 + (top - 9) * 4 + quarter;
}
[[nodiscard]] constexpr std::size_t class_size(std::size_t index) noexcept {
    if (index == 0) return smallest_class;
    const std::size_t top = (index - 1) / 4 + 9, quarter = (index - 1) % 4;
    return (std::size_t{1} << (top - 1)) + (quarter + 1) * (std::size_t{1} << (top - 3));
}
static_assert(class_of(256) == 0 && class_of(257) == 1 && class_size(1) == 320 && class_of(320) == 1);
static_assert(class_of(512) == 4 && class_size(4) == 512 && class_of(513) == 5 && class_size(5) == 640);
static_assert(class_size(class_of(std::size_t{4} << 20)) == std::size_t{4} << 20);

// A thread's cache as its thread sees it: what the thread-local registry gives back at exit.
struct cache_base {
    explicit cache_base(std::uint64_t owner_) noexcept : owner(owner_) {}
    cache_base(const cache_base&) = delete;
    cache_base& operator=(const cache_base&) = delete;
    virtual ~cache_base() = default;
    virtual void thread_exit() noexcept = 0;
    [[nodiscard]] virtual bool orphaned() const noexcept = 0;
    const std::uint64_t owner;  // the id of the per_thread it belongs to
};

// Whether the calling thread's registry (below) is gone: set when its thread_local teardown
// destroys it, at the thread's exit or, for the main thread, at exit() before static objects.
// Constant-initialized, so reading it is a plain load.
inline thread_local bool registry_gone = false;

// The caches of one thread, one per per_thread object it used; each gives back its blocks when
// the thread exits.
struct registry {
    std::vector<std::unique_ptr<cache_base>> caches;
    const cache_base* last = nullptr;  // the last call's, for the hot path
    registry() = default;
    registry(const registry&) = delete;
    registry& operator=(const registry&) = delete;
    ~registry() {
        registry_gone = true;  // a later call (from a thread_local or static) finds no cache
        last = nullptr;
        for (auto& cache : caches) cache->thread_exit();
    }
};

// The calling thread's registry, made at its first call; nullptr once it is gone.
inline registry* this_thread() noexcept {
    if (registry_gone) [[unlikely]]
        return nullptr;
    thread_local registry caches;
    return &caches;
}

// Ids tell per_thread objects apart even where one is made at a dead one's address.
inline std::uint64_t next_id() noexcept {
    static std::atomic<std::uint64_t> counter{0};
    return counter.fetch_add(1, std::memory_order_relaxed) + 1;
}

// A counter that only its thread writes and any thread may read.
class owned_counter {
public:
    void add(std::int64_t delta) noexcept { value_.store(value_.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed); }
    [[nodiscard]] std::int64_t get() const noexcept { return value_.load(std::memory_order_relaxed); }

private:
    std::atomic<std::int64_t> value_{0};
};

// Live blocks that must go back to the upstream at their free (a graph pool's), asked at every
// free of a cached size: a filter of 65,536 address bits answers the frees of other blocks with
// one relaxed load, no lock; a set under a lock answers the rest exactly. Bits are set as blocks
// are added and cleared when the set empties.
class marked_blocks {
public:
    void add(void* pointer) {
        const std::lock_guard lock(mutex_);
        set_.insert(pointer);
        bits_[word(pointer)].fetch_or(bit(pointer), std::memory_order_relaxed);
        count_.store(set_.size(), std::memory_order_relaxed);
    }
    // Whether `pointer` was marked (and now is not any more).
    bool take(void* pointer) noexcept {
        if (count_.load(std::memory_order_relaxed) == 0) return false;
        if ((bits_[word(pointer)].load(std::memory_order_relaxed) & bit(pointer)) == 0) return false;
        const std::lock_guard lock(mutex_);
        if (set_.erase(pointer) == 0) return false;
        if (set_.empty()) {
            for (auto& w : bits_) w.store(0, std::memory_order_relaxed);
        }
        count_.store(set_.size(), std::memory_order_relaxed);
        return true;
    }

private:
    static constexpr std::size_t words = 1024;
    static std::uint64_t hash(const void* pointer) noexcept {
        return (reinterpret_cast<std::uintptr_t>(pointer) >> 8) * 0x9e3779b97f4a7c15ull;
    }
    static std::size_t word(const void* pointer) noexcept { return static_cast<std::size_t>(hash(pointer) >> 54); }
    static std::uint64_t bit(const void* pointer) noexcept { return std::uint64_t{1} << ((hash(pointer) >> 48) & 63); }

    std::mutex mutex_;
    std::unordered_set<void*> set_;  // guarded by mutex_
    std::array<std::atomic<std::uint64_t>, words> bits_{};
    std::atomic<std::size_t> count_{0};
};

}  // namespace poolkit::detail::per_thread_parts
