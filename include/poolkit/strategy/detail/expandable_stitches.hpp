// The stitched blocks of expandable (strategy/expandable.hpp): GMLake's stitching over CUDA
// virtual memory. A large request that would map new memory while enough of the pool's mapped
// memory lies free in pieces too small for it is served from those pieces instead: a range of
// address space of its own aliases them (aliasing_virtual_memory's alias), and the pieces are
// lent to it, carved as live blocks of their spans, until it is freed. A freed stitch keeps its
// aliases, so that the next request of about its size whose pieces are all free again takes it
// with no driver call; a program that repeats its shapes stitches in its first step only.
//
// This header holds the stitches and their side of the memory: which free allocations make one,
// claiming and aliasing its range, lending and taking it back with its counts, and giving it up.
// The pool decides when to stitch and carves the pieces out of its spans and back. Each piece is
// one physical allocation of a span, whole: granules [first, last), starting an allocation at
// first and ending one at last. Not thread-safe.
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/strategy/detail/expandable_parts.hpp>
#include <poolkit/strategy/detail/expandable_search.hpp>
#include <poolkit/strategy/detail/intrusive.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <new>
#include <stdexcept>
#include <utility>
#include <vector>

namespace poolkit {

namespace detail::expandable_parts {

struct piece {
    span* owner;
    std::size_t first;
    std::size_t last;
};

// A range of claimed address space whose pieces alias physical allocations of the pool's spans,
// in order. requested == 0: free (its pieces back in the pool, its aliases kept).
struct stitch {
    std::size_t bytes = 0;
    std::size_t requested = 0;
    std::vector<piece> pieces;
};

// The free block that holds piece `p` whole, or nullptr. O(log n): the block after the last live
// block below it in its span (free blocks never touch).
[[nodiscard]] inline block* free_block_over(live_blocks& live, const grid& g, const piece& p) noexcept {
    span& s = *p.owner;
    const std::uintptr_t first = g.address(s, p.first), last = g.address(s, p.last);
    block* candidate = &s.blocks.front();
    if (const auto after = live.upper_bound(first, by_address{}); after != live.begin()) {
        block& below = *std::prev(after);
        if (below.owner == &s) {
            if (below.end() > first) return nullptr;
            const auto next = std::next(s.blocks.iterator_to(below));
            if (next == s.blocks.end()) return nullptr;
            candidate = &*next;
        }
    }
    return candidate->free && candidate->address <= first && last <= candidate->end() ? candidate : nullptr;
}

// A count the pool keeps of stitches it made where a placement maps little (expandable::stitch):
// at most `first` between two mappings; each time that many were made the next is refused, and
// the bound halves, so that a pool whose holes shift from step to step stops making them.
class halving_bound {
public:
    explicit constexpr halving_bound(std::size_t first) noexcept : bound_(first) {}
    // Whether one more may be made now (then counted); at the bound, the bound halves.
    [[nodiscard]] bool take() noexcept {
        if (made_ < bound_) {
            ++made_;
            return true;
        }
        if (made_ == bound_) {  // reached: halved once until the next reset()
            bound_ /= 2;
            made_ = std::numeric_limits<std::size_t>::max();
        }
        return false;
    }
    // Whether take() would refuse without halving (halved already since the last reset()).
    [[nodiscard]] bool spent() const noexcept { return made_ > bound_; }
    // The pool mapped a placement: the count starts again under the bound as it is now.
    void reset() noexcept { made_ = 0; }

private:
    std::size_t bound_;
    std::size_t made_ = 0;
};

template <class Memory>
class stitching {
public:
    // `g`, the pool's granules, outlives this (the pool owns both). At most `most` stitches are
    // kept (expandable_options::max_stitches): each holds address space and aliases until
    // release(), or until new ones need their room (give_up_unusable).
    stitching(const grid& g, std::size_t most) noexcept : grid_(&g), most_(most) {}
    stitching(const stitching&) = delete;
    stitching& operator=(const stitching&) = delete;

