// replay(trace, resource): runs a checked trace's allocations and frees against a resource.
//
// Each allocate asks for the trace's size at default_alignment; each free returns the block with
// the size it was asked with. A stream resource gets allocate_async / deallocate_async on the
// stream the event names (through `streams`, one stream_ref per trace stream); any other resource
// gets the plain calls. What is still live at the end is freed after the clock stops, so the
// resource ends as it began. The observer sees every event after it ran (for progress and for
// sampling the figures over time) and costs nothing when it is the default.
// Complexity: O(1) bookkeeping per event (an array indexed by the trace's slots) on top of the
// resource. Thread safety: one thread. Exhaustion: the resource's exception propagates after
// every block taken so far is freed.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/observe/trace.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace poolkit {

struct replay_result {
    std::size_t events = 0;
    double seconds = 0;  // wall time of the allocate and free calls, with the loop around them

    [[nodiscard]] double ns_per_op() const noexcept { return events == 0 ? 0.0 : seconds * 1e9 / static_cast<double>(events); }
};

// An observer that does nothing.
struct ignore_events {
    void operator()(std::size_t, const trace_event&) const noexcept {}
};

// The trace's stream handles, as stream_refs, for resources whose streams are simulated (a CPU
// replay): the handle value itself, never dereferenced.
[[nodiscard]] inline std::vector<stream_ref> simulated_streams(const trace& t) {
    std::vector<stream_ref> streams;
    streams.reserve(t.streams.size());
    for (std::uint64_t handle : t.streams) {
        streams.emplace_back(reinterpret_cast<stream_handle>(static_cast<std::uintptr_t>(handle)));
    }
    return streams;
}

// `streams` maps the trace's streams to stream_refs; a stream without an entry is the default stream.
template <resource R, class Observer = ignore_events>
replay_result replay(const trace& t, R& resource, std::span<const stream_ref> streams = {}, Observer&& observe = {}) {
    const auto stream_of = [streams](std::uint32_t index) noexcept { return index < streams.size() ? streams[index] : default_stream; };
    std::vector<void*> slots(t.slots, nullptr);
    std::vector<std::uint32_t> slot_stream(stream_resource<R> ? t.slots : 0, 0);
    const auto free_slot = [&](std::uint32_t slot, std::size_t bytes, std::uint32_t stream) noexcept {
        if constexpr (stream_resource<R>) {
            resource.deallocate_async(slots[slot], bytes, default_alignment, stream_of(stream));
        } else {
            static_cast<void>(stream);
            resource.deallocate(slots[slot], bytes, default_alignment);
        }
        slots[slot] = nullptr;
    };
    // Frees what is live after `done` events, by the sizes the trace gave them.
    const auto free_live = [&](std::size_t done) noexcept {
        std::vector<std::size_t> bytes(t.slots, 0);
        for (std::size_t i = 0; i < done; ++i) {
            const trace_event& e = t.events[i];
            bytes[e.slot] = e.action == trace_action::allocate ? e.bytes : 0;
        }
        for (std::uint32_t slot = 0; slot < t.slots; ++slot) {
            if (slots[slot] != nullptr) free_slot(slot, bytes[slot], stream_resource<R> ? slot_stream[slot] : 0);
        }
    };

    replay_result result;
    std::size_t index = 0;
    const auto start = std::chrono::steady_clock::now();
    try {
        for (; index < t.events.size(); ++index) {
            const trace_event& e = t.events[index];
            if (e.action == trace_action::allocate) {
                if constexpr (stream_resource<R>) {
                    slot_stream[e.slot] = e.stream;
                    slots[e.slot] = resource.allocate_async(e.bytes, default_alignment, stream_of(e.stream));
                } else {
                    slots[e.slot] = resource.allocate(e.bytes, default_alignment);
                }
            } else {
                free_slot(e.slot, e.bytes, e.stream);
            }
            observe(index, e);
        }
    } catch (...) {
        free_live(index);
        throw;
    }
    const auto stop = std::chrono::steady_clock::now();
    free_live(t.events.size());
    result.events = t.events.size();
    result.seconds = std::chrono::duration<double>(stop - start).count();
    return result;
}

}  // namespace poolkit
