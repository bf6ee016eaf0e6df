// What stream_ordered asks of its parts: the Events policy (events_policy), the lane policy
// (pool_lanes: it makes cached_pools over a gated reference to the upstream), and the default
// events.
#pragma once

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/detail/gated_upstream.hpp>
#include <poolkit/adaptor/lanes.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <concepts>
#include <cstdint>

#if POOLKIT_HAS_CUDA
#  include <poolkit/adaptor/cuda_events.hpp>
#endif

namespace poolkit {

// A pool that can serve a request from what it already holds, without growing.
template <class P>
concept cached_pool = resource<P> && has_release<P> && has_try_allocate_cached<P>;

// Events: record on a stream, let another stream wait, ask or block until done, recycle.
// Optional, where the policy can tell: idle(stream), whether all work issued on a stream is done
// (stream_ordered then covers a front with no event); lasting(stream), whether the program never
// destroys it; capture_of(stream) and unprohibited(f), what capture a stream is in and a call in
// relaxed capture mode (CUDA graphs are then served).
template <class E>
concept events_policy = requires(E& e, stream_ref stream, typename E::event_type event) {
    { e.record(stream) } -> std::same_as<typename E::event_type>;
    e.wait(stream, event);
    { e.done(event) } -> std::convertible_to<bool>;
    e.synchronize(event);
    e.synchronize_all();
    e.recycle(event);
    { E::per_thread(stream) } -> std::convertible_to<bool>;
    { e.identity(stream) } -> std::convertible_to<std::uint64_t>;
};

// Events that tell whether all work issued on a stream is done: idle(stream) (cudaStreamQuery).
template <class E>
concept idle_events = requires(E& e, stream_ref stream) {
    { e.idle(stream) } -> std::convertible_to<bool>;
};

// Events that tell which streams the program never destroys: lasting(stream). stream_ordered
// may then touch such a stream during another stream's call (cover its frees later, in one
// query, docs/stream_ordering.md).
template <class E>
concept lasting_events = requires(E& e, stream_ref stream) {
    { e.lasting(stream) } -> std::convertible_to<bool>;
};

// Events that see stream captures: capture_of(stream), the capture a stream is in (0: none), and
// unprohibited(f), f run in relaxed capture mode. CUDA graphs are served over them.
template <class E>
concept capture_events = requires(E& e, stream_ref stream) {
    { e.capture_of(stream) } -> std::convertible_to<std::uint64_t>;
    e.unprohibited([] { return 0; });
};

// What stream_ordered needs of its lane policy (adaptor/lanes.hpp): the pools it makes over a
// gated reference to the upstream (detail/gated_upstream.hpp) are cached_pools. Every strategy,
// combinator and adaptor-over-strategy stack of poolkit makes one through lanes<>.
template <class Lanes, class Upstream>
concept pool_lanes = lane_policy<Lanes, detail::gated_upstream<Upstream>> &&
                     cached_pool<typename Lanes::template pool_type<detail::gated_upstream<Upstream>>>;

// Streams are CUDA's where the toolkit is; without it no work runs on a stream, so every event is
// complete.
#if POOLKIT_HAS_CUDA
using default_events = cuda_events;
#else
using default_events = completed_events;
#endif

}  // namespace poolkit
