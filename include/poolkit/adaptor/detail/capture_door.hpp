// capture_door<Events, Graphs>: stream_ordered's door for CUDA graphs — which capture a call is
// in, and what the calls outside any capture may do while a capture the pool served may run.
//
// Contract:
// - capture_of(stream) is the capture a stream call is in (0: none), asked as checks() says
//   (core/captures.hpp: every call, only while a capture is announced, never). Only Events that see
//   captures (capture_of and unprohibited: cuda_events, host_events) are asked; with others no
//   call is ever in capture.
// - The graph pools (Graphs: detail/graph_pools.hpp) are made at the first capture (graphs(make))
//   and live as long as the door. graphs() is nullptr before: the eager path then costs one test.
// - eager(key, f, into_pool, give_back) runs f, a call outside any capture (`key`: its stream's
//   capture key, nullptr for a plain call). First, graph pools whose graphs are gone are released
//   (their blocks to `into_pool`). While a capture the pool served may still run, f runs
//   capture-safe (capture_safe()): the thread in relaxed capture mode (Events::unprohibited), and
//   safe() true, so that the owner makes no device-wide wait and gives no memory back upstream:
//   its gate holds each return here (hold()). The first call that finds no capture running gives
//   what was held to `give_back`, one chunk at a time.
// - take_held() hands the owner what is still held, at its destruction.
// Complexity: O(1) per call while no graph pool exists; else graph_pools' running_after.
// Not thread-safe.
#pragma once

#include <poolkit/adaptor/detail/front_cache.hpp>
#include <poolkit/adaptor/detail/stream_table.hpp>
#include <poolkit/adaptor/stream_concepts.hpp>
#include <poolkit/core/captures.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace poolkit::detail {

template <class Events, class Graphs>
class capture_door {
public:
    explicit capture_door(Events& events) noexcept : events_(&events) {}
    capture_door(const capture_door&) = delete;
    capture_door& operator=(const capture_door&) = delete;

    // The capture `stream` is in (0: none), asked where `check` says: on CUDA one driver call.
    [[nodiscard]] std::uint64_t capture_of(stream_ref stream) { return capture_of(stream, check_); }
    [[nodiscard]] std::uint64_t capture_of([[maybe_unused]] stream_ref stream, [[maybe_unused]] capture_check check) {
        if constexpr (capture_events<Events>) {
            if (!asks_about_captures(check)) return 0;
            return static_cast<std::uint64_t>(events_->capture_of(stream));
        } else {
            return 0;
        }
    }
    void checks(capture_check check) noexcept { check_ = check; }
    [[nodiscard]] capture_check checks() const noexcept { return check_; }

    // The graph pools: nullptr before the first capture; made by `make()` (a unique_ptr) then.
    [[nodiscard]] Graphs* graphs() const noexcept { return graphs_.get(); }
    template <class Make>
    Graphs& graphs(Make&& make) {
        if (graphs_ == nullptr) graphs_ = std::forward<Make>(make)();
        return *graphs_;
    }
    // Whether a capture the pool served may still run.
    [[nodiscard]] bool running() const noexcept { return graphs_ != nullptr && graphs_->running(); }

    // In capture_safe(): the owner makes no device-wide wait and gives nothing back upstream.
    [[nodiscard]] bool safe() const noexcept { return safe_; }
    // A chunk the owner's pool gave back while safe(): held until no capture runs.
    void hold(const free_block& block) noexcept {
        try {
            held_.push_back(block);
        } catch (...) {  // no room to note it: lost to the upstream until the process ends
        }
    }
    [[nodiscard]] std::vector<free_block> take_held() noexcept { return std::exchange(held_, {}); }

    template <class F, class IntoPool, class GiveBack>
    decltype(auto) eager(const stream_key* key, F&& f, IntoPool&& into_pool, GiveBack&& give_back) {
        if (graphs_ != nullptr) [[unlikely]] {
            release_gone(into_pool);
            if (during_captures(key, give_back)) return capture_safe(std::forward<F>(f));
        }
        return std::forward<F>(f)();
    }

    // Runs `f` as no capture forbids: this thread in relaxed capture mode (event queries and
    // cudaMalloc allowed), safe() meanwhile.
    template <class F>
    decltype(auto) capture_safe(F&& f) {
        if constexpr (capture_events<Events>) {
            const bool outer = std::exchange(safe_, true);
            struct restore {
                bool& flag;
                bool value;
                ~restore() { flag = value; }
            } guard{safe_, outer};
            return events_->unprohibited(std::forward<F>(f));
        } else {
            return std::forward<F>(f)();
        }
    }

    // A call outside any capture on the stream of `key` (nullptr: a plain call). Returns whether
    // captures the pool served may still run; when none do, what was held goes to `give_back`
    // (also where a wait for the whole device ended them). Requires graphs().
    template <class GiveBack>
    bool during_captures(const stream_key* key, GiveBack&& give_back) {
        if (graphs_->running() && graphs_->running_after(key)) return true;
        if (!held_.empty()) [[unlikely]] {
            for (const free_block& b : take_held()) give_back(b);
        }
        return false;
    }

    // Graph pools release themselves once their graphs are gone (graph_pools::watch), at the next
    // call outside any capture: no host wait, their launches are done.
    template <class IntoPool>
    void release_gone(IntoPool&& into_pool) noexcept {
        if (!graphs_->graphs_gone()) [[likely]]
            return;
        try {
            graphs_->release_gone(into_pool);
        } catch (...) {  // no host memory: those pools wait for their explicit release or the owner's end
        }
    }

private:
    Events* events_;
    std::unique_ptr<Graphs> graphs_;  // made at the first capture
    std::vector<free_block> held_;  // chunks the owner's pool gave back during captures
    bool safe_ = false;
    capture_check check_ = capture_check::every_call;
};

}  // namespace poolkit::detail
