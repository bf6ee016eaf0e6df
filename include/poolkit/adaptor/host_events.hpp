// host_events: simulated streams and events, so that stream ordering is tested on a CPU.
//
// A host_events object is a handle to one shared timeline (copies share it). The test makes
// streams with make_stream(), issues work with submit(stream), and decides when work completes
// with complete(stream) / complete_all(). An event recorded on a stream marks the work issued
// there so far; it is done once that work completed. wait(waiter, event) makes work the waiter
// issues afterwards depend on the event: completing that work completes the event's work first,
// as a GPU would. synchronize(event) (the host blocking) completes just what the event needs.
// destroy_stream(s) ends a stream as cudaStreamDestroy does: its work still completes and its
// events stay valid, but recording on it, waiting with it or submitting to it afterwards is a use
// after destruction, reported by throwing std::logic_error.
// Every wait and synchronization is logged, so tests can check how a reuse was ordered.
// Not thread-safe (tests drive it from one thread). Models the Events policy of stream_ordered.
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <stdexcept>
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

    // The default stream (stream_ref{}) exists from the start; make_stream() adds others.
    host_events() : timeline_(std::make_shared<timeline>()) { timeline_->streams.emplace_back(); }

    // A new simulated stream. Its handle stays valid as long as any copy of this object lives.
    [[nodiscard]] stream_ref make_stream() {
        auto& created = timeline_->streams.emplace_back();
        created.index = timeline_->streams.size() - 1;
        return stream_ref{reinterpret_cast<stream_handle>(&created)};
    }

    // Issues one item of work on `stream`; returns its position.
    std::uint64_t submit(stream_ref stream) {
        auto& s = alive(stream);
        // Work waits for every event the stream was told to wait on so far.
        s.items.push_back(item{s.pending_waits});
        return s.items.size();
    }

    // Completes all work issued on `stream` so far, and what it waits for.
    void complete(stream_ref stream) {
        auto& s = state(stream);
        complete_until(s, s.items.size());
    }

    void complete_all() {
        for (auto& s : timeline_->streams) complete_until(s, s.items.size());
    }

    // The handle must not be used again (it is never handed out again either).
    void destroy_stream(stream_ref stream) {
        POOLKIT_ASSERT(stream.get() != nullptr, "the default stream cannot be destroyed");
        alive(stream).destroyed = true;
    }

    [[nodiscard]] std::uint64_t issued(stream_ref stream) const { return state(stream).items.size(); }
    [[nodiscard]] std::uint64_t completed(stream_ref stream) const { return state(stream).completed; }
    [[nodiscard]] const std::vector<logged_wait>& waits() const noexcept { return timeline_->waits; }
    [[nodiscard]] std::size_t synchronizations() const noexcept { return timeline_->synchronizations; }

    // The Events policy.
    event_type record(stream_ref stream) {
        const auto& s = alive(stream);
        return {s.index, s.items.size()};
    }
    void wait(stream_ref waiter, const event_type& event) {
        auto& s = alive(waiter);
        s.pending_waits.push_back(event);
        timeline_->waits.push_back({waiter, event});
    }
    [[nodiscard]] bool done(const event_type& event) const noexcept {
        return timeline_->streams[event.stream].completed >= event.position;
    }
    // The host blocks until the event's work is done: the simulation completes just that.
    void synchronize(const event_type& event) {
        ++timeline_->synchronizations;
        complete_until(timeline_->streams[event.stream], event.position);
    }
    // The host waits for everything on every stream.
    void synchronize_all() {
        ++timeline_->synchronizations;
        complete_all();
    }
    void recycle(const event_type&) noexcept {}
    // Streams are never handed out again: the index tells them apart.
    [[nodiscard]] std::uint64_t identity(stream_ref stream) const noexcept { return state(stream).index; }
    // No handle is shared between host threads here.
    [[nodiscard]] static constexpr bool per_thread(stream_ref) noexcept { return false; }

    friend bool operator==(const host_events& a, const host_events& b) noexcept { return a.timeline_ == b.timeline_; }

private:
    struct item {
        std::vector<event_type> after;  // events that must be done before this item completes
    };
    struct stream_state {
        std::size_t index = 0;
        std::vector<item> items;
        std::uint64_t completed = 0;
        std::vector<event_type> pending_waits;  // apply to every item issued from now on
        bool destroyed = false;
    };
    struct timeline {
        std::deque<stream_state> streams;  // deque: handles are addresses and must stay put
        std::vector<logged_wait> waits;
        std::size_t synchronizations = 0;
    };

    stream_state& state(stream_ref stream) const {
        auto* s = reinterpret_cast<stream_state*>(stream.get());
        return s != nullptr ? *s : timeline_->streams.front();
    }
    stream_state& alive(stream_ref stream) const {
        auto& s = state(stream);
        if (s.destroyed) throw std::logic_error("poolkit::host_events: a destroyed stream was used");
        return s;
    }
    // Events only look back in time, so this recursion ends.
    void complete_until(stream_state& s, std::uint64_t position) {
        while (s.completed < position) {
            for (const event_type& before : s.items[s.completed].after) {
                complete_until(timeline_->streams[before.stream], before.position);
            }
            ++s.completed;
        }
    }

    std::shared_ptr<timeline> timeline_;
};

}  // namespace poolkit
