// Blocks that tile a range in an address-ordered intrusive list: best_fit's chunks, expandable's
// spans. Both split a free block around a placement and merge a freed block with its free
// neighbours the same way; what differs is their indexes of free blocks, which they pass in as
// one object (`Indexes`, ordered_index below for one ordered container). A block has address,
// bytes, requested, free and owner; a range has address, bytes and its blocks; `nodes` is the
// node_pool the blocks' nodes come from. The walk, the owns() query and the invariants that every
// tiling holds are here too.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace poolkit::detail {

// Whether `index` (an ordered intrusive container) runs strictly increasing by `less`: what
// check_invariants asks of a size index that take_place edits without a search.
template <class Index, class Less>
bool in_strict_order(const Index& index, Less less) noexcept {
    return std::adjacent_find(index.begin(), index.end(), [&](const auto& a, const auto& b) { return !less(a, b); }) == index.end();
}

// Puts `with` in `old`'s place in `index` (an ordered intrusive container by `less`), `old` out,
// where that keeps the index in order: what erasing `old` and inserting `with` would leave,
// without a search or a rebalancing. `with` may be `old` itself, its key changed since it was
// filed. False, and nothing done, where a neighbour of `old` in the index lies between the keys.
template <class Index, class Block, class Less>
bool take_place(Index& index, Block& old, Block& with, Less less) noexcept {
    const auto at = index.iterator_to(old);
    if (at != index.begin() && !less(*std::prev(at), with)) return false;
    if (const auto next = std::next(at); next != index.end() && !less(with, *next)) return false;
    if (&old != &with) index.replace_node(at, with);
    return true;
}

// What split_around and coalesce do to a tiling's indexes of free blocks (`Indexes`): forget(b)
// takes free block b out, file(b) puts it in, replace(old, with) does both where `with` can take
// `old`'s place (take_place), else returns false having done nothing. This one is for a tiling
// whose free blocks sit in one ordered intrusive container by `Less` (best_fit's size index).
template <class Index, class Less>
struct ordered_index {
    Index& index;
    template <class Block>
    void forget(Block& b) noexcept {
        index.erase(index.iterator_to(b));
    }
    template <class Block>
    void file(Block& b) noexcept {
        index.insert(b);
    }
    template <class Block>
    bool replace(Block& old, Block& with) noexcept {
        return take_place(index, old, with, Less{});
    }
};

// Splits free block `b` of `blocks` around [start, start + rounded), which lies inside it: the
// space before becomes a free block; the space after becomes one when it is at least
// `min_remainder` bytes (else it stays in `b`). `b` leaves the indexes (forget) and is left holding
// the placement, for the caller to make live; the new free blocks are filed, the space after by
// taking `b`'s place where it alone is split off and can (replace). Strong guarantee: the nodes
// are made before anything changes.
template <class List, class Block, class Nodes, class Indexes>
void split_around(List& blocks, Block& b, std::uintptr_t start, std::size_t rounded, std::size_t min_remainder, Nodes& nodes,
                  Indexes&& indexes) {
    const std::size_t padding = start - b.address;
    const std::size_t remainder = b.bytes - padding - rounded;
    Block* front = padding > 0 ? nodes.make(b.address, padding, b.owner) : nullptr;
    Block* back = nullptr;
    if (remainder > 0 && remainder >= min_remainder) {
        try {
            back = nodes.make(start + rounded, remainder, b.owner);
        } catch (...) {
            if (front) nodes.destroy(front);
            throw;
        }
    }
    const bool replaced = front == nullptr && back != nullptr && indexes.replace(b, *back);
    if (!replaced) indexes.forget(b);
    if (front) {
        blocks.insert(blocks.iterator_to(b), *front);
        indexes.file(*front);
    }
    if (back) {
        blocks.insert(std::next(blocks.iterator_to(b)), *back);
        if (!replaced) indexes.file(*back);
    }
    b.address = start;
    b.bytes -= padding + (back ? remainder : 0);
}

// Takes live block `found` (at `pointer`) out of `live` for a deallocate(pointer, bytes,
// alignment) of blocks rounded to `rounding`, and marks it free. Asserts that bytes and alignment
// are those it was allocated with; with assertions off, the recorded size holds whatever `bytes`
// says.
template <class Live, class Block>
Block* take_live_block(Live& live, Block& found, void* pointer, std::size_t bytes, std::size_t alignment, std::size_t rounding) noexcept {
    POOLKIT_ASSERT(checked_align_up(bytes, rounding) == align_up(found.requested, rounding),
                   "deallocate with a size other than the one allocated");
    POOLKIT_ASSERT(is_aligned(pointer, alignment), "deallocate with an alignment the block does not have");
    static_cast<void>(pointer);
    static_cast<void>(bytes);
    static_cast<void>(alignment);
    static_cast<void>(rounding);
    live.erase(live.iterator_to(found));
    found.free = true;
    return &found;
}

