// What expandable::check_invariants verifies (strategy/expandable.hpp), kept apart from the pool's
// allocation paths: it reads the pool's parts (a friend) and changes nothing.
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/strategy/detail/expandable_parts.hpp>
#include <poolkit/strategy/detail/tiling.hpp>

#include <cstddef>

namespace poolkit::detail::expandable_parts {

struct pool_invariants {
    // Blocks tile their span; no two free blocks touch; each block is in the index its state
    // says; every granule a live block touches is mapped; each span's bits hold (span's own
    // check); each free block's cached count is the mapped granules wholly inside it, and it is in
    // the cached list exactly when that is not 0; the size indexes run in strict order; the
    // recently carved are live; the counts add up.
    template <class Pool>
    static void verify(const Pool& p) {
        std::size_t live = 0, live_count = 0, free_count = 0, cached = 0, mapped = 0, cached_listed = 0;
        for (const auto& s : p.spans_) {
            detail::verify_tiling<by_address>(
                *s, p.options_.rounding, p.live_,
                [&](const block& b) {
                    const auto& index = s->small ? p.small_free_ : p.large_free_;
                    POOLKIT_VERIFY(index.find(b) != index.end(), "a free block missing from its size index");
                    const auto [first, last] = p.grid_.releasable(b);
                    POOLKIT_VERIFY(b.cached == s->count(first, last, true), "a free block's cached count drifted");
                    cached += b.cached;
                    ++free_count;
                },
                [&](const block& b) {
                    const auto [first, last] = p.grid_.touched(b);
                    POOLKIT_VERIFY(s->count(first, last, false) == 0, "a live block on an unmapped granule");
                    live += b.bytes;
                    ++live_count;
                });
            s->check_invariants();
            mapped += s->mapped_count;
        }
        for (const block& b : p.mapping_.cached()) {
            POOLKIT_VERIFY(b.free && b.cached > 0, "the cached list holds a block with nothing cached");
            ++cached_listed;
        }
        std::size_t with_cache = 0;
        for (const auto& s : p.spans_) {
            for (const block& b : s->blocks) with_cache += b.free && b.cached > 0;
        }
        POOLKIT_VERIFY(cached_listed == with_cache, "a free block with cached granules is not in the cached list");
        POOLKIT_VERIFY(free_count == p.small_free_.size() + p.large_free_.size(), "the size indexes hold blocks that are not free");
        POOLKIT_VERIFY(detail::in_strict_order(p.small_free_, by_size{}) && detail::in_strict_order(p.large_free_, by_size{}),
                       "a size index out of order");
        POOLKIT_VERIFY(live_count == p.live_.size(), "the live index holds blocks that are not live");
        p.recent_live_.for_each([&](const block& b) {
            const auto found = p.live_.find(b.address, by_address{});
            POOLKIT_VERIFY(!b.free && found != p.live_.end() && &*found == &b, "a recent live block is not live");
        });
        p.stitches_.check_invariants(p.live_);
        POOLKIT_VERIFY(live + p.stitches_.live_bytes() == p.live_bytes_ + p.stitches_.lent_bytes(), "live byte count drifted");
        POOLKIT_VERIFY(cached == p.mapping_.cached_granules(), "cached granule count drifted");
        POOLKIT_VERIFY(mapped == p.mapping_.mapped_granules(), "mapped granule count drifted");
        POOLKIT_VERIFY(p.blocks_.in_use() == live_count + free_count, "bookkeeping nodes leaked");
    }
};

}  // namespace poolkit::detail::expandable_parts
