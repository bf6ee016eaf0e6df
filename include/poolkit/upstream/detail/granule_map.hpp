// The bookkeeping the two models of virtual_memory (core/virtual_memory.hpp) share:
// cuda_vmm_resource on a GPU, simulated_vmm_resource on a CPU. granule_map records which granules
// of the reserved range are mapped, the claimed spans and the resource face's blocks;
// locked_granules (locked_granules.hpp) puts it under one mutex with the physical limit.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/virtual_memory.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace poolkit {

namespace detail {

// Which granules of a reserved range are mapped, the counters of the virtual_memory interface, and
// the blocks that a model's resource face (allocate/deallocate) handed out. Unsynchronized.
//
// Unmapped space is kept as maximal holes, indexed by address and by (size, address); mapped
// granules are the complement; mappings of more than one granule made whole are kept by address.
// A block from allocate is exactly mapped: its alignment padding stays an unmapped hole, so
// allocate and map never hand out the same granule twice.
class granule_map {
public:
    granule_map(std::uintptr_t base, std::size_t capacity, std::size_t granularity)
        : base_(base), capacity_(capacity), granularity_(granularity) {
        POOLKIT_ASSERT(is_power_of_two(granularity) && base % granularity == 0 && capacity % granularity == 0,
                       "granule_map over a range that is not in whole granules");
        if (capacity_ != 0) insert_hole(base_, capacity_);
    }

