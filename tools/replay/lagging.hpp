// --lag K: the compositions over simulated memory with simulated streams whose work completes K
// events after it was issued, so that stream ordering is at play on a CPU as on a GPU.
//
// Each event of the trace issues one item of work on its stream (the kernel that uses the block);
// the item issued K events earlier then completes. K = 0 issues nothing: every stream is idle at
// every call, as on a GPU that replays a trace (no kernel runs), and the calls are still counted. Events cost nothing here, so ns/op says little;
// what this mode shows is the footprint when frees are not at once ready for every stream, and
// the driver calls a GPU would have taken: events recorded and queried, stream waits and host
// synchronizations, per 1,000 events of every pass (the synchronizations of the teardown, which
// waits for what is still pending, among them).
#pragma once

#include "compositions.hpp"

#include <poolkit/adaptor/host_events.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace poolkit::replay_tool {

// host_events whose default-constructed copies share one timeline: the compositions make their
// Events by default construction and must see the streams the replay made.
class lagging_events : public host_events {
public:
    lagging_events() : host_events(shared()) {}

private:
    static host_events& shared() {
        static host_events timeline;
        return timeline;
    }
};

// One simulated stream per trace stream (handle 0 stays the default stream), declared lasting
// where `lasting` says (never destroyed: none is), and the work that lags behind the replay by
// `lag` events.
class lagging_streams {
public:
    lagging_streams(const trace& t, std::size_t lag, bool lasting) : issued_(lag) {
        for (std::uint64_t handle : t.streams) {
            refs_.push_back(handle == 0 ? default_stream : events_.make_stream());
            if (lasting && handle != 0) events_.declare_lasting(refs_.back());
        }
    }
    [[nodiscard]] std::span<const stream_ref> refs() const noexcept { return refs_; }

    // Everything issued completes, and the lag starts over: before each composition.
    void settle() {
        events_.complete_all();
        for (item& i : issued_) i = {};
        next_ = 0;
    }
    // The driver calls counted so far, by every composition over these streams.
    [[nodiscard]] event_calls calls() const noexcept {
        return {events_.record_count(), events_.query_count(), events_.wait_count(), events_.synchronizations()};
    }
    // After each event: its stream issues an item; the one issued `lag` events earlier completes.
    void after(const trace_event& e) {
        if (issued_.empty()) return;  // --lag 0
        const stream_ref stream = refs_[e.stream];
        item& oldest = issued_[next_];
        if (oldest.position != 0) events_.complete(oldest.stream, oldest.position);
        oldest = {stream, events_.submit(stream)};
        next_ = next_ + 1 == issued_.size() ? 0 : next_ + 1;
    }

private:
    struct item {
        stream_ref stream = default_stream;  // CCCL 3.1+ deprecates a default-constructed cuda::stream_ref
        std::uint64_t position = 0;  // 0: none
    };
    lagging_events events_;
    std::vector<stream_ref> refs_;
    std::vector<item> issued_;  // a ring of the last `lag` items
    std::size_t next_ = 0;
};

}  // namespace poolkit::replay_tool
