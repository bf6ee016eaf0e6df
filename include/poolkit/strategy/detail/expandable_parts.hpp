// The bookkeeping nodes of expandable (strategy/expandable.hpp): its blocks, their indexes, and
// the spans of address space they tile, each with a bit per granule for mapped and one for where a
// physical allocation starts.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/strategy/detail/intrusive.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <utility>
#include <vector>

namespace poolkit {

namespace detail::expandable_parts {

struct by_size_tag;
struct in_span_tag;
struct cached_tag;
struct span;

// A block of a span, free or live: in the free multiset of its kind or the live set (they share
// a hook), always in its span's address-ordered list, and in the cached list while it is free
// with mapped granules wholly inside it.
struct block : intrusive::set_hook<by_size_tag>, intrusive::list_hook<in_span_tag>, intrusive::list_hook<cached_tag> {
    block(std::uintptr_t address_, std::size_t bytes_, span* owner_) noexcept : address(address_), bytes(bytes_), owner(owner_) {}
    std::uintptr_t address;
    std::size_t bytes;
    std::size_t requested = 0;  // live: the bytes asked for
    std::size_t cached = 0;  // free: mapped granules wholly inside it
    span* owner;
    bool free = true;
    [[nodiscard]] std::uintptr_t end() const noexcept { return address + bytes; }
};

struct by_size {
    struct key {
        std::size_t bytes;
        std::uintptr_t address;
    };
    template <class A, class B>
    bool operator()(const A& a, const B& b) const noexcept {
        return a.bytes < b.bytes || (a.bytes == b.bytes && a.address < b.address);
    }
};

struct by_address {
    bool operator()(const block& a, const block& b) const noexcept { return a.address < b.address; }
    bool operator()(const block& a, std::uintptr_t b) const noexcept { return a.address < b; }
    bool operator()(std::uintptr_t a, const block& b) const noexcept { return a < b.address; }
};

using block_list = intrusive::list<block, in_span_tag>;
using cached_list = intrusive::list<block, cached_tag>;
using free_blocks = intrusive::multiset<block, by_size_tag, by_size>;
using live_blocks = intrusive::set<block, by_size_tag, by_address>;

// A span of claimed address space: its blocks tile it; one bit per granule says it is mapped,
// another that a physical allocation starts there. An allocation runs from its start to the next
// start or unmapped granule, and can only be unmapped whole (virtual_memory's map_whole).
struct span {
    span(std::uintptr_t address_, std::size_t bytes_, std::size_t granularity, bool small_)
        : address(address_), bytes(bytes_), small(small_), mapped((bytes_ / granularity + 63) / 64, 0), starts(mapped.size(), 0) {}
    std::uintptr_t address;
    std::size_t bytes;
    bool small;
    block_list blocks;
    std::vector<std::uint64_t> mapped;
    std::vector<std::uint64_t> starts;  // a subset of mapped
    std::size_t mapped_end = 0;  // no granule at or past this one was ever mapped
    std::size_t mapped_count = 0;  // granules mapped now: mapped_end exactly when all below it are

    [[nodiscard]] std::size_t granules() const noexcept { return mapped.size() * 64; }
    [[nodiscard]] bool starts_at(std::size_t granule) const noexcept { return (starts[granule / 64] >> (granule % 64)) & 1u; }

    // Records [first, last) as mapped, one allocation per granule (each = false) or one in all.
    void set_mapped(std::size_t first, std::size_t last, bool each) noexcept {
        mapped_count += count(first, last, false);
        set(mapped, first, last, true);
        if (each) {
            set(starts, first, last, true);
        } else {
            set(starts, first, first + 1, true);
        }
        mapped_end = std::max(mapped_end, last);
    }
    void set_unmapped(std::size_t first, std::size_t last) noexcept {
        mapped_count -= count(first, last, true);
        set(mapped, first, last, false);
        set(starts, first, last, false);
    }

