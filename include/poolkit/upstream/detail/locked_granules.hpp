// locked_granules: a granule_map under one mutex with the physical limit, answering every query of
// the virtual_memory interface that needs only the map, so that each model (cuda_vmm_resource,
// simulated_vmm_resource) writes only what touches its memory.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/upstream/detail/granule_map.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>

namespace poolkit {
namespace detail {

// A granule_map under one mutex, with the physical limit, and the queries of virtual_memory and
// of the resource face that need nothing but the map. A model derives from it publicly, adopts its
// range once in its constructor, and guards its own use of granules_ with mutex_.
class locked_granules {
public:
    [[nodiscard]] std::byte* base() const noexcept { return reinterpret_cast<std::byte*>(granules_.base()); }
    [[nodiscard]] std::size_t capacity() const noexcept { return granules_.capacity(); }
    [[nodiscard]] std::size_t granularity() const noexcept { return granules_.granularity(); }
    [[nodiscard]] std::size_t physical_limit() const noexcept { return physical_limit_.load(std::memory_order_relaxed); }
    // Sets the most bytes mapped at once, rounded down to whole granules and at most what the
    // model can ever map (0: that much). Below what is mapped now, maps fail until enough is
    // unmapped (torch.cuda.set_per_process_memory_fraction).
    void set_physical_limit(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        const std::size_t limit = bytes == 0 ? most_mappable_ : std::min(align_down(bytes, granules_.granularity()), most_mappable_);
        physical_limit_.store(limit, std::memory_order_relaxed);
        over_limit_ = granules_.mapped_bytes() > limit ? granules_.mapped_bytes() : 0;
    }

    // A span of `bytes` (rounded up to whole granules) of the range, unmapped, that allocate never
    // uses: a strategy maps and unmaps inside it itself, and gives it back with unclaim(). Taken
    // from the top of the range. out_of_memory, saying the address space ran out, when no such
    // span is left.
    [[nodiscard]] std::byte* claim(std::size_t bytes) {
        std::lock_guard lock(mutex_);
        return reinterpret_cast<std::byte*>(granules_.claim_or_throw(bytes, name_));
    }
    // The largest span claim() could give now.
    [[nodiscard]] std::size_t largest_claimable() const {
        std::lock_guard lock(mutex_);
        return granules_.largest_claimable();
    }
    // Gives back a span from claim() (or whole granules of one) with nothing mapped in it: address
    // space only. It may be claimed again.
    void unclaim(void* at, std::size_t bytes) noexcept {
        std::lock_guard lock(mutex_);
        granules_.unclaim(reinterpret_cast<std::uintptr_t>(at), bytes);
    }

    [[nodiscard]] bool is_mapped(const void* pointer) const {
        return locked(&granule_map::is_mapped, reinterpret_cast<std::uintptr_t>(pointer));
    }
    [[nodiscard]] std::size_t mapped_bytes() const { return locked(&granule_map::mapped_bytes); }
    [[nodiscard]] std::size_t peak_mapped_bytes() const { return locked(&granule_map::peak_mapped_bytes); }
    void reset_peak_mapped_bytes() {
        std::lock_guard lock(mutex_);
        granules_.reset_peak_mapped_bytes();
    }
    [[nodiscard]] std::size_t map_calls() const { return locked(&granule_map::map_calls); }
    [[nodiscard]] std::size_t unmap_calls() const { return locked(&granule_map::unmap_calls); }
    [[nodiscard]] std::size_t created_allocations() const { return locked(&granule_map::created_allocations); }
    // Calls of alias (among map_calls()), and the address space their aliases take now.
    [[nodiscard]] std::size_t alias_calls() const { return locked(&granule_map::alias_calls); }
    [[nodiscard]] std::size_t aliased_bytes() const { return locked(&granule_map::aliased_bytes); }
    [[nodiscard]] std::size_t released_allocations() const { return locked(&granule_map::released_allocations); }

    // Whether `pointer` lies inside a live block from allocate; how many there are.
    [[nodiscard]] bool owns(const void* pointer) const { return locked(&granule_map::in_block, reinterpret_cast<std::uintptr_t>(pointer)); }
    [[nodiscard]] std::size_t live_allocations() const { return locked(&granule_map::block_count); }

    void check_invariants() const {
        std::lock_guard lock(mutex_);
        granules_.check_invariants();
        POOLKIT_VERIFY(granules_.mapped_bytes() <= std::max(physical_limit_.load(), over_limit_), "mapped past the physical limit");
    }

protected:
    // `name` (static storage) is the model's, for the messages of claim().
    explicit locked_granules(const char* name) noexcept : name_(name) {}
    locked_granules(const locked_granules&) = delete;
    locked_granules& operator=(const locked_granules&) = delete;
    ~locked_granules() = default;

    // Takes the reserved range, the most bytes the model can ever map, and the limit to start
    // with (at most that). Once, in the model's constructor.
    void adopt(granule_map granules, std::size_t most_mappable, std::size_t limit) noexcept {
        granules_ = std::move(granules);
        most_mappable_ = most_mappable;
        physical_limit_.store(std::min(limit, most_mappable), std::memory_order_relaxed);
    }

    // With mutex_ held: records a block of `rounded` bytes (whole granules) aligned to `alignment`
    // in the smallest unmapped hole, and maps it with map(address); should map throw, the block is
    // forgotten and the exception goes on. out_of_memory, saying the reserved range is full, when
    // no hole fits (`bytes` is what was asked, for the message).
    template <class Map>
    void* place_block_locked(std::size_t bytes, std::size_t rounded, std::size_t alignment, Map&& map) {
        const auto at = granules_.find_unmapped(rounded, alignment);
        if (!at) throw_range_full(bytes, alignment);
        granules_.record_block(*at, rounded);
        try {
            map(*at);
        } catch (...) {
            granules_.forget_block(*at);
            throw;
        }
        return reinterpret_cast<void*>(*at);
    }

    // With mutex_ held: whether [address, address + bytes) may be unmapped now (whole granules, all
    // mapped, none in a live block from allocate). A call that breaks a rule is asserted, with the
    // rule it broke, and refused.
    [[nodiscard]] bool may_unmap_locked(std::uintptr_t address, std::size_t bytes) const noexcept {
        const char* violation = granules_.unmap_violation(address, bytes);
        POOLKIT_ASSERT(violation == nullptr, violation);
        return violation == nullptr;
    }

    mutable std::mutex mutex_;
    granule_map granules_{0, 0, 1};  // guarded by mutex_; the reservation once adopted

private:
    // Out of line, so that the allocation path around it stays small enough to inline.
    [[noreturn, gnu::noinline, gnu::cold]] void throw_range_full(std::size_t bytes, std::size_t alignment) const {
        memory_figures range = memory_figures::request(bytes, alignment);
        range.reserved_bytes = granules_.mapped_bytes();
        range.limit_bytes = granules_.capacity();
        throw out_of_memory((std::string(name_) + "'s reserved range").c_str(), range);
    }

    template <class Result, class... Args>
    Result locked(Result (granule_map::*query)(Args...) const noexcept, Args... args) const {
        std::lock_guard lock(mutex_);
        return (granules_.*query)(args...);
    }

    const char* name_;
    std::atomic<std::size_t> physical_limit_{0};  // read without the lock
    std::size_t most_mappable_ = 0;
    std::size_t over_limit_ = 0;  // mapped when the limit was set below that (else 0)
};

}  // namespace detail
}  // namespace poolkit
