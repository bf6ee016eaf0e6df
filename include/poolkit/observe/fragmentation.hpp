// fragmentation(r): how well a walkable strategy uses what it reserved.
//
// reserved / live (1.0: nothing cached or wasted), the largest free block over all free bytes
// (1.0: the free bytes form one block, so any request up to them fits; small: they are scattered),
// and the count of free blocks. O(blocks); a const walk of the strategy (walk.hpp).
#pragma once

#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace poolkit {

struct fragmentation_figures {
    std::size_t chunks = 0;
    std::size_t reserved_bytes = 0;  // sum of chunk sizes
    std::size_t live_bytes = 0;  // sum of live block sizes
    std::size_t live_blocks = 0;
    std::size_t free_bytes = 0;  // sum of free block sizes (pending frees included)
    std::size_t free_blocks = 0;
    std::size_t largest_free_block = 0;
    // Of those, in private pools (CUDA graphs' memory, chunk_view::pool): how many pools, their
    // chunks' bytes and their live blocks' bytes.
    std::size_t private_pools = 0;
    std::size_t private_reserved_bytes = 0;
    std::size_t private_live_bytes = 0;

    // Reserved over live; 0 when nothing is live.
    [[nodiscard]] double reserved_over_live() const noexcept {
        return live_bytes == 0 ? 0.0 : static_cast<double>(reserved_bytes) / static_cast<double>(live_bytes);
    }
    // Largest free block over all free bytes; 1 when nothing is free.
    [[nodiscard]] double largest_free_over_free() const noexcept {
        return free_bytes == 0 ? 1.0 : static_cast<double>(largest_free_block) / static_cast<double>(free_bytes);
    }
};

template <walkable R>
[[nodiscard]] fragmentation_figures fragmentation(const R& r) {
    fragmentation_figures figures;
    std::uintptr_t last_chunk = 0;
    bool any_chunk = false;
    std::vector<std::uint64_t> pools;  // private ones seen
    r.for_each_block([&](const chunk_view& chunk, const block_view& block) {
        if (!any_chunk || chunk.address != last_chunk) {
            ++figures.chunks;
            figures.reserved_bytes += chunk.bytes;
            last_chunk = chunk.address;
            any_chunk = true;
            if (chunk.pool != 0) {
                figures.private_reserved_bytes += chunk.bytes;
                if (std::find(pools.begin(), pools.end(), chunk.pool) == pools.end()) pools.push_back(chunk.pool);
            }
        }
        if (block.live) {
            figures.live_bytes += block.bytes;
            if (chunk.pool != 0) figures.private_live_bytes += block.bytes;
            ++figures.live_blocks;
        } else {
            figures.free_bytes += block.bytes;
            ++figures.free_blocks;
            figures.largest_free_block = std::max(figures.largest_free_block, block.bytes);
        }
    });
    figures.private_pools = pools.size();
    return figures;
}

}  // namespace poolkit
