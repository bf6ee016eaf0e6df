// The physical side of expandable (strategy/expandable.hpp): which granules of its spans are
// mapped, the cache (free blocks with mapped granules wholly inside them, oldest freed first), and
// the map and unmap calls that change them. The pool decides where blocks go and how much to map
// or unmap (its mapping policy); this does it, over the bookkeeping of detail/expandable_parts.hpp
// and the granule arithmetic of detail/expandable_search.hpp.
//
// Contract:
// - map_first_unmapped() maps the first so many unmapped granules of a range, with map_range.
// - map_range() maps the unmapped granules under a range, one map call per run (a physical
//   allocation per granule), or in a large span with per_allocation above one and not near the
//   physical limit, as allocations of per_allocation granules aligned to that in the span (a live
//   block pins every allocation it touches). Strong guarantee.
// - cache()/uncache() file and unfile a free block: its cached count is the granules of
//   allocations wholly inside it.
// - trim() unmaps cached granules, oldest freed first, whole allocations only, after one
//   synchronize() of the memory; never those of a kept range.
// free_indexes files free blocks in their size index and the cache together.
// Memory is a virtual_memory (core/virtual_memory.hpp). Not thread-safe.
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/strategy/detail/expandable_parts.hpp>
#include <poolkit/strategy/detail/expandable_search.hpp>
#include <poolkit/strategy/detail/tiling.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace poolkit {

namespace detail::expandable_parts {

// Granules [first, last) of a span that a trim leaves mapped: those a placement is about to use.
struct kept {
    const block* in = nullptr;
    std::size_t first = 0;
    std::size_t last = 0;
};

template <class Memory>
class mapping {
public:
    // Within this many allocations of per_allocation granules of the physical limit, large spans
    // map a granule per allocation too.
    static constexpr std::size_t near_limit_allocations = 64;

    // `g`, the pool's granules, outlives this (the pool owns both).
    explicit mapping(const grid& g) noexcept : grid_(&g) {}
    mapping(const mapping&) = delete;
    mapping& operator=(const mapping&) = delete;

    // What the memory can hold mapped at once: its physical limit where it has one.
    static std::size_t limit_of(const Memory& m) noexcept {
        if constexpr (requires { m.physical_limit(); })
            return m.physical_limit();
        else
            return m.capacity();
    }
    // Bytes `m` can still map before its physical limit, whoever maps them.
    static std::size_t physical_left(const Memory& m) {
        const std::size_t limit = limit_of(m);
        const std::size_t mapped = m.mapped_bytes();
        return limit > mapped ? limit - mapped : 0;
    }
    // Within 64 allocations of the physical limit (1 GiB at 16 MiB), large spans map a granule per
    // allocation too: a live block pins the allocations it touches whole, so what is mapped from
    // there on can all be given back once free (what was mapped in larger allocations before stays
    // as it was). Under a limit that low, per_allocation never applies.
    bool near_limit(const Memory& m) const { return physical_left(m) < near_limit_allocations * grid_->per_allocation * grid_->bytes; }

    // Maps the unmapped granules under [start, start + bytes) of `s`: one map call per run, a
    // physical allocation per granule — or, in a large span with per_allocation above one and not
    // near_limit(), map_pieces. Small spans keep a granule each, so that a live small block pins
    // only its own. Strong guarantee: on failure what this call mapped is unmapped again.
    void map_range(Memory& m, span& s, std::uintptr_t start, std::size_t bytes) {
        const auto [first, last] = grid_->under(s, start, bytes);
        std::vector<std::pair<std::size_t, std::size_t>> runs;
        s.for_each_run(first, last, false, [&](std::size_t a, std::size_t b) { runs.emplace_back(a, b); });
        std::size_t done = 0;
        try {
            for (; done < runs.size(); ++done) {
                const auto [a, b] = runs[done];
                void* at = reinterpret_cast<void*>(grid_->address(s, a));
                if (s.small || grid_->per_allocation == 1 || near_limit(m)) {
                    m.map(at, (b - a) * grid_->bytes);
                    s.set_mapped(a, b, true);
                    ++map_calls_;
                } else {
                    map_pieces(m, s, a, b);
                }
                mapped_granules_ += b - a;
            }
        } catch (...) {
            for (std::size_t i = 0; i < done; ++i) {  // fresh: nothing can use them yet
                const auto [a, b] = runs[i];
                m.unmap(reinterpret_cast<void*>(grid_->address(s, a)), (b - a) * grid_->bytes);
                s.set_unmapped(a, b);
                mapped_granules_ -= b - a;
                ++unmap_calls_;
            }
            throw;
        }
        peak_mapped_granules_ = std::max(peak_mapped_granules_, mapped_granules_);
    }

