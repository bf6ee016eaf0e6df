// open_fronts<Stream>: the streams whose front caches hold frees no event covers, and when to stop
// waiting for them.
//
// Contract:
// - A stream's front cache can be covered only during a call on that stream (a stream may be
//   destroyed once its work is issued, and is never touched after). So a miss that could use
//   another stream's front asks for it (ask_all): that stream covers it at its next call.
// - A stream asked more than `patience` misses ago whose front is still open may be gone (destroyed
//   without forget_stream) or idle: stale() says so, and the owner then waits for the whole device
//   once (a settle), after which every front is free for all. So destroyed streams strand memory
//   for a bounded number of misses, and live ones cost no wait.
// - A front whose stream made no call for a while is quiet (recent_over() leaves it out): the owner
//   does not let fronts that will never be covered make every other stream cover at each free.
// - Each Stream has public members `std::size_t open_slot`, `bool wanted` and `std::uint64_t
//   asked_at`, owned here while it is open, and `std::uint64_t last_call` (the owner's clock at
//   its stream's last call).
// Complexity: open/close O(1); ask_all and stale O(open fronts); recent_over O(open fronts) at
// most. Not thread-safe.
#pragma once

#include <poolkit/core/assert.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace poolkit::detail {

template <class Stream>
class open_fronts {
public:
    // Makes room for one more, so that the next open() cannot throw.
    void reserve_one() {
        if (open_.size() == open_.capacity()) open_.reserve(2 * open_.size() + 8);  // O(1) amortized
    }

    // `s`'s front went from empty to holding a block. Requires reserve_one() since the last open.
    void open(Stream& s) noexcept {
        s.open_slot = open_.size();
        s.wanted = false;
        open_.push_back(&s);  // room was reserved
    }

    // `s`'s front is empty again (covered, settled or forgotten).
    void close(Stream& s) noexcept {
        POOLKIT_ASSERT(s.open_slot < open_.size() && open_[s.open_slot] == &s, "open_fronts::close of a stream not open");
        Stream* last = open_.back();
        open_[s.open_slot] = last;
        last->open_slot = s.open_slot;
        open_.pop_back();
        s.wanted = false;
    }

    // A miss on `asker` could use the others' fronts: each is asked to cover its front at its
    // stream's next call. Returns whether any other front is open.
    bool ask_all(const Stream* asker) noexcept {
        ++misses_;
        bool any = false;
        for (Stream* s : open_) {
            if (s == asker) continue;
            any = true;
            if (!s->wanted) {
                s->wanted = true;
                s->asked_at = misses_;
            }
        }
        return any;
    }

    // Whether a front was asked more than `patience` misses ago and is still open.
    [[nodiscard]] bool stale(std::uint64_t patience) const noexcept {
        for (const Stream* s : open_) {
            if (s->wanted && misses_ - s->asked_at > patience) return true;
        }
        return false;
    }

    // Whether more than `limit` fronts belong to streams that called within `window` of `now` (the
    // owner's clock). Stops counting past `limit`: O(limit) where most streams call often.
    [[nodiscard]] bool recent_over(std::uint64_t now, std::uint64_t window, std::size_t limit) const noexcept {
        std::size_t recent = 0;
        for (const Stream* s : open_) {
            if (now - s->last_call <= window && ++recent > limit) return true;
        }
        return false;
    }

    [[nodiscard]] std::size_t size() const noexcept { return open_.size(); }
    [[nodiscard]] bool empty() const noexcept { return open_.empty(); }
    template <class Visit>
    void for_each(Visit&& visit) const {
        for (Stream* s : open_) visit(*s);
    }

    // Every entry knows its slot.
    [[nodiscard]] bool consistent() const noexcept {
        for (std::size_t i = 0; i < open_.size(); ++i) {
            if (open_[i]->open_slot != i) return false;
        }
        return true;
    }

private:
    std::vector<Stream*> open_;
    std::uint64_t misses_ = 0;  // ask_all calls: the clock of asked_at
};

}  // namespace poolkit::detail
