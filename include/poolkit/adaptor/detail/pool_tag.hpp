// pool_tag<Events, Stream>: for which streams the shared pool's free blocks are ready.
//
// Contract:
// - Clean (no home, no covers), every free block of the pool is ready for every stream: only
//   blocks whose frees are done, or were freed with no stream, went into the pool.
// - While one stream is the only one in use (or, after others, the only one for a long while:
//   the owner decides), it is the pool's home: it frees straight into the pool, with no front
//   cache and no event, the way a single-stream program expects. Those frees make the tag
//   uncovered: the pool is ready for the home at once and for nothing else.
// - cover() records an event on the home's stream (only during a call on it: a stream may be
//   destroyed once its work is issued).
// - add_covers() puts blocks whose events are not done into the clean pool (cudaMallocAsync's
//   internal dependencies): the stream that waited on those events may take from the pool; every
//   other stream first waits on them too.
// - A stream is ready once it has waited on every cover (cudaStreamWaitEvent, once per cover
//   generation: `seen` holds the generation it waited for), or the covers are done, which clears
//   the tag. Uncovered, only a wait for the whole device (the home's stream may be gone) clears it.
// `Stream` is the caller's per-stream record, only compared. Not thread-safe.
#pragma once

#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

namespace poolkit::detail {

template <class Events, class Stream>
class pool_tag {
public:
    using event_type = typename Events::event_type;

    explicit pool_tag(Events& events) noexcept : events_(&events) {}
    pool_tag(const pool_tag&) = delete;
    pool_tag& operator=(const pool_tag&) = delete;
    ~pool_tag() { clear(); }

    [[nodiscard]] Stream* home() const noexcept { return home_; }
    [[nodiscard]] bool uncovered() const noexcept { return uncovered_; }
    // Ready for every stream with no wait.
    [[nodiscard]] bool clean() const noexcept { return home_ == nullptr && covers_.empty(); }
    [[nodiscard]] std::uint64_t generation() const noexcept { return generation_; }

    // Whether `caller` (nullptr: a plain allocate) may take the pool's free blocks now. `seen`: the
    // cover generation the caller waited for.
    [[nodiscard]] bool ready_for(const Stream* caller, std::uint64_t seen) const noexcept {
        if (clean()) return true;
        if (caller == nullptr) return false;
        return (home_ != nullptr && home_ == caller) || (!uncovered_ && seen == generation_);
    }

    // `home` freed a block into the pool. Requires clean(), or `home` is the home already.
    void note_home_free(Stream& home) noexcept {
        home_ = &home;
        uncovered_ = true;
    }

    // Records an event on `home_stream`, the home's stream, during a call on it: the home's frees
    // so far are covered. May throw (no event): nothing changed.
    void cover(stream_ref home_stream) {
        if (covers_.capacity() == 0) covers_.reserve(1);
        const event_type event = events_->record(home_stream);
        recycle_covers();
        covers_.push_back(event);  // room for one was kept
        uncovered_ = false;
        ++generation_;
    }

    // Room for `count` more covers, so that add_covers of that many cannot throw.
    void reserve(std::size_t count) {
        if (covers_.size() + count > covers_.capacity()) covers_.reserve(std::max(2 * covers_.capacity(), covers_.size() + count));
    }

    // Blocks behind `events` went into the pool, and `seen` waited on them; it owns them from now
    // on. Requires no home, and reserve(events.size()).
    void add_covers(std::span<const event_type> events, std::uint64_t& seen) noexcept {
        covers_.insert(covers_.end(), events.begin(), events.end());  // room was reserved
        seen = ++generation_;
    }

    // Makes the pool ready for a caller on `stream` (nullptr: a plain allocate, ready only once
    // the host waited): covers done are dropped (all done: clean); the stream waits on the rest.
    // False: uncovered, only a wait for the whole device would do. May throw (from the event
    // calls).
    bool make_ready(const stream_ref* stream, std::uint64_t& seen) {
        if (clean()) return true;
        if (uncovered_) return false;
        if (drop_done()) return true;
        if (stream == nullptr) {
            for (const event_type& event : covers_) events_->synchronize(event);
            clear();
            return true;
        }
        for (const event_type& event : covers_) events_->wait(*stream, event);
        seen = generation_;
        return true;
    }

    // Drops the covers that are done; once none is left (and the home's frees are covered), the
    // tag is clean. Returns clean(). May throw (from the event queries).
    bool drop_done() {
        if (clean()) return true;
        if (uncovered_) return false;
        for (std::size_t i = 0; i < covers_.size();) {
            if (events_->done(covers_[i])) {
                events_->recycle(covers_[i]);
                covers_[i] = covers_.back();
                covers_.pop_back();
            } else {
                ++i;
            }
        }
        if (covers_.empty()) clear();
        return clean();
    }

    // The home's frees and every cover are done (the host waited): ready for everyone.
    void clear() noexcept {
        recycle_covers();
        home_ = nullptr;
        uncovered_ = false;
        ++generation_;  // a record at the same address later is a new stream: it has seen nothing
    }

    // The host waits for the home's frees and every cover: for the covers, after recording the
    // home's when `home_stream` (its stream, during a call on it) is given. False: the home's
    // frees are uncovered and not on its stream; only a wait for the whole device will do. May
    // throw (from the event calls).
    bool wait_for_all(const stream_ref* home_stream) {
        if (clean()) return true;
        if (uncovered_ && home_stream != nullptr) cover(*home_stream);
        if (uncovered_) return false;
        for (const event_type& event : covers_) events_->synchronize(event);
        clear();
        return true;
    }

private:
    void recycle_covers() noexcept {
        for (const event_type& event : covers_) events_->recycle(event);
        covers_.clear();
    }

    Events* events_;
    Stream* home_ = nullptr;
    bool uncovered_ = false;
    std::vector<event_type> covers_;  // the home's cover, or the events of blocks put in the pool
    std::uint64_t generation_ = 1;  // of covers_: a caller that waited on them holds this in `seen`
};

}  // namespace poolkit::detail