    [[nodiscard]] std::size_t size() const noexcept { return all_.size(); }
    [[nodiscard]] bool full() const noexcept { return all_.size() >= most_; }
    [[nodiscard]] std::size_t live() const noexcept { return live_; }
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
    // The bytes and the pieces the live stitches hold (lent: live blocks of the pool's spans).
    [[nodiscard]] std::size_t lent_bytes() const noexcept { return lent_bytes_; }
    [[nodiscard]] std::size_t lent_pieces() const noexcept { return lent_pieces_; }
    [[nodiscard]] std::size_t alias_calls() const noexcept { return alias_calls_; }
    [[nodiscard]] std::size_t unalias_calls() const noexcept { return unalias_calls_; }

    // The live stitch that starts at `address`, or nullptr. O(log n).
    [[nodiscard]] stitch* live_at(std::uintptr_t address) noexcept {
        if (live_ == 0) return nullptr;
        const auto found = all_.find(address);
        return found != all_.end() && found->second.requested != 0 ? &found->second : nullptr;
    }
    // Whether `address` lies inside a live stitch.
    [[nodiscard]] bool inside_live(std::uintptr_t address) const noexcept {
        if (live_ == 0) return false;
        const auto after = all_.upper_bound(address);
        if (after == all_.begin()) return false;
        const auto& [start, s] = *std::prev(after);
        return s.requested != 0 && address - start < s.requested;
    }
    template <class F>
    void for_each(F&& f) const {
        for (const auto& [address, s] : all_) f(address, s);
    }

    // Free whole allocations of large spans among `cached` (free blocks with a cache, oldest
    // freed first), in that order, until they hold `want` bytes; `total` says what they hold.
    [[nodiscard]] std::vector<piece> free_pieces(const cached_list& cached, std::size_t want, std::size_t& total) const {
        std::vector<piece> pieces;
        total = 0;
        for (const block& b : cached) {
            if (total >= want) break;
            if (b.owner->small) continue;
            span& s = *b.owner;
            const auto [from, to] = grid_->releasable(b);
            s.for_each_run(from, to, true, [&](std::size_t first, std::size_t last) {
                for (std::size_t g = first; g < last && total < want;) {
                    const std::size_t end = span::first_of(g + 1, last, [&s](std::size_t w) { return s.starts[w]; });
                    pieces.push_back({&s, g, end});
                    total += (end - g) * grid_->bytes;
                    g = end;
                }
            });
        }
        return pieces;
    }

    // The free stitch of `want` bytes up to a quarter more, smallest first, whose pieces are all
    // `usable`: {its address, it}, or {0, nullptr}.
    template <class Usable>
    [[nodiscard]] std::pair<std::uintptr_t, stitch*> free_fitting(std::size_t want, Usable&& usable) {
        std::pair<std::uintptr_t, stitch*> best{0, nullptr};
        for (auto& [address, s] : all_) {
            if (s.requested != 0 || s.bytes < want || s.bytes - want > want / 4) continue;
            if (best.second != nullptr && s.bytes >= best.second->bytes) continue;
            bool all = true;
            for (const piece& p : s.pieces) all = all && usable(p);
            if (all) best = {address, &s};
        }
        return best;
    }

    // A new free stitch of `pieces` (`total` bytes): address space claimed, the pieces aliased
    // there, a run of adjacent pieces at a time. {0, nullptr}, with nothing changed, where the
    // address space, the driver (cuda_error) or the host refuses.
    std::pair<std::uintptr_t, stitch*> make(Memory& m, std::vector<piece> pieces, std::size_t total) {
        std::byte* at = nullptr;
        try {
            at = m.claim(total);
        } catch (const std::bad_alloc&) {
            return {0, nullptr};
        }
        const auto address = reinterpret_cast<std::uintptr_t>(at);
        stitch made{total, 0, std::move(pieces)};
        std::size_t aliased = 0;
        try {
            for_each_alias_run(made.pieces, [&](std::uintptr_t from, std::size_t bytes) {
                m.alias(at + aliased, reinterpret_cast<const void*>(from), bytes);
                aliased += bytes;
                ++alias_calls_;
            });
            return {address, &all_.emplace(address, std::move(made)).first->second};
        } catch (const std::bad_alloc&) {
        } catch (const std::runtime_error&) {  // cuda_error: the pool maps as it would have
        }
        unalias(m, address, made.pieces, aliased);  // never used: no wait
        m.unclaim(at, total);
        return {0, nullptr};
    }