// As take_live_block, the block found in `live` (a set searched by address with ByAddress).
// Asserts that `live` holds it (else says `who` did not hand it out); with assertions off, a
// pointer it does not know gives nullptr.
template <class ByAddress, class Live>
auto* take_live(Live& live, void* pointer, std::size_t bytes, std::size_t alignment, std::size_t rounding, const char* who) noexcept {
    const auto found = live.find(reinterpret_cast<std::uintptr_t>(pointer), ByAddress{});
    POOLKIT_ASSERT(found != live.end(), who);
    static_cast<void>(who);
    if (found == live.end()) return static_cast<decltype(&*found)>(nullptr);
    return take_live_block(live, *found, pointer, bytes, alignment, rounding);
}

// Merges `freed` (marked free, in no index) with the free blocks beside it in `blocks`, returning
// their nodes, and files the block that now holds the merged range — `freed` or its lower
// neighbour — which it returns. The merged block takes the place of the neighbour it grew from
// where it can (replace); otherwise the neighbours leave the indexes (forget) and the merged
// block is filed (file). `Indexes` as split_around's.
template <class List, class Block, class Nodes, class Indexes>
Block& coalesce(List& blocks, Block& freed, Nodes& nodes, Indexes&& indexes) noexcept {
    const auto position = blocks.iterator_to(freed);
    Block* absorbed = nullptr;
    if (const auto next = std::next(position); next != blocks.end() && next->free) {
        absorbed = &*next;
        blocks.erase(next);
        freed.bytes += absorbed->bytes;
    }
    Block* merged = &freed;
    Block* place = absorbed;  // still filed, under its old key: where the merged block may go
    if (position != blocks.begin()) {
        if (const auto previous = std::prev(position); previous->free) {
            merged = &*previous;
            merged->bytes += freed.bytes;
            blocks.erase(position);
            nodes.destroy(&freed);
            if (absorbed != nullptr) {
                indexes.forget(*absorbed);
                nodes.destroy(absorbed);
                absorbed = nullptr;
            }
            place = merged;
        }
    }
    if (place == nullptr || !indexes.replace(*place, *merged)) {
        if (place != nullptr) indexes.forget(*place);
        indexes.file(*merged);
    }
    if (absorbed != nullptr) nodes.destroy(absorbed);
    return *merged;
}

// Whether `pointer` lies inside a block of `live` (a set searched by address with ByAddress). O(log n).
template <class ByAddress, class Live>
bool inside_live(const Live& live, const void* pointer) noexcept {
    const auto address = reinterpret_cast<std::uintptr_t>(pointer);
    const auto after = live.upper_bound(address, ByAddress{});
    if (after == live.begin()) return false;
    const auto& b = *std::prev(after);
    return address - b.address < b.bytes;
}

// The walk of core/walk.hpp over one range: its blocks in address order, with the bytes asked for
// when live.
template <class Range, class Visitor>
void visit_tiling(const Range& range, Visitor& visit) {
    chunk_view chunk_seen;
    chunk_seen.address = range.address;
    chunk_seen.bytes = range.bytes;
    for (const auto& b : range.blocks) {
        block_view seen;
        seen.address = b.address;
        seen.bytes = b.bytes;
        seen.requested_bytes = b.free ? 0 : b.requested;
        seen.live = !b.free;
        visit(chunk_seen, seen);
    }
}

// What every range holds, checked with POOLKIT_VERIFY: its blocks, linked to it, tile it in address
// order, each a positive multiple of `rounding`; no two free blocks touch; a live block is the one
// `live` finds at its address (searched with ByAddress) and holds what was asked. Then
// check_free(b) or check_live(b) checks a block against its owner's own indexes.
template <class ByAddress, class Range, class Live, class CheckFree, class CheckLive>
void verify_tiling(const Range& range, std::size_t rounding, const Live& live, CheckFree&& check_free, CheckLive&& check_live) {
    POOLKIT_VERIFY(!range.blocks.empty(), "a range without blocks");
    std::uintptr_t expected = range.address;
    bool previous_free = false;
    for (const auto& b : range.blocks) {
        POOLKIT_VERIFY(b.owner == &range, "a block linked into another range");
        POOLKIT_VERIFY(b.address == expected, "blocks do not tile their range");
        POOLKIT_VERIFY(b.bytes > 0 && b.bytes % rounding == 0, "a block size off the rounding");
        POOLKIT_VERIFY(!(b.free && previous_free), "two free neighbours not coalesced");
        if (b.free) {
            check_free(b);
        } else {
            const auto found = live.find(b.address, ByAddress{});
            POOLKIT_VERIFY(found != live.end() && &*found == &b, "a live block missing from the live index");
            POOLKIT_VERIFY(b.requested > 0 && b.requested <= b.bytes, "a live block smaller than asked");
            check_live(b);
        }
        previous_free = b.free;
        expected += b.bytes;
    }
    POOLKIT_VERIFY(expected == range.address + range.bytes, "blocks do not cover their range");
}

}  // namespace poolkit::detail
