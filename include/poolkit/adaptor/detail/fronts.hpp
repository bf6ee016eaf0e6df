// fronts<Events, Stream>: every stream's front cache together — their bounds, and covering one
// with an event so that its blocks join the waiting blocks.
//
// Contract:
// - A front holds frees of its own stream that no event covers (front_cache.hpp); push() adds one
//   and opens the front (open_fronts.hpp) when it was empty.
// - A front is covered by one event recorded on its stream, during a call on it (cover()): its
//   blocks become one batch of waiting_blocks. Where no event can be recorded, or the batch finds
//   no room, the front stays open: nothing is lost, it is asked again later.
// - crowded() says when a front must be covered now that it grew: it holds blocks_per_front
//   blocks; the free was large (large(): a 4,096th of what the pool reserves, min_large at least);
//   all fronts together hold more than the budget (budget(): a sixteenth of what the pool
//   reserves, min_budget at least); or more than max_open streams that called within `age` calls
//   hold an open front (fronts of streams that went quiet do not count: they would make every
//   free cover, and the budget bounds them). due() says when a front must be covered at its
//   stream's call: another stream's miss asked for it, or its oldest block is `age` calls old.
// - empty_into() hands a front's blocks on where the host waited for its stream (a settle), or
//   where idle_first() found its stream's work all done at a cover (no event then).
// - Each Stream has open_fronts' members plus `front_cache front`, `std::uint64_t opened_at` (the
//   owner's clock when its front last opened) and `std::uint8_t busy_streak, idle_skips`
//   (idle_first's), owned here.
// Complexity: push, took and cover O(1) amortized (cover: the front's blocks); crowded O(1), or
// O(max_open) while more than max_open fronts are open. Not thread-safe.
#pragma once

#include <poolkit/adaptor/detail/front_cache.hpp>
#include <poolkit/adaptor/detail/open_fronts.hpp>
#include <poolkit/adaptor/detail/waiting_blocks.hpp>
#include <poolkit/adaptor/stream_concepts.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace poolkit::detail {

struct front_limits {
    // A front holds at most this many blocks.
    static constexpr std::size_t blocks_per_front = 64;
    // Streams (that called within `age`) with an open front, at most.
    static constexpr std::size_t max_open = 8;
    // The fronts hold at most a budget_share-th of what the pool reserves, and at least min_budget.
    static constexpr std::size_t budget_share = 16;
    static constexpr std::size_t min_budget = std::size_t{4} << 20;
    // A front whose oldest block was freed this many calls ago is covered at its stream's next call.
    static constexpr std::size_t age = 256;
    // A free of at least a large_share-th of what the pool reserves (and min_large) is covered at
    // once: memory that large, kept from other streams, makes the pool grow.
    static constexpr std::size_t large_share = 4096;
    static constexpr std::size_t min_large = std::size_t{1} << 20;
};

template <class Events, class Stream>
class fronts : public front_limits {
public:
    using event_type = typename Events::event_type;
    // A stream found busy at a cover is asked again after 1, 3, 7 ... 2^max_busy_streak - 1 covers.
    static constexpr unsigned max_busy_streak = 6;

    fronts(Events& events, waiting_blocks<Events>& waiting) noexcept : events_(&events), waiting_(&waiting) {}
    fronts(const fronts&) = delete;
    fronts& operator=(const fronts&) = delete;

    // Room for `s`'s front to open, so that push() cannot fail for it. May throw std::bad_alloc.
    void reserve(const Stream& s) {
        if (s.front.empty()) open_.reserve_one();
    }

    // Adds `block`, freed on `s`'s stream, at the owner's clock `now`. Requires reserve(s) since
    // the last push that opened a front. False: `s`'s front is full or no host memory was at
    // hand; nothing changed.
    [[nodiscard]] bool push(Stream& s, const free_block& block, std::uint64_t now) noexcept {
        if (s.front.full() || !s.front.push(block)) return false;
        if (s.front.size() == 1) {
            open_.open(s);  // room was reserved
            s.opened_at = now;
        }
        bytes_ += block.bytes;
        return true;
    }

