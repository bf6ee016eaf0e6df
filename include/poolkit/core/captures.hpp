// How a stream-ordered block (stream_ordered, per_thread) learns that a stream is in capture
// (CUDA graphs, docs/stream_ordering.md), and captures announced to every such block in the
// process.
//
//   capture_check::every_call  each stream call asks (Events::capture_of: on CUDA one driver call,
//                              cuStreamIsCapturing): any capture works, announced or not. The default.
//   capture_check::announced   asks only while a capture is announced somewhere in the process;
//                              otherwise a stream call costs nothing more. Every capture through
//                              the block must be announced: one that is not is broken by the first
//                              call that asks its stream what capture forbids (stream_ordered asks
//                              each call), and per_thread may even keep a block the graph uses in
//                              a thread cache when such a capture frees it (its frees ask nothing).
//   capture_check::never       never asks: no capture may go through the block.
//
// Announce a capture for as long as calls on its streams may be made in it: from before
// cudaStreamBeginCapture until after cudaStreamEndCapture —
//
//   { poolkit::announced_capture announce; cudaStreamBeginCapture(s, mode); ...; cudaStreamEndCapture(s, &graph); }
//
// The count is one relaxed atomic: a thread that makes calls on the capturing stream must see the
// announcement through the program's own synchronization with the announcing thread (as it must
// see the capture's beginning).
#pragma once

#include <atomic>
#include <cstddef>

namespace poolkit {

enum class capture_check : unsigned char { every_call, announced, never };

namespace detail {
inline std::atomic<std::size_t> announced_captures{0};
}  // namespace detail

inline void announce_capture() noexcept { detail::announced_captures.fetch_add(1, std::memory_order_relaxed); }
inline void end_announced_capture() noexcept { detail::announced_captures.fetch_sub(1, std::memory_order_relaxed); }
[[nodiscard]] inline bool captures_announced() noexcept { return detail::announced_captures.load(std::memory_order_relaxed) != 0; }

// Whether a block checking captures as `check` asks about the stream of this call.
[[nodiscard]] inline bool asks_about_captures(capture_check check) noexcept {
    return check == capture_check::every_call || (check == capture_check::announced && captures_announced());
}

// A capture announced for this object's lifetime.
class announced_capture {
public:
    announced_capture() noexcept { announce_capture(); }
    announced_capture(const announced_capture&) = delete;
    announced_capture& operator=(const announced_capture&) = delete;
    ~announced_capture() { end_announced_capture(); }
};

}  // namespace poolkit