    // Gives up the free stitch at `address`, never lent (no wait: nothing used it).
    void undo(Memory& m, std::uintptr_t address) noexcept {
        const auto found = all_.find(address);
        POOLKIT_ASSERT(found != all_.end() && found->second.requested == 0, "undo of a stitch that is live or unknown");
        give_up(m, found);
    }

    // Gives up every free stitch with a piece that is not `usable` now, after one synchronize(),
    // to make room for new ones: how many. A pool whose layout shifts (frees that wait on other
    // streams, caches that grow) leaves stitches whose pieces other blocks took, and at `most` it
    // would map new memory for every request they cannot serve. Those whose pieces are all free
    // could serve a request at once: they stay. One wait for all, not one a stitch: a program that
    // keeps needing new stitches waits once in every few dozen. 0 where the wait fails.
    template <class Usable>
    std::size_t give_up_unusable(Memory& m, Usable&& usable) noexcept {
        const auto unusable = [&](const stitch& s) { return s.requested == 0 && !std::all_of(s.pieces.begin(), s.pieces.end(), usable); };
        if (std::none_of(all_.begin(), all_.end(), [&](const auto& entry) { return unusable(entry.second); })) return 0;
        try {
            m.synchronize();
        } catch (...) {
            return 0;
        }
        std::size_t given_up = 0;
        for (auto it = all_.begin(); it != all_.end();) {
            if (unusable(it->second)) {
                it = give_up(m, it);
                ++given_up;
            } else {
                ++it;
            }
        }
        return given_up;
    }

    // Lends free stitch `s` for a request of `requested` bytes: take(piece) takes each piece out of
    // the pool, and may throw std::bad_alloc; then give(piece) returns those taken, and false.
    template <class Take, class Give>
    bool lend(stitch& s, std::size_t requested, Take&& take, Give&& give) noexcept {
        std::size_t done = 0;
        try {
            for (; done < s.pieces.size(); ++done) take(s.pieces[done]);
        } catch (const std::bad_alloc&) {
            for (std::size_t i = 0; i < done; ++i) give(s.pieces[i]);
            return false;
        }
        s.requested = requested;
        ++live_;
        live_bytes_ += requested;
        lent_bytes_ += s.bytes;
        lent_pieces_ += s.pieces.size();
        return true;
    }
    // Live stitch `s` freed: give(piece) returns each piece to the pool; `s` stays, free.
    template <class Give>
    void take_back(stitch& s, Give&& give) noexcept {
        forget_lent(s);
        for (const piece& p : s.pieces) give(p);
    }