    [[nodiscard]] std::uintptr_t base() const noexcept { return base_; }
    [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
    [[nodiscard]] std::size_t granularity() const noexcept { return granularity_; }
    [[nodiscard]] std::size_t mapped_bytes() const noexcept { return mapped_bytes_; }
    [[nodiscard]] std::size_t peak_mapped_bytes() const noexcept { return peak_mapped_bytes_; }
    // The peak becomes what is mapped now (torch.cuda.reset_peak_memory_stats()).
    void reset_peak_mapped_bytes() noexcept { peak_mapped_bytes_ = mapped_bytes_; }
    // Whether `bytes` more may be mapped under `limit` (which may have been lowered below what is
    // mapped: then nothing may).
    [[nodiscard]] bool room_for(std::size_t bytes, std::size_t limit) const noexcept {
        return mapped_bytes_ <= limit && bytes <= limit - mapped_bytes_;
    }
    [[nodiscard]] std::size_t map_calls() const noexcept { return map_calls_; }
    [[nodiscard]] std::size_t unmap_calls() const noexcept { return unmap_calls_; }
    // Physical allocations created (one per granule of a map, one per map_whole) and released
    // (each one's unmap): what the driver charges for.
    [[nodiscard]] std::size_t created_allocations() const noexcept { return created_; }
    [[nodiscard]] std::size_t released_allocations() const noexcept { return released_; }
    [[nodiscard]] std::size_t block_count() const noexcept { return blocks_.size(); }
    [[nodiscard]] std::size_t block_bytes() const noexcept { return block_bytes_; }

    // Throws std::invalid_argument, naming `source`, unless [at, at + bytes) is a non-empty run of
    // whole granules inside the range, none of them mapped.
    void check_map(std::uintptr_t at, std::size_t bytes, const char* source) const {
        check_in_range(at, bytes, source, "map");
        const auto hole = hole_containing(at);
        if (hole == holes_by_address_.end() || at + bytes > hole->first + hole->second) {
            throw std::invalid_argument(std::string("poolkit: ") + source + "::map of " + describe(at, bytes) +
                                        ": part of it is already mapped");
        }
    }

    // Why unmap(at, bytes) breaks its precondition, or nullptr when it does not.
    [[nodiscard]] const char* unmap_violation(std::uintptr_t at, std::size_t bytes) const noexcept {
        if (!in_range(at, bytes)) return "unmap of a range that is not whole granules inside the reservation";
        const auto after = holes_by_address_.lower_bound(at);
        if (after != holes_by_address_.end() && after->first < at + bytes) return "unmap of a range not wholly mapped";
        if (after != holes_by_address_.begin()) {
            const auto before = std::prev(after);
            if (before->first + before->second > at) return "unmap of a range not wholly mapped";
        }
        if (const auto alias = alias_overlapping(at, bytes); alias != aliases_.end()) {
            return alias->first == at && alias->second.bytes == bytes ? nullptr : "unmap of an alias that is not the whole alias alone";
        }
        if (const auto source = aliased_.lower_bound(at); source != aliased_.end() && source->first < at + bytes) {
            return "unmap of physical memory that an alias still maps";
        }
        const auto block = blocks_.lower_bound(at + bytes);
        if (block != blocks_.begin()) {
            const auto previous = std::prev(block);
            if (previous->first + previous->second > at) return "unmap of granules that a live block from allocate uses";
        }
        if (cuts_whole(at) || cuts_whole(at + bytes)) return "unmap of part of a mapping made whole (map_whole)";
        return nullptr;
    }

    // The bytes of the mapping made whole that starts at `at`, or nothing (a granule of its own,
    // unmapped, or inside another mapping).
    [[nodiscard]] std::optional<std::size_t> whole_at(std::uintptr_t at) const noexcept {
        const auto found = whole_.find(at);
        if (found == whole_.end()) return std::nullopt;
        return found->second;
    }

    // The lowest-addressed start, in the smallest hole that fits, of `bytes` (whole granules)
    // aligned to `alignment` (a power of two); nothing when no hole fits. O(log n) when alignment
    // is at most the granularity; larger alignments may look at every hole at least `bytes` long.
    [[nodiscard]] std::optional<std::uintptr_t> find_unmapped(std::size_t bytes, std::size_t alignment) const noexcept {
        const std::size_t step = alignment > granularity_ ? alignment : granularity_;
        for (auto hole = holes_by_size_.lower_bound({bytes, 0}); hole != holes_by_size_.end(); ++hole) {
            const auto [hole_bytes, hole_start] = *hole;
            const std::uintptr_t start = align_up(hole_start, step);
            if (start < hole_start) continue;  // wrapped past the top of the address space
            const std::size_t padding = start - hole_start;
            if (padding <= hole_bytes && hole_bytes - padding >= bytes && start + bytes <= claim_floor_) return start;
        }
        return std::nullopt;
    }

    // Takes `bytes` (whole granules) of unmapped space for a caller that maps inside it itself;
    // find_unmapped never offers it. Claims come from the top of the range: the smallest span
    // given back (unclaim) that fits, else below the lowest claim. Nothing when neither has room.
    // O(log n) in the spans given back. Strong guarantee: on std::bad_alloc nothing changed.
    [[nodiscard]] std::optional<std::uintptr_t> claim(std::size_t bytes) {
        if (bytes == 0 || bytes % granularity_ != 0) return std::nullopt;
        if (const auto fit = unclaimed_by_size_.lower_bound({bytes, 0}); fit != unclaimed_by_size_.end()) {
            const auto [free_bytes, start] = *fit;
            if (free_bytes > bytes) unclaimed_insert(start + bytes, free_bytes - bytes);  // first: it may throw
            unclaimed_by_size_.erase({free_bytes, start});
            unclaimed_.erase(start);
            return start;
        }
        if (bytes > claim_floor_ - base_) return std::nullopt;
        const std::uintptr_t start = claim_floor_ - bytes;
        const auto hole = hole_containing(start);
        if (hole == holes_by_address_.end() || hole->first + hole->second < claim_floor_) return std::nullopt;
        claim_floor_ = start;
        return start;
    }
    // Gives back a span from claim (or a run of whole granules of one), with nothing mapped in it:
    // it may be claimed again, and once the spans below the top of the range come back, allocate
    // may use it too. Coalesces with spans given back beside it. Never throws: a span that cannot
    // be recorded (no host memory) stays claimed.
    void unclaim(std::uintptr_t at, std::size_t bytes) noexcept {
        if (bytes == 0) return;
        POOLKIT_ASSERT(at >= claim_floor_ && at + bytes <= base_ + capacity_ && at % granularity_ == 0 && bytes % granularity_ == 0,
                       "unclaim of a range that was not claimed");
        POOLKIT_ASSERT(is_unmapped(at, bytes), "unclaim of a span with granules still mapped");
        if (const auto after = unclaimed_.find(at + bytes); after != unclaimed_.end()) {
            bytes += after->second;
            unclaimed_by_size_.erase({after->second, after->first});
            unclaimed_.erase(after);
        }
        if (const auto before = unclaimed_.lower_bound(at); before != unclaimed_.begin()) {
            const auto previous = std::prev(before);
            if (previous->first + previous->second == at) {
                at = previous->first;
                bytes += previous->second;
                unclaimed_by_size_.erase({previous->second, previous->first});
                unclaimed_.erase(previous);
            }
        }
        if (at == claim_floor_) {
            claim_floor_ += bytes;  // the lowest claims came back: the range below is free for allocate
            return;
        }
        try {
            unclaimed_insert(at, bytes);
        } catch (...) {
            POOLKIT_ASSERT(false, "no host memory to record a span given back; it stays claimed");
        }
    }
    [[nodiscard]] std::uintptr_t claim_floor() const noexcept { return claim_floor_; }
    // Whether no granule of [at, at + bytes) is mapped.
    [[nodiscard]] bool is_unmapped(std::uintptr_t at, std::size_t bytes) const noexcept {
        const auto hole = hole_containing(at);
        return hole != holes_by_address_.end() && at + bytes <= hole->first + hole->second;
    }
    // Address space claimed now (spans given back excluded).
    [[nodiscard]] std::size_t claimed_bytes() const noexcept {
        std::size_t free = 0;
        for (const auto& entry : unclaimed_) free += entry.second;
        return base_ + capacity_ - claim_floor_ - free;
    }
    // The largest span claim() could give now.
    [[nodiscard]] std::size_t largest_claimable() const noexcept {
        std::size_t largest = unclaimed_by_size_.empty() ? 0 : unclaimed_by_size_.rbegin()->first;
        const auto hole = claim_floor_ > base_ ? hole_containing(claim_floor_ - granularity_) : holes_by_address_.end();
        if (hole != holes_by_address_.end() && hole->first + hole->second >= claim_floor_) {
            largest = std::max(largest, claim_floor_ - hole->first);
        }
        return largest;
    }
    // claim() of `bytes` rounded up to whole granules, or out_of_memory naming `source` that says
    // the address space ran out and how large a span is left.
    [[nodiscard]] std::uintptr_t claim_or_throw(std::size_t bytes, const char* source) {
        const auto rounded = checked_round_up(bytes, granularity_);
        const auto start = rounded ? claim(*rounded) : std::nullopt;
        if (!start) {
            memory_figures figures = memory_figures::request(bytes, granularity_);
            figures.address_space_bytes = largest_claimable();
            figures.limit_bytes = capacity_;
            throw out_of_memory(source, figures);
        }
        return *start;
    }

    // Records [at, at + bytes) as mapped (check_map passed), one physical allocation per granule,
    // and counts one map call. Strong guarantee: on std::bad_alloc nothing changed.
    void mark_mapped(std::uintptr_t at, std::size_t bytes) {
        record_mapped(at, bytes);
        created_ += bytes / granularity_;
    }

    // As mark_mapped, for a mapping made whole: one physical allocation, unmapped only whole.
    void mark_mapped_whole(std::uintptr_t at, std::size_t bytes) {
        if (bytes <= granularity_) return mark_mapped(at, bytes);
        const auto inserted = whole_.emplace(at, bytes).first;
        try {
            record_mapped(at, bytes);
        } catch (...) {
            whole_.erase(inserted);
            throw;
        }
        ++created_;
    }

    // Throws std::invalid_argument, naming `source`, unless [at, at + bytes) may alias [from, from +
    // bytes): at unmapped as check_map asks, from a run of whole granules inside the range, mapped,
    // not itself an alias, and made of whole physical allocations (no mapping made whole reaches
    // past either end): the driver maps an allocation whole or not at all (with driver 580 cuMemMap
    // answered CUDA_ERROR_NOT_SUPPORTED to an offset into one and to fewer bytes than it holds on
    // an H100, and to fewer bytes on an H200, though its documentation describes both).
    void check_alias(std::uintptr_t at, std::uintptr_t from, std::size_t bytes, const char* source) const {
        check_map(at, bytes, source);
        check_in_range(from, bytes, source, "alias");
        const auto fail = [&](const char* why) {
            throw std::invalid_argument(std::string("poolkit: ") + source + "::alias of " + describe(from, bytes) + ": " + why);
        };
        if (unmap_violation_ignoring_blocks(from, bytes) != nullptr) fail("part of it is not mapped");
        if (alias_overlapping(from, bytes) != aliases_.end()) fail("it is an alias itself");
        if (cuts_whole(from) || cuts_whole(from + bytes)) fail("it cuts a physical allocation (a mapping made whole)");
    }

    // Records [at, at + bytes) as mapped to the physical memory of [from, from + bytes)
    // (check_alias passed): no physical memory is added and one map call is counted; until the
    // alias is unmapped (whole, by one unmap) the allocations of `from` may not be. Strong
    // guarantee: on std::bad_alloc nothing changed.
    void mark_aliased(std::uintptr_t at, std::uintptr_t from, std::size_t bytes) {
        std::vector<std::uintptr_t> starts;
        for_each_allocation(from, bytes, [&](std::uintptr_t start, std::size_t) { starts.push_back(start); });
        const auto inserted = aliases_.emplace(at, alias_record{from, bytes}).first;
        std::size_t counted = 0;
        try {
            for (; counted < starts.size(); ++counted) ++aliased_[starts[counted]];
            take_hole(at, bytes);
        } catch (...) {
            for (std::size_t i = 0; i < counted; ++i) release_source(starts[i]);
            aliases_.erase(inserted);
            throw;
        }
        aliased_bytes_ += bytes;
        ++map_calls_;
        ++alias_calls_;
    }
    // Calls f(start, bytes) for each physical allocation of [from, from + bytes), mapped and made of
    // whole allocations, in address order.
    template <class F>
    void for_each_allocation(std::uintptr_t from, std::size_t bytes, F&& f) const {
        for (std::uintptr_t p = from; p < from + bytes;) {
            const auto whole = whole_.find(p);
            const std::size_t length = whole != whole_.end() ? whole->second : granularity_;
            f(p, length);
            p += length;
        }
    }
    // The memory that the alias starting at `at` maps, or nothing (not the start of an alias).
    [[nodiscard]] std::optional<std::uintptr_t> alias_source(std::uintptr_t at) const noexcept {
        const auto found = aliases_.find(at);
        if (found == aliases_.end()) return std::nullopt;
        return found->second.from;
    }
    [[nodiscard]] std::size_t aliased_bytes() const noexcept { return aliased_bytes_; }
    // Calls of alias (among map_calls()).
    [[nodiscard]] std::size_t alias_calls() const noexcept { return alias_calls_; }
    // Calls f(at, bytes) for each alias.
    template <class F>
    void for_each_alias(F&& f) const {
        for (const auto& [at, record] : aliases_) f(at, record.bytes);
    }

    // Records [at, at + bytes) as unmapped (unmap_violation was nullptr) and counts one unmap call.
    // Allocates only when the new hole touches no other (host exhaustion then ends the program, as
    // in any deallocate).
    void mark_unmapped(std::uintptr_t at, std::size_t bytes) noexcept {
        return_hole(at, bytes);
        if (const auto alias = aliases_.find(at); alias != aliases_.end()) {
            for_each_allocation(alias->second.from, bytes, [this](std::uintptr_t start, std::size_t) { release_source(start); });
            aliases_.erase(alias);
            aliased_bytes_ -= bytes;
            ++unmap_calls_;
            return;
        }
        const auto first_whole = whole_.lower_bound(at), past_whole = whole_.lower_bound(at + bytes);
        std::size_t whole_bytes = 0;
        for (auto w = first_whole; w != past_whole; ++w) {
            whole_bytes += w->second;
            ++released_;
        }
        released_ += (bytes - whole_bytes) / granularity_;
        whole_.erase(first_whole, past_whole);
        mapped_bytes_ -= bytes;
        ++unmap_calls_;
    }

    // Whether the granule holding `address` is mapped; false outside the range.
    [[nodiscard]] bool is_mapped(std::uintptr_t address) const noexcept {
        if (address < base_ || address - base_ >= capacity_) return false;
        const auto hole = hole_containing(address);
        return hole == holes_by_address_.end();
    }

    // The blocks of the resource face: [at, at + bytes), mapped, handed to a user.
    void record_block(std::uintptr_t at, std::size_t bytes) {
        blocks_.emplace(at, bytes);
        block_bytes_ += bytes;
    }
    void forget_block(std::uintptr_t at) noexcept {
        const auto found = blocks_.find(at);
        if (found == blocks_.end()) return;
        block_bytes_ -= found->second;
        blocks_.erase(found);
    }
    // The bytes of the live block starting at `at`, or nothing.
    [[nodiscard]] std::optional<std::size_t> block_at(std::uintptr_t at) const noexcept {
        const auto found = blocks_.find(at);
        if (found == blocks_.end()) return std::nullopt;
        return found->second;
    }
    // Whether `address` lies inside a live block.
    [[nodiscard]] bool in_block(std::uintptr_t address) const noexcept {
        const auto after = blocks_.upper_bound(address);
        if (after == blocks_.begin()) return false;
        const auto block = std::prev(after);
        return address - block->first < block->second;
    }

    // Calls f(at, bytes) for each maximal run of mapped granules, in address order.
    template <class F>
    void for_each_mapped_run(F&& f) const {
        std::uintptr_t cursor = base_;
        for (const auto& [start, bytes] : holes_by_address_) {
            if (start > cursor) f(cursor, static_cast<std::size_t>(start - cursor));
            cursor = start + bytes;
        }
        if (cursor < base_ + capacity_) f(cursor, static_cast<std::size_t>(base_ + capacity_ - cursor));
    }

    // Holes are whole granules inside the range, disjoint, never adjacent (they coalesce), indexed
    // the same way by address and by size; with the mapped bytes they tile the range; every block
    // is mapped and blocks are disjoint; counters agree.
    void check_invariants() const {
        POOLKIT_VERIFY(holes_by_address_.size() == holes_by_size_.size(), "hole indexes disagree");
        std::uintptr_t previous_end = 0;
        bool first = true;
        std::size_t unmapped = 0;
        for (const auto& [start, bytes] : holes_by_address_) {
            POOLKIT_VERIFY(bytes != 0 && start % granularity_ == 0 && bytes % granularity_ == 0, "a hole is not whole granules");
            POOLKIT_VERIFY(start >= base_ && start - base_ <= capacity_ && bytes <= capacity_ - (start - base_),
                           "a hole lies outside the reservation");
            POOLKIT_VERIFY(first || start > previous_end, "holes touch or overlap");
            POOLKIT_VERIFY(holes_by_size_.count({bytes, start}) == 1, "a hole is missing from the size index");
            previous_end = start + bytes;
            first = false;
            unmapped += bytes;
        }
        POOLKIT_VERIFY(unmapped + mapped_bytes_ + aliased_bytes_ == capacity_,
                       "mapped, aliased and unmapped bytes do not tile the reservation");
        std::size_t alias_total = 0;
        std::map<std::uintptr_t, std::size_t> sources;
        for (const auto& [start, record] : aliases_) {
            POOLKIT_VERIFY(unmap_violation_ignoring_blocks(start, record.bytes) == nullptr, "an alias is not mapped");
            POOLKIT_VERIFY(unmap_violation_ignoring_blocks(record.from, record.bytes) == nullptr,
                           "an alias maps memory that is not mapped");
            POOLKIT_VERIFY(!cuts_whole(record.from) && !cuts_whole(record.from + record.bytes), "an alias cuts a physical allocation");
            for_each_allocation(record.from, record.bytes, [&sources](std::uintptr_t p, std::size_t) { ++sources[p]; });
            alias_total += record.bytes;
        }
        POOLKIT_VERIFY(alias_total == aliased_bytes_ && sources == aliased_, "alias counts drifted");
        POOLKIT_VERIFY(peak_mapped_bytes_ >= mapped_bytes_, "peak below current");
        std::size_t block_total = 0;
        std::uintptr_t block_end = 0;
        for (const auto& [start, bytes] : blocks_) {
            POOLKIT_VERIFY(start >= block_end, "blocks overlap");
            POOLKIT_VERIFY(unmap_violation_ignoring_blocks(start, bytes) == nullptr, "a block is not wholly mapped");
            block_end = start + bytes;
            block_total += bytes;
        }
        std::uintptr_t whole_end = 0;
        std::size_t whole_bytes = 0;
        for (const auto& [start, bytes] : whole_) {
            POOLKIT_VERIFY(start >= whole_end && bytes > granularity_, "mappings made whole overlap or are one granule");
            POOLKIT_VERIFY(unmap_violation_ignoring_blocks(start, bytes) == nullptr, "a mapping made whole is not mapped");
            whole_end = start + bytes;
            whole_bytes += bytes;
        }
        POOLKIT_VERIFY(created_ - released_ == whole_.size() + (mapped_bytes_ - whole_bytes) / granularity_,
                       "physical allocations created and released do not add up to what is mapped");
        POOLKIT_VERIFY(block_total == block_bytes_, "block byte count drifted");
        POOLKIT_VERIFY(block_bytes_ <= mapped_bytes_, "blocks hold more than is mapped");
    }

private:
    // [at, at + bytes) becomes a hole again, coalescing with the holes beside it.
    void return_hole(std::uintptr_t at, std::size_t bytes) noexcept {
        auto after = holes_by_address_.lower_bound(at);
        const bool joins_after = after != holes_by_address_.end() && after->first == at + bytes;
        const bool joins_before = after != holes_by_address_.begin() && std::prev(after)->first + std::prev(after)->second == at;
        if (joins_before) {
            auto before = std::prev(after);
            std::size_t merged = before->second + bytes;
            if (joins_after) {
                merged += after->second;
                holes_by_size_.erase({after->second, after->first});
                holes_by_address_.erase(after);
            }
            resize_hole(before, merged);
        } else if (joins_after) {
            auto by_size = holes_by_size_.extract({after->second, after->first});
            auto by_address = holes_by_address_.extract(after);
            by_address.key() = at;
            by_address.mapped() += bytes;
            by_size.value() = {by_address.mapped(), at};
            holes_by_address_.insert(std::move(by_address));
            holes_by_size_.insert(std::move(by_size));
        } else {
            insert_hole(at, bytes);
        }
    }

    // mark_mapped's bookkeeping: the hole shrinks or splits, and one map call is counted.
    void record_mapped(std::uintptr_t at, std::size_t bytes) {
        take_hole(at, bytes);
        mapped_bytes_ += bytes;
        if (mapped_bytes_ > peak_mapped_bytes_) peak_mapped_bytes_ = mapped_bytes_;
        ++map_calls_;
    }

    // [at, at + bytes), inside one hole, stops being a hole: the hole shrinks or splits. Strong
    // guarantee.
    void take_hole(std::uintptr_t at, std::size_t bytes) {
        const auto hole = hole_containing(at);
        POOLKIT_ASSERT(hole != holes_by_address_.end() && at + bytes <= hole->first + hole->second,
                       "mark_mapped of granules already mapped");
        const std::uintptr_t hole_start = hole->first;
        const std::size_t hole_bytes = hole->second;
        const std::uintptr_t end = at + bytes;
        const std::size_t right = hole_start + hole_bytes - end;
        if (right != 0) insert_hole(end, right);  // the only step that allocates, and it comes first
        if (at > hole_start) {
            resize_hole(hole, at - hole_start);
        } else {
            holes_by_size_.erase({hole_bytes, hole_start});
            holes_by_address_.erase(hole);
        }
    }

    struct alias_record {
        std::uintptr_t from;
        std::size_t bytes;
    };

    // The alias that overlaps [at, at + bytes), or end(). Aliases never overlap each other.
    [[nodiscard]] std::map<std::uintptr_t, alias_record>::const_iterator alias_overlapping(std::uintptr_t at,
                                                                                           std::size_t bytes) const noexcept {
        auto after = aliases_.lower_bound(at + bytes);
        if (after == aliases_.begin()) return aliases_.end();
        const auto alias = std::prev(after);
        return alias->first + alias->second.bytes > at ? alias : aliases_.end();
    }

    // One alias less of the physical allocation that starts at `start`.
    void release_source(std::uintptr_t start) noexcept {
        const auto found = aliased_.find(start);
        if (found != aliased_.end() && --found->second == 0) aliased_.erase(found);
    }

    using hole_iterator = std::map<std::uintptr_t, std::size_t>::iterator;
    using const_hole_iterator = std::map<std::uintptr_t, std::size_t>::const_iterator;

    [[nodiscard]] bool in_range(std::uintptr_t at, std::size_t bytes) const noexcept {
        return bytes != 0 && at % granularity_ == 0 && bytes % granularity_ == 0 && at >= base_ && at - base_ <= capacity_ &&
               bytes <= capacity_ - (at - base_);
    }

    void check_in_range(std::uintptr_t at, std::size_t bytes, const char* source, const char* call) const {
        const auto fail = [&](const char* why) {
            throw std::invalid_argument(std::string("poolkit: ") + source + "::" + call + " of " + describe(at, bytes) + ": " + why);
        };
        if (at % granularity_ != 0 || bytes % granularity_ != 0) {
            fail(("address and size must be multiples of the granularity, " + std::to_string(granularity_)).c_str());
        }
        if (!in_range(at, bytes)) fail("the range is not inside the reservation");
    }

    [[nodiscard]] std::string describe(std::uintptr_t at, std::size_t bytes) const {
        return std::to_string(bytes) + " bytes at offset " + (at >= base_ ? std::to_string(at - base_) : "-" + std::to_string(base_ - at)) +
               " of the reservation";
    }

    [[nodiscard]] const char* unmap_violation_ignoring_blocks(std::uintptr_t at, std::size_t bytes) const noexcept {
        if (!in_range(at, bytes)) return "outside";
        const auto after = holes_by_address_.lower_bound(at);
        if (after != holes_by_address_.end() && after->first < at + bytes) return "unmapped";
        if (after != holes_by_address_.begin() && std::prev(after)->first + std::prev(after)->second > at) return "unmapped";
        return nullptr;
    }

    // Whether a mapping made whole starts before `boundary` and ends after it.
    [[nodiscard]] bool cuts_whole(std::uintptr_t boundary) const noexcept {
        const auto after = whole_.lower_bound(boundary);
        if (after == whole_.begin()) return false;
        const auto mapping = std::prev(after);
        return mapping->first + mapping->second > boundary;
    }

    // The hole that holds `address`, or end().
    [[nodiscard]] const_hole_iterator hole_containing(std::uintptr_t address) const noexcept {
        auto after = holes_by_address_.upper_bound(address);
        if (after == holes_by_address_.begin()) return holes_by_address_.end();
        const auto hole = std::prev(after);
        return address - hole->first < hole->second ? hole : holes_by_address_.end();
    }
    [[nodiscard]] hole_iterator hole_containing(std::uintptr_t address) noexcept {
        const auto found = std::as_const(*this).hole_containing(address);
        return holes_by_address_.erase(found, found);  // const_iterator to iterator
    }

    // Strong guarantee: if the second index throws, the first is undone.
    void insert_hole(std::uintptr_t start, std::size_t bytes) {
        const auto inserted = holes_by_address_.emplace(start, bytes).first;
        try {
            holes_by_size_.emplace(bytes, start);
        } catch (...) {
            holes_by_address_.erase(inserted);
            throw;
        }
    }

    // Changes a hole's size in place; reuses the size index's node, so it never allocates.
    void resize_hole(hole_iterator hole, std::size_t bytes) noexcept {
        auto node = holes_by_size_.extract({hole->second, hole->first});
        node.value() = {bytes, hole->first};
        holes_by_size_.insert(std::move(node));
        hole->second = bytes;
    }

    std::uintptr_t base_;
    std::size_t capacity_;
    std::size_t granularity_;
    void unclaimed_insert(std::uintptr_t at, std::size_t bytes) {
        unclaimed_by_size_.insert({bytes, at});
        try {
            unclaimed_.emplace(at, bytes);
        } catch (...) {
            unclaimed_by_size_.erase({bytes, at});
            throw;
        }
    }

    std::uintptr_t claim_floor_ = base_ + capacity_;  // [claim_floor_, top) is claimed or given back
    std::map<std::uintptr_t, std::size_t> unclaimed_;  // spans above the floor given back: start -> bytes
    std::set<std::pair<std::size_t, std::uintptr_t>> unclaimed_by_size_;  // (bytes, start): best fit
    std::map<std::uintptr_t, std::size_t> holes_by_address_;  // start -> bytes, unmapped
    std::set<std::pair<std::size_t, std::uintptr_t>> holes_by_size_;  // (bytes, start): best fit
    std::map<std::uintptr_t, std::size_t> blocks_;  // allocate's blocks: start -> bytes
    std::map<std::uintptr_t, std::size_t> whole_;  // mappings made whole: start -> bytes
    std::map<std::uintptr_t, alias_record> aliases_;  // alias start -> the memory it maps
    std::map<std::uintptr_t, std::size_t> aliased_;  // start of a physical allocation -> aliases of it
    std::size_t aliased_bytes_ = 0;  // bytes of address space the aliases take
    std::size_t alias_calls_ = 0;  // mark_aliased calls
    std::size_t block_bytes_ = 0;
    std::size_t mapped_bytes_ = 0;  // capacity_ minus the holes
    std::size_t peak_mapped_bytes_ = 0;  // most mapped_bytes_ ever was
    std::size_t map_calls_ = 0;  // mark_mapped calls
    std::size_t unmap_calls_ = 0;  // mark_unmapped calls
    std::size_t created_ = 0;  // physical allocations mapped
    std::size_t released_ = 0;  // physical allocations unmapped
};

}  // namespace detail
}  // namespace poolkit
