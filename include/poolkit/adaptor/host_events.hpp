// host_events: simulated streams and events, so that stream ordering is tested on a CPU.
//
// A host_events object is a handle to one shared timeline (copies share it). The test makes
// streams with make_stream(), issues work with submit(stream), and decides when work completes
// with complete(stream), complete(stream, position) or complete_all(). An event recorded on a
// stream marks the work issued there so far; it is done once that work completed. wait(waiter,
// event) makes work the waiter issues afterwards depend on the event: completing that work
// completes the event's work first, as a GPU would. synchronize(event) (the host blocking) completes just what the event needs.
// destroy_stream(s) ends a stream as cudaStreamDestroy does: its work still completes and its
// events stay valid, but recording on it, waiting with it or submitting to it afterwards is a use
// after destruction, reported by throwing std::logic_error.
// The most recent waits (up to log_limit) are logged with a count of all of them, so tests can
// check how a reuse was ordered; memory stays bounded by the waits not yet completed, however long
// a simulation runs. per_thread_stream() names another stream on each host thread, as
// cudaStreamPerThread does, so that per-thread streams can be tested; calls from several threads are
// serialized by a mutex. Models the Events policy of stream_ordered.
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace poolkit {

class host_events {
public:
    struct event_type {
        std::size_t stream = 0;    // index of the stream it was recorded on
        std::uint64_t position = 0;  // work items issued there at record time
    };
    struct logged_wait {
        stream_ref waiter;
        event_type event;
    };
    // Waits kept in waits(); older ones are dropped (wait_count() counts them all).
    static constexpr std::size_t log_limit = 4096;

    // The default stream (default_stream) exists from the start; make_stream() adds others.
    host_events() : timeline_(std::make_shared<timeline>()) { timeline_->streams.emplace_back(); }

    // A new simulated stream. Its handle stays valid as long as any copy of this object lives.
    [[nodiscard]] stream_ref make_stream() {
        const std::lock_guard lock(timeline_->mutex);
        return stream_ref{reinterpret_cast<stream_handle>(&add_stream())};
    }

    // The handle that names a stream of its own on each host thread (made at its first use there).
    [[nodiscard]] static stream_ref per_thread_stream() noexcept { return stream_ref{per_thread_handle()}; }

    // Issues one item of work on `stream`; returns its position.
    std::uint64_t submit(stream_ref stream) {
        const std::lock_guard lock(timeline_->mutex);
        return ++alive(stream).issued;
    }

    // Completes all work issued on `stream` so far, and what it waits for.
    void complete(stream_ref stream) {
        const std::lock_guard lock(timeline_->mutex);
        auto& s = state(stream);
        complete_until(s, s.issued);
    }

    // Completes the work issued on `stream` up to `position` (a value submit() returned), and what
    // it waits for: work that finishes in the order it was issued, some of it still running.
    void complete(stream_ref stream, std::uint64_t position) {
        const std::lock_guard lock(timeline_->mutex);
        auto& s = state(stream);
        complete_until(s, std::min(position, s.issued));
    }

    void complete_all() {
        const std::lock_guard lock(timeline_->mutex);
        complete_everything();
    }

    // The handle must not be used again (it is never handed out again either).
    void destroy_stream(stream_ref stream) {
        POOLKIT_ASSERT(stream.get() != nullptr, "the default stream cannot be destroyed");
        const std::lock_guard lock(timeline_->mutex);
        alive(stream).destroyed = true;
    }

    [[nodiscard]] std::uint64_t issued(stream_ref stream) const {
        const std::lock_guard lock(timeline_->mutex);
        return state(stream).issued;
    }
    [[nodiscard]] std::uint64_t completed(stream_ref stream) const {
        const std::lock_guard lock(timeline_->mutex);
        return state(stream).completed;
    }
    // The most recent waits, oldest first (not synchronized: read it while no other thread calls).
    [[nodiscard]] const std::vector<logged_wait>& waits() const noexcept { return timeline_->waits; }
    [[nodiscard]] std::uint64_t wait_count() const noexcept { return timeline_->wait_count; }
    [[nodiscard]] std::size_t synchronizations() const noexcept { return timeline_->synchronizations; }
    // Events recorded, and asked whether they are done: with waits and synchronizations, the calls a
    // GPU's driver would have taken.
    [[nodiscard]] std::uint64_t record_count() const noexcept { return timeline_->record_count; }
    [[nodiscard]] std::uint64_t query_count() const noexcept { return timeline_->query_count; }
    // Waits registered on streams whose work has not yet passed them: what the simulation holds.
    [[nodiscard]] std::size_t pending_waits() const {
        const std::lock_guard lock(timeline_->mutex);
        std::size_t pending = 0;
        for (const auto& s : timeline_->streams) pending += s.waits.size();
        return pending;
    }

    // The Events policy.
    event_type record(stream_ref stream) {
        const std::lock_guard lock(timeline_->mutex);
        const auto& s = alive(stream);
        ++timeline_->record_count;
        return {s.index, s.issued};
    }
    void wait(stream_ref waiter, const event_type& event) {
        const std::lock_guard lock(timeline_->mutex);
        auto& s = alive(waiter);
        auto& log = timeline_->waits;
        if (log.size() == log_limit) log.erase(log.begin(), log.begin() + log_limit / 2);
        log.push_back({waiter, event});
        ++timeline_->wait_count;
        if (is_done(event)) return;  // nothing to hold on to
        s.waits.push_back({s.issued, event});
    }
    [[nodiscard]] bool done(const event_type& event) const {
        const std::lock_guard lock(timeline_->mutex);
        ++timeline_->query_count;
        return is_done(event);
    }
    // The host blocks until the event's work is done: the simulation completes just that.
    void synchronize(const event_type& event) {
        const std::lock_guard lock(timeline_->mutex);
        ++timeline_->synchronizations;
        complete_until(timeline_->streams[event.stream], event.position);
    }
    // The host waits for everything on every stream.
    void synchronize_all() {
        const std::lock_guard lock(timeline_->mutex);
        ++timeline_->synchronizations;
        complete_everything();
    }
    void recycle(const event_type&) noexcept {}
    // Streams are never handed out again: the index tells them apart (for the per-thread handle,
    // the calling thread's stream).
    [[nodiscard]] std::uint64_t identity(stream_ref stream) const {
        const std::lock_guard lock(timeline_->mutex);
        return state(stream).index;
    }
    [[nodiscard]] static bool per_thread(stream_ref stream) noexcept { return stream.get() == per_thread_handle(); }

    friend bool operator==(const host_events& a, const host_events& b) noexcept { return a.timeline_ == b.timeline_; }

private:
    // A wait on `event` for the work issued after the stream's first `after` items.
    struct pending_wait {
        std::uint64_t after;
        event_type event;
    };
    struct stream_state {
        std::size_t index = 0;
        std::uint64_t issued = 0;
        std::uint64_t completed = 0;
        std::deque<pending_wait> waits;  // in the order given; dropped once the stream's work passes them
        bool destroyed = false;
    };
    struct timeline {
        std::deque<stream_state> streams;  // deque: handles are addresses and must stay put
        std::map<std::thread::id, stream_state*> per_thread;
        std::vector<logged_wait> waits;
        std::uint64_t wait_count = 0;
        std::uint64_t record_count = 0;
        std::uint64_t query_count = 0;
        std::size_t synchronizations = 0;
        std::mutex mutex;
    };

    static stream_handle per_thread_handle() noexcept {
        static const char tag = 0;  // an address no stream_state has
        return reinterpret_cast<stream_handle>(const_cast<char*>(&tag));
    }

    stream_state& add_stream() const {
        auto& created = timeline_->streams.emplace_back();
        created.index = timeline_->streams.size() - 1;
        return created;
    }

    stream_state& state(stream_ref stream) const {
        if (stream.get() == per_thread_handle()) {
            auto& mine = timeline_->per_thread[std::this_thread::get_id()];
            if (mine == nullptr) mine = &add_stream();
            return *mine;
        }
        auto* s = reinterpret_cast<stream_state*>(stream.get());
        return s != nullptr ? *s : timeline_->streams.front();
    }
    stream_state& alive(stream_ref stream) const {
        auto& s = state(stream);
        if (s.destroyed) throw std::logic_error("poolkit::host_events: a destroyed stream was used");
        return s;
    }
    [[nodiscard]] bool is_done(const event_type& event) const noexcept {
        return timeline_->streams[event.stream].completed >= event.position;
    }
    void complete_everything() {
        for (auto& s : timeline_->streams) complete_until(s, s.issued);
    }
    // Completes `s`'s items up to `position`, each after the events it waits for. Events only
    // look back in time, so this recursion ends; a wait is dropped once the items after it began.
    void complete_until(stream_state& s, std::uint64_t position) {
        while (s.completed < position) {
            while (!s.waits.empty() && s.waits.front().after <= s.completed) {
                const event_type before = s.waits.front().event;
                s.waits.pop_front();
                complete_until(timeline_->streams[before.stream], before.position);
            }
            ++s.completed;
        }
    }

    std::shared_ptr<timeline> timeline_;
};

}  // namespace poolkit