    // Each piece is one whole physical allocation of its span and a live stitch's pieces are live
    // blocks of `live`, exactly; the pieces add up to their stitch; the counts agree.
    void check_invariants(const live_blocks& live) const {
        std::size_t lent = 0, pieces_lent = 0, live_count = 0, requested = 0;
        for (const auto& [address, st] : all_) {
            std::size_t bytes = 0;
            for (const piece& p : st.pieces) {
                const span& s = *p.owner;
                const std::size_t piece_bytes = (p.last - p.first) * grid_->bytes;
                POOLKIT_VERIFY(s.starts_at(p.first) && s.count(p.first, p.last, true) == p.last - p.first &&
                                   (p.last == s.granules() || !s.bit(p.last) || s.starts_at(p.last)) &&
                                   s.last_start(p.first, p.last) == p.first,
                               "a stitch's piece is not one whole physical allocation");
                if (st.requested != 0) {
                    const auto it = live.find(grid_->address(s, p.first), by_address{});
                    POOLKIT_VERIFY(it != live.end() && it->bytes == piece_bytes, "a live stitch's piece is not lent");
                }
                bytes += piece_bytes;
            }
            POOLKIT_VERIFY(bytes == st.bytes && st.requested <= st.bytes, "a stitch's pieces do not add up to it");
            if (st.requested != 0) {
                lent += st.bytes;
                pieces_lent += st.pieces.size();
                ++live_count;
                requested += st.requested;
            }
        }
        POOLKIT_VERIFY(lent == lent_bytes_ && pieces_lent == lent_pieces_ && live_count == live_ && requested == live_bytes_,
                       "stitch counts drifted");
    }

    // Gives up the free stitches (every one, `everything`, at the pool's destruction): their
    // aliases unmapped after one synchronize(), their address space given back. Where the wait
    // fails, asserted, and nothing is given up.
    void drop(Memory& m, bool everything) noexcept {
        bool any = false;
        for (const auto& [address, s] : all_) any = any || everything || s.requested == 0;
        if (!any) return;
        try {
            m.synchronize();
        } catch (...) {
            POOLKIT_ASSERT(false, "expandable could not wait for the device before unmapping");
            return;
        }
        for (auto it = all_.begin(); it != all_.end();) {
            if (!everything && it->second.requested != 0) {
                ++it;
                continue;
            }
            if (it->second.requested != 0) forget_lent(it->second);
            it = give_up(m, it);
        }
    }

private:
    using stitches = std::map<std::uintptr_t, stitch>;

    // Unmaps the aliases of the stitch at `it` and gives its address space back; the next one.
    stitches::iterator give_up(Memory& m, stitches::iterator it) noexcept {
        unalias(m, it->first, it->second.pieces, it->second.bytes);
        m.unclaim(reinterpret_cast<void*>(it->first), it->second.bytes);
        return all_.erase(it);
    }

    void forget_lent(stitch& s) noexcept {
        live_bytes_ -= s.requested;
        lent_bytes_ -= s.bytes;
        lent_pieces_ -= s.pieces.size();
        s.requested = 0;
        --live_;
    }

    // Calls f(address, bytes) for each run of adjacent pieces of one span: one alias each.
    template <class F>
    void for_each_alias_run(const std::vector<piece>& pieces, F&& f) const {
        for (std::size_t i = 0; i < pieces.size();) {
            std::size_t j = i + 1;
            while (j < pieces.size() && pieces[j].owner == pieces[i].owner && pieces[j].first == pieces[j - 1].last) ++j;
            f(grid_->address(*pieces[i].owner, pieces[i].first), (pieces[j - 1].last - pieces[i].first) * grid_->bytes);
            i = j;
        }
    }

    // Unmaps the first `bytes` of the aliases of `pieces` at `address`.
    void unalias(Memory& m, std::uintptr_t address, const std::vector<piece>& pieces, std::size_t bytes) noexcept {
        std::size_t offset = 0;
        for_each_alias_run(pieces, [&](std::uintptr_t, std::size_t run) {
            if (offset < bytes) {
                m.unmap(reinterpret_cast<void*>(address + offset), run);
                ++unalias_calls_;
            }
            offset += run;
        });
    }

    const grid* grid_;
    std::size_t most_;
    stitches all_;  // by the address of its range
    std::size_t live_ = 0;
    std::size_t live_bytes_ = 0;  // requested bytes of the live ones
    std::size_t lent_bytes_ = 0;  // bytes of the live ones
    std::size_t lent_pieces_ = 0;  // pieces of the live ones
    std::size_t alias_calls_ = 0;
    std::size_t unalias_calls_ = 0;
};

}  // namespace detail::expandable_parts

}  // namespace poolkit
