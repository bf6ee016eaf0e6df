// mapped_walk(r, memory): the walk of a strategy over virtual memory (expandable) cut to the
// granules `memory` has mapped, so that snapshot() and fragmentation() see device memory, not
// address space.
//
// Such a strategy's chunks are spans of address space, mostly unmapped. In this walk each maximal
// run of mapped granules of a chunk is a chunk of its own (PyTorch's expandable segments show the
// same), and its blocks are those of the span clipped to it: a live block whole (every granule it
// touches is mapped), a free block as the pieces of it that are mapped. Unmapped address space is
// left out, so the chunks add up to what is mapped for the blocks. O(blocks + granules of free
// blocks) is_mapped() calls; the pieces are kept on the host heap until each run's length is known.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/virtual_memory.hpp>
#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace poolkit {

template <walkable R, virtual_memory VirtualMemory>
class mapped_walk {
public:
    mapped_walk(const R& r, const VirtualMemory& memory) noexcept : r_(&r), memory_(&memory) {}

    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        std::vector<std::pair<chunk_view, block_view>> pieces;
        r_->for_each_block([&](const chunk_view& chunk, const block_view& block) {
            if (block.live || block.pending_free) {
                pieces.emplace_back(chunk, block);
                return;
            }
            for_each_mapped_piece(block, [&](std::uintptr_t address, std::size_t bytes) {
                block_view piece = block;
                piece.address = address;
                piece.bytes = bytes;
                pieces.emplace_back(chunk, piece);
            });
        });
        // A run is a stretch of pieces of one chunk, each starting where the one before ends.
        for (std::size_t first = 0; first < pieces.size();) {
            std::size_t last = first + 1;
            while (last < pieces.size() && pieces[last].first.address == pieces[first].first.address &&
                   pieces[last].second.address == pieces[last - 1].second.address + pieces[last - 1].second.bytes) {
                ++last;
            }
            chunk_view run = pieces[first].first;
            run.address = pieces[first].second.address;
            run.bytes = pieces[last - 1].second.address + pieces[last - 1].second.bytes - run.address;
            for (std::size_t i = first; i < last; ++i) visit(run, pieces[i].second);
            first = last;
        }
    }

private:
    // Calls piece(address, bytes) for each maximal mapped stretch of `block`, in address order.
    template <class Piece>
    void for_each_mapped_piece(const block_view& block, Piece&& piece) const {
        const std::size_t granule = memory_->granularity();
        const std::uintptr_t end = block.address + block.bytes;
        std::uintptr_t start = 0;
        bool in_piece = false;
        for (std::uintptr_t at = align_down(block.address, granule); at < end; at += granule) {
            const std::uintptr_t from = std::max<std::uintptr_t>(at, block.address);
            if (memory_->is_mapped(reinterpret_cast<const void*>(at))) {
                if (!in_piece) start = from;
                in_piece = true;
            } else if (in_piece) {
                piece(start, static_cast<std::size_t>(from - start));
                in_piece = false;
            }
        }
        if (in_piece) piece(start, static_cast<std::size_t>(end - start));
    }

    const R* r_;
    const VirtualMemory* memory_;
};

}  // namespace poolkit
