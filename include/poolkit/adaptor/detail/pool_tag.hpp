// pool_tag<Events, Stream>: for which streams the shared pool's free blocks are ready.
//
// Contract:
// - Untagged (home() == nullptr), every free block of the pool is ready for every stream: only
//   blocks whose frees are done, or were freed with no stream, go into the pool.
// - While one stream is the only one in use, it is the pool's home: it frees straight into the
//   pool, with no front cache and no event, the way a single-stream program expects. Those frees
//   make the tag uncovered: the pool is ready for the home at once and for nothing else.
// - cover() records an event on the home's stream (only during a call on it: a stream may be
//   destroyed once its work is issued). From then on another stream is ready once it has waited
//   on that event (cudaStreamWaitEvent, once per cover: `seen` holds the generation it waited
//   for) or the event is done, which clears the tag. Uncovered, only a wait for the whole device
//   (the home's stream may be gone) clears it.
// `Stream` is the caller's per-stream record, only compared. Not thread-safe.
#pragma once

#include <poolkit/core/stream_ref.hpp>

#include <cstdint>
#include <optional>

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

    // Whether `caller` (nullptr: a plain allocate) may take the pool's free blocks now. `seen`: the
    // cover generation the caller waited for.
    [[nodiscard]] bool ready_for(const Stream* caller, std::uint64_t seen) const noexcept {
        return home_ == nullptr || (caller != nullptr && (home_ == caller || (!uncovered_ && seen == generation_)));
    }

    // `home` freed a block into the pool (it is the home, or the pool was untagged).
    void note_home_free(Stream& home) noexcept {
        home_ = &home;
        uncovered_ = true;
    }

    // Records an event on `home_stream`, the home's stream, during a call on it: the home's frees
    // so far are covered. May throw (no event): nothing changed.
    void cover(stream_ref home_stream) {
        const event_type event = events_->record(home_stream);
        if (cover_) events_->recycle(*cover_);
        cover_ = event;
        uncovered_ = false;
        ++generation_;
    }

    // Makes the pool ready for `caller` on `stream` (nullptr: a plain allocate, ready only once the
    // host waited): done → clear; else the stream waits on the cover. False: uncovered, only a
    // wait for the whole device would do. May throw (from the event calls): nothing changed.
    bool make_ready(const stream_ref* stream, std::uint64_t& seen) {
        if (home_ == nullptr) return true;
        if (uncovered_) return false;
        if (events_->done(*cover_)) {
            clear();
        } else if (stream == nullptr) {
            events_->synchronize(*cover_);
            clear();
        } else {
            events_->wait(*stream, *cover_);
            seen = generation_;
        }
        return true;
    }

    // The home's frees are done (the host waited for them): the pool is ready for everyone.
    void clear() noexcept {
        if (cover_) events_->recycle(*cover_);
        cover_.reset();
        home_ = nullptr;
        uncovered_ = false;
        ++generation_;  // a record at the same address later is a new stream: it has seen nothing
    }

    // The host waits for the home's frees, covered or, when `home_stream` (the home's stream,
    // during a call on it) is given, recorded now. False: neither is at hand; only a wait for the
    // whole device will do. May throw (from the event calls).
    bool wait_for_home(const stream_ref* home_stream) {
        if (home_ == nullptr) return true;
        if (uncovered_ && home_stream != nullptr) cover(*home_stream);
        if (uncovered_) return false;
        events_->synchronize(*cover_);
        clear();
        return true;
    }

private:
    Events* events_;
    Stream* home_ = nullptr;
    bool uncovered_ = false;
    std::optional<event_type> cover_;  // recorded on the home's stream after its frees, once covered
    std::uint64_t generation_ = 1;     // of cover_: a caller that waited on it holds this in `seen`
};

}  // namespace poolkit::detail