    // Maps the first `granules` unmapped granules of [first, last) of `s`, a run at a time with
    // map_range, until they are mapped or a map fails (std::bad_alloc: what earlier runs mapped
    // stays mapped). Whether anything was mapped.
    bool map_first_unmapped(Memory& m, span& s, std::size_t first, std::size_t last, std::size_t granules) {
        std::vector<std::pair<std::size_t, std::size_t>> runs;
        s.for_each_run(first, last, false, [&](std::size_t a, std::size_t z) {
            const std::size_t take = std::min(z - a, granules);
            if (take > 0) runs.emplace_back(a, a + take);
            granules -= take;
        });
        bool mapped = false;
        try {
            for (const auto& [a, z] : runs) {
                map_range(m, s, grid_->address(s, a), (z - a) * grid_->bytes);
                mapped = true;
            }
        } catch (const std::bad_alloc&) {
        }
        return mapped;
    }

    // Unmaps cached granules, oldest freed first, until at least `bytes` are unmapped or none is
    // left; never those of `keep`. Only as many whole allocations as still wanted, from the high
    // end of each mapped run: unmapping a whole block's cache for a request of one granule left
    // the budget to be mapped again at the next large request (1.9 times the granules remapped
    // per warm pass of the bundled BERT trace), and with mapping_bytes it unmapped a whole
    // program's memory, freed at the end of a pass, for a few MiB (750 physical allocations per
    // 1,000 events of the next pass of a varying-length training trace; 0.8 when trimmed by the
    // allocation). Small spans with mapping_bytes still drop whole caches (a granule at a time
    // raised ResNet-50's adaptive slack: 1.015 → 1.150). Waits for the device first (once, and
    // only if there is something to unmap). Unmaps nothing where `may_unmap` is false.
    void trim(Memory& m, bool may_unmap, std::size_t bytes, kept keep = {}) {
        if (cached_.empty() || !may_unmap) return;
        bool waited = false;
        std::size_t unmapped = 0;
        for (auto it = cached_.begin(); it != cached_.end() && unmapped < bytes;) {
            block& b = *it;
            ++it;
            const auto [first, last] = grid_->interior(b);
            span& s = *b.owner;
            // Whole allocations only: one reaching into a live block or the kept range stays.
            const auto drop_within = [&](std::size_t from, std::size_t to, const auto& drop) {
                const auto [a, z] = s.whole_within(from, to);
                s.for_each_run(a, z, true, drop);
            };
            std::size_t dropped = 0;
            const bool by_allocation = grid_->per_allocation == 1 || !s.small;
            const auto drop = [&](std::size_t a, std::size_t z) {
                if (by_allocation) {  // the fewest whole allocations at the run's high end
                    const std::size_t done = unmapped + dropped * grid_->bytes;
                    if (done >= bytes) return;
                    const std::size_t left = bytes - done;  // bytes may be SIZE_MAX (release)
                    const std::size_t wanted = left / grid_->bytes + (left % grid_->bytes != 0 ? 1 : 0);
                    if (z - a > wanted) a = s.last_start(a, z - wanted + 1);
                }
                if (!waited) {
                    m.synchronize();
                    waited = true;
                }
                m.unmap(reinterpret_cast<void*>(grid_->address(s, a)), (z - a) * grid_->bytes);
                s.set_unmapped(a, z);
                dropped += z - a;
                ++unmap_calls_;
            };
            if (&b == keep.in) {
                drop_within(first, std::max(first, std::min(last, keep.first)), drop);
                drop_within(std::min(last, std::max(first, keep.last)), last, drop);
            } else {
                drop_within(first, last, drop);
            }
            unmapped += dropped * grid_->bytes;
            mapped_granules_ -= dropped;
            cached_granules_ -= dropped;
            b.cached -= dropped;
            if (b.cached == 0) cached_.erase(cached_.iterator_to(b));
        }
    }

