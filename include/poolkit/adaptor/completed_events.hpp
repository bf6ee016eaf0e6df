// completed_events: an Events policy for streams on which no work runs, so every event is complete.
//
// For replaying allocation traces on a CPU (poolkit-replay): the trace's streams order nothing but
// the allocator's own calls, so a block freed on one stream may go to another at once. record()
// returns an empty token, wait() and synchronize() do nothing, done() is always true. Stream
// handles are only compared, never dereferenced. Stateless; thread-safe.
#pragma once

#include <poolkit/core/stream_ref.hpp>

#include <cstdint>

namespace poolkit {

class completed_events {
public:
    struct event_type {};
    // Recording and querying cost nothing, and every event is done at once (stream_ordered covers
    // every free at once then).
    static constexpr bool costs_nothing = true;

    event_type record(stream_ref) noexcept { return {}; }
    void wait(stream_ref, event_type) noexcept {}
    [[nodiscard]] bool done(event_type) const noexcept { return true; }
    void synchronize(event_type) noexcept {}
    void synchronize_all() noexcept {}
    void recycle(event_type) noexcept {}
    // Handles stand for streams as they are (a trace names each stream by one handle).
    [[nodiscard]] static std::uint64_t identity(stream_ref stream) noexcept { return stream_id(stream); }
    [[nodiscard]] static constexpr bool per_thread(stream_ref) noexcept { return false; }

    friend constexpr bool operator==(completed_events, completed_events) noexcept { return true; }
};

}  // namespace poolkit
