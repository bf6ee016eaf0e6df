// sole_stream<Stream>: the stream of the last stream calls, and when it may become the pool's home
// again (stream_ordered's rehome: a program that left its other streams).
//
// Contract:
// - turn_to() is told of every call on a stream other than the last call's; the stream may become
//   the home once it has made every call for wait() calls (alone_long()).
// - Where the pool was not ready for a new home then, not_ready() asks again wait() calls later.
// - regained() marks the home's frees since as those of a regained home; a turn to another stream
//   clears the mark. A turn that ends a regained home whose frees are uncovered calls ended(),
//   which doubles wait() (up to max_wait): a stream that comes back every N calls ends a regained
//   home about log2(N / first_wait) + 1 times at most.
// - Stream is the owner's record, only compared; forget() before a record is dropped.
// Complexity: O(1). Not thread-safe.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace poolkit::detail {

struct sole_stream_limits {
    // Calls a stream must make alone before its first regain, and the most wait() doubles to.
    static constexpr std::uint64_t first_wait = 4096;
    static constexpr std::uint64_t max_wait = std::uint64_t{1} << 40;
};

template <class Stream>
class sole_stream : public sole_stream_limits {
public:
    [[nodiscard]] const Stream* last() const noexcept { return last_; }
    [[nodiscard]] std::uint64_t wait() const noexcept { return wait_; }
    [[nodiscard]] bool regained_home() const noexcept { return regained_; }
    // Times a stream became the home again.
    [[nodiscard]] std::size_t regains() const noexcept { return regains_; }

    // A call on `s`, at the owner's clock `now`, after calls on another stream (or none).
    void turn_to(Stream& s, std::uint64_t now) noexcept {
        last_ = &s;
        regained_ = false;
        at_ = now + wait_;
    }
    // Whether `s` made every call for wait() calls up to `now`.
    [[nodiscard]] bool alone_long(const Stream& s, std::uint64_t now) const noexcept { return last_ == &s && now >= at_; }
    // The pool was not ready for `last()` as its home at `now`: asked again wait() calls later.
    void not_ready(std::uint64_t now) noexcept { at_ = now + wait_; }
    // last() frees as the home, become so now (`new_home`) or earlier.
    void regained(bool new_home) noexcept {
        regains_ += new_home ? 1 : 0;
        regained_ = true;
    }
    // Another stream ended a regained home whose frees were uncovered.
    void ended() noexcept { wait_ = std::min(2 * wait_, max_wait); }
    void forget(const Stream& s) noexcept {
        if (last_ == &s) last_ = nullptr;
    }

private:
    Stream* last_ = nullptr;
    std::uint64_t wait_ = first_wait;
    std::uint64_t at_ = first_wait;  // the clock from which last_ may become the home
    bool regained_ = false;  // the home's frees since the last turn went in as a regained home's
    std::size_t regains_ = 0;
};

}  // namespace poolkit::detail
