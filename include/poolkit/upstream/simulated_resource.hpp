// simulated_resource: addresses without memory, so that allocation traces of any size replay on
// a CPU.
//
// It reserves a range of address space that is never made readable or writable (touching it
// faults) and hands out addresses from it, best fit by size then address, coalescing freed ranges.
// Like cudaMalloc, successive chunks are not contiguous unless options.contiguous is set: a gap of
// one granule follows each. Complexity: O(log n) in the number of live and free ranges.
// Thread-safe (one mutex). Alignment: any power of two; sizes are rounded up to the granularity.
// Stream semantics: allocate_async and deallocate_async are the plain calls, which is exact here
// because nothing ever touches the memory. On exhaustion — more than options.capacity bytes live,
// or no hole in the address range that fits — throws out_of_memory with live bytes and capacity.
// Equality is identity: only the resource that handed out an address can take it back.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/errors.hpp>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <new>
#include <mutex>
#include <set>
#include <system_error>
#include <utility>

#if defined(__unix__) || defined(__APPLE__)
#  include <sys/mman.h>
#else
#  error "poolkit::simulated_resource needs mmap (POSIX)"
#endif

namespace poolkit {

struct simulated_options {
    // Most bytes live at once, counted after rounding; past it allocate throws out_of_memory.
    std::size_t capacity = std::size_t{256} << 30;
    // Sizes are rounded up to, and addresses aligned to, this power of two.
    std::size_t granularity = 512;
    // Successive chunks adjacent (true) or separated by one granule (false, like cudaMalloc).
    bool contiguous = false;
};

class simulated_resource {
public:
    simulated_resource() : simulated_resource(simulated_options{}) {}

    explicit simulated_resource(simulated_options options) : options_(options) {
        validate_alignment(options_.granularity);
        const auto capacity = checked_round_up(options_.capacity, options_.granularity);
        // Rounding and gaps at most double each chunk's footprint; alignment padding stays inside the
        // second half as well for alignments up to the chunk size.
        const auto span = capacity ? checked_add(*capacity, *capacity) : std::nullopt;
        if (!span || *span == 0) throw std::invalid_argument("poolkit: simulated_resource capacity is 0 or too large");
        span_ = *span;
        void* base = ::mmap(nullptr, span_, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (base == MAP_FAILED) {
            throw std::system_error(errno, std::generic_category(), "poolkit: simulated_resource could not reserve address space");
        }
        base_ = reinterpret_cast<std::uintptr_t>(base);
        const std::uintptr_t first = align_up(base_, options_.granularity);
        insert_free(first, base_ + span_ - first);
    }

    simulated_resource(const simulated_resource&) = delete;
    simulated_resource& operator=(const simulated_resource&) = delete;

    ~simulated_resource() { ::munmap(reinterpret_cast<void*>(base_), span_); }

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        std::lock_guard lock(mutex_);
        if (void* pointer = allocate_locked(bytes, alignment)) return pointer;
        memory_figures figures = memory_figures::request(bytes, alignment);
        figures.live_bytes = live_bytes_;
        figures.limit_bytes = options_.capacity;
        throw out_of_memory("simulated_resource", figures);
    }