    // The granules [from, to) of [first, last) that hold only allocations wholly inside [first,
    // last): those an unmap of [first, last) may give back. Allocations reaching past either end
    // are left out.
    [[nodiscard]] std::pair<std::size_t, std::size_t> whole_within(std::size_t first, std::size_t last) const noexcept {
        std::size_t from = first;
        if (from < last && bit(from) && !starts_at(from)) {
            from = first_of(from + 1, last, [this](std::size_t w) { return starts[w] | ~mapped[w]; });
        }
        std::size_t to = last;
        if (to > from && to < granules() && bit(to) && !starts_at(to)) {
            to = last_start(from, to);
        }
        return {from, std::max(from, to)};
    }

    [[nodiscard]] bool bit(std::size_t granule) const noexcept { return (mapped[granule / 64] >> (granule % 64)) & 1u; }

    // Granules in [first, last) whose bit is `value`. O(1) while every granule below mapped_end is
    // mapped (a pool that has not unmapped), else a word per 64 granules.
    [[nodiscard]] std::size_t count(std::size_t first, std::size_t last, bool value) const noexcept {
        const std::size_t end = std::min(last, mapped_end);
        if (mapped_count == mapped_end) {
            const std::size_t ones = end > first ? end - first : 0;
            return value ? ones : (last - first) - ones;
        }
        std::size_t ones = 0;
        for (std::size_t g = first; g < end;) {
            const std::size_t word = g / 64, offset = g % 64;
            const std::size_t take = std::min<std::size_t>(64 - offset, end - g);
            std::uint64_t bits = mapped[word] >> offset;
            if (take < 64) bits &= (std::uint64_t{1} << take) - 1;
            ones += static_cast<std::size_t>(std::popcount(bits));
            g += take;
        }
        return value ? ones : (last - first) - ones;
    }

    static void set(std::vector<std::uint64_t>& bits, std::size_t first, std::size_t last, bool value) noexcept {
        for (std::size_t g = first; g < last;) {
            const std::size_t word = g / 64, offset = g % 64;
            const std::size_t take = std::min<std::size_t>(64 - offset, last - g);
            const std::uint64_t mask = (take < 64 ? ((std::uint64_t{1} << take) - 1) : ~std::uint64_t{0}) << offset;
            bits[word] = value ? (bits[word] | mask) : (bits[word] & ~mask);
            g += take;
        }
    }

    // Calls f(first, last) for each maximal run of granules in [first, last) whose bit is `value`.
    template <class F>
    void for_each_run(std::size_t first, std::size_t last, bool value, F&& f) const {
        if (value) last = std::min(last, mapped_end);  // nothing is mapped past mapped_end
        std::size_t g = first;
        while (g < last) {
            g = next(g, last, value);
            const std::size_t run = g;
            g = next(g, last, !value);
            if (run < g) f(run, g);
        }
    }

    // The first granule in [g, last) whose mapped bit is `value`, or last.
    [[nodiscard]] std::size_t next(std::size_t g, std::size_t last, bool value) const noexcept {
        return value ? first_of(g, last, [this](std::size_t w) { return mapped[w]; })
                     : first_of(g, last, [this](std::size_t w) { return ~mapped[w]; });
    }

    // The first granule in [g, last) whose bit in word(index) is set, or last: a word at a time.
    template <class Word>
    [[nodiscard]] static std::size_t first_of(std::size_t g, std::size_t last, Word word) noexcept {
        while (g < last) {
            const std::uint64_t bits = word(g / 64) >> (g % 64);
            if (bits != 0) return std::min(last, g + static_cast<std::size_t>(std::countr_zero(bits)));
            g = (g / 64 + 1) * 64;
        }
        return last;
    }

    // The last granule in [first, last) where an allocation starts, or first when none does.
    [[nodiscard]] std::size_t last_start(std::size_t first, std::size_t last) const noexcept {
        while (last > first) {
            const std::size_t top = last - 1;
            std::uint64_t bits = starts[top / 64] & (~std::uint64_t{0} >> (63 - top % 64));
            if (bits != 0) return std::max(first, (top / 64) * 64 + 63 - static_cast<std::size_t>(std::countl_zero(bits)));
            last = (top / 64) * 64;
        }
        return first;
    }

