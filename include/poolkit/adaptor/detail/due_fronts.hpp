// due_fronts<Stream>: the lasting streams whose fronts must be covered before the pool next
// serves (stream_ordered's cover_soon): a run of large frees on such a stream then costs one
// query, made by the next allocation on whatever stream.
//
// Contract:
// - add(s) lists `s` once (false where it was listed already); drop(s) unlists it; take_all(f)
//   unlists every stream, oldest first, handing each to f.
// - Each Stream has a public `bool cover_due`, owned here: true while listed.
// - reserve(n) makes room for n streams, so that add() cannot fail; the owner reserves for every
//   stream record it makes.
// Complexity: add, empty O(1); drop O(listed); take_all O(listed). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <utility>
#include <vector>

namespace poolkit::detail {

template <class Stream>
class due_fronts {
public:
    // Room for `streams` listed at once. May throw std::bad_alloc.
    void reserve(std::size_t streams) {
        if (listed_.capacity() < streams) listed_.reserve(2 * streams + 4);
    }

    // Requires reserve() for every stream that may be listed at once.
    bool add(Stream& s) noexcept {
        if (s.cover_due) return false;
        s.cover_due = true;
        listed_.push_back(&s);
        return true;
    }
    void drop(Stream& s) noexcept {
        if (!std::exchange(s.cover_due, false)) return;
        std::erase(listed_, &s);
    }
    // `f` must not list or unlist streams. The room reserved stays.
    template <class F>
    void take_all(F&& f) noexcept {
        for (Stream* s : listed_) {
            s->cover_due = false;
            f(*s);
        }
        listed_.clear();
    }

    [[nodiscard]] bool empty() const noexcept { return listed_.empty(); }
    [[nodiscard]] std::size_t size() const noexcept { return listed_.size(); }
    // Whether every listed stream says so, and `flagged` (the streams whose cover_due is set) are
    // as many.
    [[nodiscard]] bool consistent(std::size_t flagged) const noexcept {
        return flagged == listed_.size() && std::all_of(listed_.begin(), listed_.end(), [](const Stream* s) { return s->cover_due; });
    }

private:
    std::vector<Stream*> listed_;
};

}  // namespace poolkit::detail