    void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        std::lock_guard lock(mutex_);
        try {
            return allocate_locked(bytes, alignment);
        } catch (const std::bad_alloc&) {  // the host is out of memory for bookkeeping
            return nullptr;
        }
    }

    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        std::lock_guard lock(mutex_);
        const auto found = live_.find(reinterpret_cast<std::uintptr_t>(pointer));
        POOLKIT_ASSERT(found != live_.end(), "deallocate of a pointer simulated_resource did not hand out");
        if (found == live_.end()) return;
        const live_range range = found->second;
        POOLKIT_ASSERT(checked_round_up(bytes, options_.granularity) == range.rounded_bytes,
                       "deallocate with a size other than the one allocated");
        static_cast<void>(alignment);
        live_bytes_ -= range.rounded_bytes;
        live_.erase(found);
        insert_free_coalesced(range.start, range.footprint);
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref) { return allocate(bytes, alignment); }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref) noexcept {
        deallocate(pointer, bytes, alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(simulated_resource);

    // Whether `pointer` lies inside a live allocation.
    [[nodiscard]] bool owns(const void* pointer) const {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        std::lock_guard lock(mutex_);
        auto after = live_.upper_bound(address);
        if (after == live_.begin()) return false;
        const auto& [user, range] = *std::prev(after);
        return address < user + range.rounded_bytes;
    }

    // Bytes live now, after rounding to the granularity.
    [[nodiscard]] std::size_t live_bytes() const {
        std::lock_guard lock(mutex_);
        return live_bytes_;
    }
    [[nodiscard]] std::size_t live_allocations() const {
        std::lock_guard lock(mutex_);
        return live_.size();
    }
    [[nodiscard]] const simulated_options& options() const noexcept { return options_; }

    // Free ranges are disjoint, never adjacent (they coalesce), indexed the same way by address and
    // by size, and with live ranges they tile the reservation.
    void check_invariants() const {
        std::lock_guard lock(mutex_);
        POOLKIT_VERIFY(free_by_address_.size() == free_by_size_.size(), "free indexes disagree");
        std::uintptr_t previous_end = 0;
        std::size_t free_total = 0;
        for (const auto& [start, bytes] : free_by_address_) {
            POOLKIT_VERIFY(start > previous_end || previous_end == 0, "free ranges touch or overlap");
            POOLKIT_VERIFY(free_by_size_.count({bytes, start}) == 1, "free range missing from the size index");
            previous_end = start + bytes;
            free_total += bytes;
        }
        std::size_t footprint_total = 0;
        std::size_t live_total = 0;
        for (const auto& [user, range] : live_) {
            footprint_total += range.footprint;
            live_total += range.rounded_bytes;
        }
        POOLKIT_VERIFY(live_total == live_bytes_, "live byte count drifted");
        POOLKIT_VERIFY(free_total + footprint_total + (align_up(base_, options_.granularity) - base_) == span_,
                       "live and free ranges do not tile the reservation");
    }

    friend bool operator==(const simulated_resource& a, const simulated_resource& b) noexcept { return &a == &b; }

private:
    struct live_range {
        std::uintptr_t start;  // first byte of the footprint (padding, block, gap)
        std::size_t footprint;  // everything this allocation took from the free ranges
        std::size_t rounded_bytes;  // the block itself
    };

    // nullptr when the request does not fit; std::bad_alloc only if the host runs out for bookkeeping.
    void* allocate_locked(std::size_t bytes, std::size_t alignment) {
        const auto rounded = checked_round_up(bytes, options_.granularity);
        if (!rounded || *rounded > options_.capacity - live_bytes_) return nullptr;  // live <= capacity
        const std::size_t gap = options_.contiguous ? 0 : options_.granularity;
        const std::size_t padding_bound = alignment > options_.granularity ? alignment - options_.granularity : 0;
        const auto needed = checked_add(*rounded, gap + padding_bound);
        if (!needed) return nullptr;
        const auto hole = free_by_size_.lower_bound({*needed, 0});
        if (hole == free_by_size_.end()) return nullptr;
        const auto [hole_bytes, hole_start] = *hole;
        const std::uintptr_t user = align_up(hole_start, alignment);
        const std::size_t footprint = (user - hole_start) + *rounded + gap;
        // The steps that allocate host memory come first, each undone if a later one throws.
        live_.emplace(user, live_range{hole_start, footprint, *rounded});
        try {
            if (hole_bytes > footprint) insert_free(hole_start + footprint, hole_bytes - footprint);
        } catch (...) {
            live_.erase(user);
            throw;
        }
        erase_free(hole_start, hole_bytes);
        live_bytes_ += *rounded;
        return reinterpret_cast<void*>(user);
    }

    // Strong guarantee: if the second index throws, the first is undone.
    void insert_free(std::uintptr_t start, std::size_t bytes) {
        const auto inserted = free_by_address_.emplace(start, bytes).first;
        try {
            free_by_size_.emplace(bytes, start);
        } catch (...) {
            free_by_address_.erase(inserted);
            throw;
        }
    }
    void erase_free(std::uintptr_t start, std::size_t bytes) {
        free_by_address_.erase(start);
        free_by_size_.erase({bytes, start});
    }
    void insert_free_coalesced(std::uintptr_t start, std::size_t bytes) {
        auto next = free_by_address_.lower_bound(start);
        if (next != free_by_address_.end() && next->first == start + bytes) {
            bytes += next->second;
            erase_free(next->first, next->second);
        }
        next = free_by_address_.lower_bound(start);
        if (next != free_by_address_.begin()) {
            const auto previous = std::prev(next);
            if (previous->first + previous->second == start) {
                start = previous->first;
                bytes += previous->second;
                erase_free(previous->first, previous->second);
            }
        }
        insert_free(start, bytes);
    }

    simulated_options options_;
    std::uintptr_t base_ = 0;
    std::size_t span_ = 0;
    mutable std::mutex mutex_;
    std::size_t live_bytes_ = 0;
    std::map<std::uintptr_t, live_range> live_;  // keyed by the user's address
    std::map<std::uintptr_t, std::size_t> free_by_address_;  // start -> bytes
    std::set<std::pair<std::size_t, std::uintptr_t>> free_by_size_;  // (bytes, start): best fit
};

static_assert(stream_resource<simulated_resource>);
static_assert(has_try_allocate<simulated_resource> && has_owns<simulated_resource>);

}  // namespace poolkit
