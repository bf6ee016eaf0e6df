// walk_pending(pool, pending, visit, dress): the walk (core/walk.hpp) of a pool whose owner holds
// some of the blocks the pool counts as live as freed, not given back yet (a stream's front, a
// batch behind events, a graph's block): those are shown pending_free, with their stream.
//
// `pending`: (address, stream) of each such block, sorted (stream 0: none known). `dress(chunk)`
// returns the chunk view to show (the owner's pool id and stream, say). O(blocks log pending).
#pragma once

#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

namespace poolkit::detail {

using pending_block = std::pair<std::uintptr_t, std::uintptr_t>;  // address, stream

template <class Pool, class Visitor, class Dress = std::identity>
void walk_pending(const Pool& pool, std::span<const pending_block> pending, Visitor&& visit, Dress&& dress = {}) {
    pool.for_each_block([&](const chunk_view& chunk, const block_view& block) {
        block_view seen = block;
        const auto found = std::lower_bound(pending.begin(), pending.end(), pending_block{block.address, 0});
        if (seen.live && found != pending.end() && found->first == block.address) {
            seen.live = false;
            seen.pending_free = true;
            seen.stream = found->second;
        }
        visit(static_cast<const chunk_view&>(dress(chunk)), static_cast<const block_view&>(seen));
    });
}

}  // namespace poolkit::detail