    // A request on `s`'s stream took `bytes` from its front.
    void took(Stream& s, std::size_t bytes) noexcept {
        bytes_ -= bytes;
        if (s.front.empty()) open_.close(s);
    }

    // Whether `s`'s front must be covered at its stream's call now: it was asked for, or it aged.
    [[nodiscard]] bool due(const Stream& s, std::uint64_t now) const noexcept {
        return s.wanted || (!s.front.empty() && now - s.opened_at > age);
    }

    // The byte budget of all fronts, and the least bytes of a large free, for a pool that reserves
    // `reserved` bytes.
    [[nodiscard]] static std::size_t budget(std::size_t reserved) noexcept { return std::max(min_budget, reserved / budget_share); }
    [[nodiscard]] static std::size_t large(std::size_t reserved) noexcept { return std::max(min_large, reserved / large_share); }

    // Whether `s`'s front, which just took a free of `freed` bytes, must be covered now, in a pool
    // that reserves `reserved` bytes.
    [[nodiscard]] bool crowded(const Stream& s, std::size_t freed, std::size_t reserved, std::uint64_t now) const noexcept {
        return s.front.full() || freed >= large(reserved) || bytes_ > budget(reserved) ||
               (open_.size() > max_open && open_.recent_over(now, age, max_open));
    }

    // Covers `s`'s front with one event recorded on `stream`, `s`'s stream during a call on it:
    // its blocks join the waiting blocks. Where no event or no room was at hand, the front stays
    // open (asked again later, or settled).
    void cover(Stream& s, stream_ref stream) noexcept {
        s.wanted = false;
        if (s.front.empty()) return;
        try {
            const event_type event = events_->record(stream);
            try {
                waiting_->add(s.front.blocks(), std::span(&event, 1));
            } catch (...) {
                events_->recycle(event);
                throw;
            }
        } catch (...) {
            return;
        }
        bytes_ -= s.front.bytes();
        s.front.clear();
        open_.close(s);
    }

    // Whether all work issued on `stream`, `s`'s, is done, asked at a cover where Events can tell
    // (idle(): cudaStreamQuery) — one driver call in place of an event now and a query of it
    // later. Allocation costs most where the host is the bottleneck, and there streams run dry; a
    // stream found busy is asked again only after 2^streak - 1 more covers, so one that stays busy
    // costs a call per 2^max_busy_streak covers.
    [[nodiscard]] bool idle_first(Stream& s, stream_ref stream) noexcept {
        if constexpr (idle_events<Events>) {
            if (s.idle_skips > 0) {
                --s.idle_skips;
                return false;
            }
            bool idle = false;
            try {
                idle = events_->idle(stream);
            } catch (...) {  // taken as busy
            }
            if (idle) {
                s.busy_streak = 0;
                return true;
            }
            s.busy_streak = static_cast<std::uint8_t>(std::min(s.busy_streak + 1u, max_busy_streak));
            s.idle_skips = static_cast<std::uint8_t>((1u << s.busy_streak) - 1u);
            return false;
        } else {
            static_cast<void>(s), static_cast<void>(stream);
            return false;
        }
    }

    // Gives `s`'s front to `give(block)`: the host waited for its stream.
    template <class Give>
    void empty_into(Stream& s, Give&& give) noexcept {
        if (s.front.empty()) return;
        for (const free_block& b : s.front.blocks()) give(b);
        bytes_ -= s.front.bytes();
        s.front.clear();
        open_.close(s);
    }

    // The open fronts: which streams to ask, and whether one asked long ago is still open.
    [[nodiscard]] open_fronts<Stream>& open() noexcept { return open_; }
    [[nodiscard]] const open_fronts<Stream>& open() const noexcept { return open_; }
    // Bytes over every front.
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

private:
    Events* events_;
    waiting_blocks<Events>* waiting_;
    open_fronts<Stream> open_;
    std::size_t bytes_ = 0;
};

}  // namespace poolkit::detail