    // Unmaps every mapped granule of `spans` after one synchronize(), for a pool going away (its
    // blocks are forgotten first, the cache here too).
    void unmap_all(Memory& m, const std::vector<std::unique_ptr<span>>& spans) noexcept {
        cached_.clear();
        if (mapped_granules_ == 0) return;
        try {
            m.synchronize();
        } catch (...) {
            POOLKIT_ASSERT(false, "expandable could not wait for the device before unmapping");
        }
        for (const auto& s : spans) {
            s->for_each_run(0, s->bytes / grid_->bytes, true, [&](std::size_t first, std::size_t last) {
                m.unmap(reinterpret_cast<void*>(grid_->address(*s, first)), (last - first) * grid_->bytes);
            });
        }
    }

    // Counts free block `b`'s cache and files it among the cached blocks (the newest) where it has
    // one; uncache() takes it out again.
    void cache(block& b) noexcept {
        const auto [first, last] = grid_->releasable(b);
        b.cached = b.owner->count(first, last, true);
        if (b.cached > 0) {
            cached_.push_back(b);
            cached_granules_ += b.cached;
        }
    }
    void uncache(block& b) noexcept {
        if (b.cached > 0) {
            cached_.erase(cached_.iterator_to(b));
            cached_granules_ -= b.cached;
            b.cached = 0;
        }
    }

    [[nodiscard]] std::size_t mapped_granules() const noexcept { return mapped_granules_; }
    [[nodiscard]] std::size_t peak_mapped_granules() const noexcept { return peak_mapped_granules_; }
    [[nodiscard]] std::size_t cached_granules() const noexcept { return cached_granules_; }
    [[nodiscard]] std::size_t map_calls() const noexcept { return map_calls_; }
    [[nodiscard]] std::size_t unmap_calls() const noexcept { return unmap_calls_; }
    // The free blocks with a cache, oldest freed first.
    [[nodiscard]] const cached_list& cached() const noexcept { return cached_; }
    [[nodiscard]] cached_list& cached() noexcept { return cached_; }

private:
    // Maps granules [a, b) of large span `s` as allocations of at most per_allocation granules,
    // aligned to that within the span. Strong guarantee.
    void map_pieces(Memory& m, span& s, std::size_t a, std::size_t b) {
        std::size_t g = a;
        try {
            while (g < b) {
                const std::size_t end = std::min(b, (g / grid_->per_allocation + 1) * grid_->per_allocation);
                m.map_whole(reinterpret_cast<void*>(grid_->address(s, g)), (end - g) * grid_->bytes);
                s.set_mapped(g, end, false);
                ++map_calls_;
                g = end;
            }
        } catch (...) {
            if (g > a) {
                m.unmap(reinterpret_cast<void*>(grid_->address(s, a)), (g - a) * grid_->bytes);
                s.set_unmapped(a, g);
            }
            throw;
        }
    }

    const grid* grid_;
    // Invariant: free blocks with cached granules are in cached_, oldest freed first.
    cached_list cached_;
    std::size_t mapped_granules_ = 0;
    std::size_t peak_mapped_granules_ = 0;
    std::size_t cached_granules_ = 0;
    std::size_t map_calls_ = 0;
    std::size_t unmap_calls_ = 0;
};

// The pool's free blocks: each in the size index of its span's kind and, with its cached granules
// counted, in the cache. Its forget, file and replace are split_around's and coalesce's
// `Indexes` (detail/tiling.hpp): replace files a block in another's place where the size order
// allows (take_place), without a search.
template <class Memory>
struct free_indexes {
    free_blocks& small;
    free_blocks& large;
    mapping<Memory>& cache;

    free_blocks& of(const block& b) noexcept { return b.owner->small ? small : large; }
    void file(block& b) noexcept {
        of(b).insert(b);
        cache.cache(b);
    }
    void forget(block& b) noexcept {
        of(b).erase(of(b).iterator_to(b));
        cache.uncache(b);
    }
    bool replace(block& old, block& with) noexcept {
        if (!take_place(of(old), old, with, by_size{})) return false;
        cache.uncache(old);
        cache.cache(with);
        return true;
    }
};

}  // namespace detail::expandable_parts

}  // namespace poolkit
