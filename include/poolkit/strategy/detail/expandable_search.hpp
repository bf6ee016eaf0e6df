// The placement search of expandable (strategy/expandable.hpp): where a request goes among a
// pool's free blocks, scored by the granules it leaves to map and the granules it pins, over the
// bookkeeping of detail/expandable_parts.hpp. The pool then maps and carves; nothing here changes
// a block or a bit.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/strategy/detail/expandable_parts.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>

namespace poolkit {

namespace detail::expandable_parts {

// A pool's granules: `bytes` each, and at most `per_allocation` to a physical allocation of a
// large span (a small span's are a granule each).
struct grid {
    std::size_t bytes = 0;
    int shift = 0;  // bytes == 1 << shift (a virtual memory's granularity is a power of two): no division
    std::size_t per_allocation = 1;

    void set_granularity(std::size_t granularity) noexcept {
        bytes = granularity;
        shift = std::countr_zero(granularity);
    }

    [[nodiscard]] std::uintptr_t address(const span& s, std::size_t granule) const noexcept { return s.address + granule * bytes; }
    // The granules [first, last) of its span that a block touches, and those wholly inside it.
    [[nodiscard]] std::pair<std::size_t, std::size_t> touched(const block& b) const noexcept {
        return {(b.address - b.owner->address) >> shift, (b.end() - b.owner->address + bytes - 1) >> shift};
    }
    [[nodiscard]] std::pair<std::size_t, std::size_t> interior(const block& b) const noexcept {
        const std::size_t first = (b.address - b.owner->address + bytes - 1) >> shift;
        const std::size_t last = (b.end() - b.owner->address) >> shift;
        return {first, std::max(first, last)};
    }
    // The granules of free block `b` that hold only allocations wholly inside it: its cache.
    [[nodiscard]] std::pair<std::size_t, std::size_t> releasable(const block& b) const noexcept {
        const auto [first, last] = interior(b);
        return b.owner->whole_within(first, last);
    }
    // The granules [first, last) of `s` under `length` bytes from `start`.
    [[nodiscard]] std::pair<std::size_t, std::size_t> under(const span& s, std::uintptr_t start, std::size_t length) const noexcept {
        return {(start - s.address) >> shift, (start + length - s.address + bytes - 1) >> shift};
    }
    [[nodiscard]] std::size_t unmapped_under(const span& s, std::uintptr_t start, std::size_t length) const noexcept {
        const auto [first, last] = under(s, start, length);
        return s.count(first, last, false);
    }
};

// Where a request goes: a free block, the start in it, how many granules must be mapped, and
// how many granules it pins that no live block pinned yet. where == nullptr: nothing fits.
struct placement {
    block* where = nullptr;
    std::uintptr_t start = 0;
    std::size_t unmapped = 0;
    std::size_t pins = 0;
};

// `rounded` bytes at `start` in free block `b`.
[[nodiscard]] inline placement score(const grid& g, block& b, std::uintptr_t start, std::size_t rounded) noexcept {
    const span& s = *b.owner;
    const auto [first, last] = g.under(s, start, rounded);
    // The granules at b's ends are pinned by its live neighbours where they reach into them.
    const std::size_t head = b.address - s.address, tail = b.end() - s.address;
    const bool shared_first = (head & (g.bytes - 1)) != 0 && (head >> g.shift) == first;
    const bool shared_last = (tail & (g.bytes - 1)) != 0 && (tail >> g.shift) == last - 1;
    std::size_t pins = last - first;
    if (shared_first) --pins;
    if (shared_last && (last - 1 != first || !shared_first)) --pins;
    return {&b, start, s.count(first, last, false), pins};
}

// The start in free block `b` for `rounded` bytes at `alignment` that leaves fewest granules
// to map (then pins fewest): one of b's ends, or a window that starts or ends with a mapped
// stretch of b; the low end whenever it needs no mapping, whatever it pins (it keeps the rest
// of b in one piece). O(granules of b / 64 + mapped stretches).
[[nodiscard]] inline placement least_unmapped(const grid& g, block& b, std::size_t rounded, std::size_t alignment) noexcept {
    placement best;
    const auto consider = [&](std::uintptr_t start) {
        if (start < b.address || start > b.end() || b.end() - start < rounded) return;
        const placement here = score(g, b, start, rounded);
        if (best.where == nullptr || here.unmapped < best.unmapped || (here.unmapped == best.unmapped && here.pins < best.pins)) {
            best = here;
        }
    };
    const span& s = *b.owner;
    const std::uintptr_t low = align_up(b.address, alignment);
    if (low < b.address || low - b.address > b.bytes - rounded) return best;
    consider(low);
    if (best.unmapped == 0) return best;
    consider(align_down(b.end() - rounded, alignment));
    if (best.unmapped == 0) return best;
    const auto [first, last] = g.touched(b);
    s.for_each_run(first, last, true, [&](std::size_t a, std::size_t z) {
        if (best.unmapped == 0 && best.pins == 0) return;
        consider(align_up(std::max(b.address, g.address(s, a)), alignment));
        const std::uintptr_t end = std::min(b.end(), g.address(s, z));
        if (end - b.address >= rounded) consider(align_down(end - rounded, alignment));
    });
    return best;
}

// At most a free block's cache and an allocation at each end are mapped under a placement in it
// (no physical allocation is longer than `per_allocation` granules): the fewest granules any
// placement of `rounded` bytes in it can leave to map.
[[nodiscard]] inline std::size_t least_to_map(const grid& g, const block& b, std::size_t rounded, std::size_t per_allocation) noexcept {
    const std::size_t spanned = (rounded + g.bytes - 1) / g.bytes;  // granules a placement touches, at least
    const std::size_t most_mapped = b.cached + 2 * per_allocation;
    return spanned > most_mapped ? spanned - most_mapped : 0;
}

// A large request maps many granules, and once the mapping budget is reached each one mapped is
// one unmapped elsewhere, so every free block of `large` that fits is searched, smallest first,
// for the placement that maps fewest (least_unmapped); the search stops at the first that maps
// none. Blocks that cannot beat the best so far are skipped, and so are those that must map more
// than `most_unmapped` granules.
[[nodiscard]] inline placement find_large(const grid& g, free_blocks& large, std::size_t rounded, std::size_t alignment,
                                          std::size_t most_unmapped = std::numeric_limits<std::size_t>::max()) noexcept {
    placement best;
    for (auto it = large.lower_bound(by_size::key{rounded, 0}, by_size{}); it != large.end(); ++it) {
        const std::size_t least = least_to_map(g, *it, rounded, g.per_allocation);
        if (least > most_unmapped || (best.where != nullptr && least >= best.unmapped)) continue;
        const placement here = least_unmapped(g, *it, rounded, alignment);
        if (here.where != nullptr && (best.where == nullptr || here.unmapped < best.unmapped)) best = here;
        if (best.where != nullptr && best.unmapped == 0) break;
    }
    return best;
}

// The first placement of `rounded` bytes that maps nothing in a large span's free block among the
// first `compared` blocks of `cached` (a pool's cache: free blocks with mapped granules, oldest
// freed first); where == nullptr: none.
template <class Blocks>
[[nodiscard]] placement find_oldest_mapped(const grid& g, Blocks& cached, std::size_t rounded, std::size_t alignment,
                                           int compared) noexcept {
    for (block& b : cached) {
        if (compared-- == 0) break;
        if (b.owner->small || b.bytes < rounded) continue;
        const placement here = least_unmapped(g, b, rounded, alignment);
        if (here.where != nullptr && here.unmapped == 0) return here;
    }
    return {};
}

// The most free blocks find_small compares.
inline constexpr int max_candidates = 64;

// A small request: among the best-fitting free blocks of `small` (at most `candidates`, up to
// max_candidates), the first (smallest) with an end whose granules are all mapped, else a mapped
// stretch inside one of them, else the one that maps fewest granules. In a block, the end (low
// or high) that pins fewer granules no live block pinned yet: sharing a granule with a live
// neighbour is free.
[[nodiscard]] inline placement find_small(const grid& g, free_blocks& small, std::size_t rounded, std::size_t alignment,
                                          int candidates) noexcept {
    placement best;
    block* seen[max_candidates];
    int count = 0;
    for (auto it = small.lower_bound(by_size::key{rounded, 0}, by_size{});
         it != small.end() && count < std::min(candidates, max_candidates); ++it) {
        block& b = *it;
        const std::uintptr_t low = align_up(b.address, alignment);
        if (low < b.address || low - b.address > b.bytes - rounded) continue;
        seen[count++] = &b;
        placement here = score(g, b, low, rounded);
        const std::uintptr_t high = align_down(b.end() - rounded, alignment);
        if (here.unmapped == 0 && here.pins == 0) return here;
        if (high != low) {
            const placement other = score(g, b, high, rounded);
            if (other.unmapped < here.unmapped || (other.unmapped == here.unmapped && other.pins < here.pins)) here = other;
        }
        if (here.unmapped == 0) return here;
        if (best.where == nullptr || here.unmapped < best.unmapped) best = here;
    }
    for (int i = 0; i < count; ++i) {
        if (least_to_map(g, *seen[i], rounded, 1) > 0) continue;  // a small span's allocations are a granule each
        const placement inside = least_unmapped(g, *seen[i], rounded, alignment);
        if (inside.where != nullptr && inside.unmapped == 0) return inside;
    }
    return best;
}

}  // namespace detail::expandable_parts

}  // namespace poolkit