    // Every allocation starts on a mapped granule, every mapped run starts an allocation, and
    // mapped_count is the mapped granules.
    void check_invariants() const {
        std::size_t counted = 0;
        for (std::size_t w = 0; w < mapped.size(); ++w) {
            const std::uint64_t previous = (mapped[w] << 1) | (w > 0 ? mapped[w - 1] >> 63 : 0);
            POOLKIT_VERIFY((starts[w] & ~mapped[w]) == 0, "an allocation starts on an unmapped granule");
            POOLKIT_VERIFY((mapped[w] & ~previous & ~starts[w]) == 0, "a mapped run does not start an allocation");
            counted += static_cast<std::size_t>(std::popcount(mapped[w]));
        }
        POOLKIT_VERIFY(counted == mapped_count, "a span's mapped granule count drifted");
    }
};

// Files live block `b` in `live` right beside the nearest live block of its span, at most two
// blocks away (free blocks never touch): amortized O(1), where a search from the root misses the
// cache at every level. Every block of the span that is not free is in `live`.
inline void file_live(live_blocks& live, block& b) noexcept {
    const auto& list = b.owner->blocks;
    auto at = list.iterator_to(b);
    for (int step = 0; step < 2 && ++at != list.end(); ++step) {
        if (!at->free) {
            live.insert(live.iterator_to(*at), b);
            return;
        }
    }
    at = list.iterator_to(b);
    for (int step = 0; step < 2 && at != list.begin(); ++step) {
        if (!(--at)->free) {
            live.insert(std::next(live.iterator_to(*at)), b);
            return;
        }
    }
    live.insert(b);
}

// Recently carved live blocks by address, a slot each (direct-mapped), so that most frees find
// their block without a search of the live index from the root. A slot only ever holds a live
// block: a block leaves it when freed through it, and a block freed through the live index
// instead is not in its slot (that slot holds another live block, or nothing).
class recent_live {
public:
    void remember(block& b) noexcept { slots_[slot(b.address)] = &b; }
    // The live block at `address` where its slot has it (then the slot is emptied), else nullptr.
    [[nodiscard]] block* take(std::uintptr_t address) noexcept {
        block*& at = slots_[slot(address)];
        block* found = at;
        if (found == nullptr || found->address != address) return nullptr;
        at = nullptr;
        return found;
    }
    template <class F>
    void for_each(F&& f) const {
        for (const block* b : slots_) {
            if (b != nullptr) f(*b);
        }
    }

private:
    static constexpr std::size_t count = 256;
    static std::size_t slot(std::uintptr_t address) noexcept { return ((address >> 9) ^ (address >> 21)) % count; }
    std::array<block*, count> slots_{};
};

// Claims address space for a span of `wanted` bytes and at least `needed` (whole granules of
// `granule` bytes): {where, bytes}. At most a 32nd of what is left to claim, where the memory says
// (largest_claimable): many pools over it (stream lanes) then fit, each span smaller as space runs
// short. A claim that fails halves down to `needed`, whose out_of_memory is thrown: it says the
// address space ran out, and what is left.
template <class Memory>
[[nodiscard]] std::pair<std::byte*, std::size_t> claim_address_space(Memory& m, std::size_t wanted, std::size_t needed,
                                                                     std::size_t granule) {
    const auto whole = [granule](std::size_t bytes) { return align_up(std::max(bytes, granule), granule); };
    std::size_t share = wanted;
    if constexpr (requires(const Memory& v) { v.largest_claimable(); }) share = std::min(wanted, whole(m.largest_claimable() / 32));
    std::size_t bytes = std::max(share, needed);
    for (;;) {
        try {
            return {m.claim(bytes), bytes};
        } catch (const out_of_memory&) {
            if (bytes == needed) throw;
            bytes = std::max(needed, whole(bytes / 2));
        }
    }
}

}  // namespace detail::expandable_parts

}  // namespace poolkit
