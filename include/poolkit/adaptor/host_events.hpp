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
// after destruction, reported by throwing std::logic_error. declare_lasting(s) promises that s is
// never destroyed (cuda_events::declare_lasting); destroying it then throws std::logic_error, and
// lasting(s) says so (the default stream is lasting).
// The most recent waits (up to log_limit) are logged with a count of all of them, so tests can
// check how a reuse was ordered; memory stays bounded by the waits not yet completed, however long
// a simulation runs. per_thread_stream() names another stream on each host thread, as
// cudaStreamPerThread does, so that per-thread streams can be tested; calls from several threads are
// serialized by a mutex. Models the Events policy of stream_ordered.
//
// Capture (CUDA graphs): begin_capture(s, mode) puts s in capture, as cudaStreamBeginCapture does.
// Work submitted to a capturing stream goes into the capture, not the timeline; an event recorded
// there is a captured event; a stream that waits on one joins the capture. end_capture(s) returns
// the graph, and launch(graph, stream) issues it as one item of work. What CUDA forbids during a
// capture throws capture_error and invalidates the captures concerned (end_capture then returns an
// invalid graph), so that a CPU test sees every call that would break a capture on a GPU:
// - asking about or waiting on the host for a captured event, or asking about a stream in capture;
// - a stream in capture waiting on an event from outside it (or from another capture);
// - waiting on the host for the whole device while any stream is capturing;
// - a potentially unsafe call — an upstream's allocation (unsafe_call()) — from a thread that a
//   capture prohibits: its own capture not begun relaxed, or, while the thread's mode is global
//   (the default), another thread's global capture. unprohibited(f) runs f in relaxed mode, as
//   cudaThreadExchangeStreamCaptureMode does. Queries and host waits of work outside any capture
//   are allowed in every mode, as cuda_events makes them (relaxed around each);
// - a call that synchronizes the device implicitly (synchronizing_call(): cudaFree) while any
//   stream is capturing, whatever the mode;
// - asking a stream in capture for its identity (cuStreamGetId fails there, whatever the mode).
// on_graph_gone(s, f) attaches f to the graph being captured on s, as a CUDA user object retained
// by it does: f runs once the graph is destroyed (destroy_graph) and the work its launches issued
// has completed, or at end_capture when the capture was invalidated (no graph comes out).
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace poolkit {

// How a capture limits potentially unsafe calls (cudaStreamCaptureMode): global, those of every
// thread in global mode; local, those of the capturing thread; relaxed, none.
enum class capture_mode : unsigned char { global, local, relaxed };

// A call that CUDA forbids during a stream capture (host_events' model of it).
class capture_error : public std::logic_error {
public:
    using std::logic_error::logic_error;
};

class host_events {
public:
    struct event_type {
        std::size_t stream = 0;  // index of the stream it was recorded on
        std::uint64_t position = 0;  // work items issued there at record time
        std::uint64_t capture = 0;  // the capture it was recorded in (0: none)
    };
    // What end_capture() returns: the capture's id, the work items in it, and whether it is
    // usable (a forbidden call invalidated it).
    struct captured_graph {
        std::uint64_t id = 0;
        std::uint64_t items = 0;
        bool valid = false;
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

    // Issues one item of work on `stream`; returns its position (0 for a capturing stream: the item
    // goes into the capture).
    std::uint64_t submit(stream_ref stream) {
        const std::lock_guard lock(timeline_->mutex);
        auto& s = alive(stream);
        if (s.capture != 0) {
            ++find_capture(s.capture)->items;
            return 0;
        }
        return ++s.issued;
    }

    // Completes all work issued on `stream` so far, and what it waits for.
    void complete(stream_ref stream) {
        run(locked([&] {
            auto& s = state(stream);
            complete_until(s, s.issued);
        }));
    }

    // Completes the work issued on `stream` up to `position` (a value submit() returned), and what
    // it waits for: work that finishes in the order it was issued, some of it still running.
    void complete(stream_ref stream, std::uint64_t position) {
        run(locked([&] {
            auto& s = state(stream);
            complete_until(s, std::min(position, s.issued));
        }));
    }

    void complete_all() {
        run(locked([&] { complete_everything(); }));
    }

    // The handle must not be used again (it is never handed out again either).
    void destroy_stream(stream_ref stream) {
        POOLKIT_ASSERT(stream.get() != nullptr, "the default stream cannot be destroyed");
        const std::lock_guard lock(timeline_->mutex);
        auto& s = alive(stream);
        if (s.capture != 0) throw capture_error("poolkit::host_events: a stream in capture was destroyed");
        if (s.lasting) throw std::logic_error("poolkit::host_events: a stream declared lasting was destroyed");
        s.destroyed = true;
    }

    // Promises that `stream` (not the per-thread handle) is never destroyed.
    void declare_lasting(stream_ref stream) {
        POOLKIT_ASSERT(stream.get() != per_thread_handle(), "a per-thread handle names a stream per thread");
        const std::lock_guard lock(timeline_->mutex);
        alive(stream).lasting = true;
    }
    // Whether `stream` is never destroyed: the default stream, or one declared lasting.
    [[nodiscard]] bool lasting(stream_ref stream) const {
        if (stream.get() == per_thread_handle()) return false;
        const std::lock_guard lock(timeline_->mutex);
        const stream_state& s = state(stream);
        return stream.get() == nullptr || s.lasting;
    }

    // Capture. Puts `stream` in a new capture begun by this thread; returns its id.
    std::uint64_t begin_capture(stream_ref stream, capture_mode mode = capture_mode::global) {
        const std::lock_guard lock(timeline_->mutex);
        auto& s = alive(stream);
        if (s.capture != 0) throw capture_error("poolkit::host_events: begin_capture on a stream already capturing");
        s.capture = ++timeline_->last_capture;
        timeline_->captures.push_back({s.capture, mode, std::this_thread::get_id(), s.index, 0, false, {}});
        return s.capture;
    }
    // Ends the capture `stream` began; every stream that joined it leaves it.
    captured_graph end_capture(stream_ref stream) {
        captured_graph graph;
        std::vector<std::function<void()>> gone;  // an invalidated capture's: no graph holds them
        {
            const std::lock_guard lock(timeline_->mutex);
            auto& s = alive(stream);
            capture_state* c = s.capture != 0 ? find_capture(s.capture) : nullptr;
            if (c == nullptr || c->origin != s.index)
                throw capture_error("poolkit::host_events: end_capture on a stream that began no capture");
            graph = {c->id, c->items, !c->invalid};
            if (graph.valid) {
                timeline_->graphs.push_back({graph.id, std::move(c->gone), 0, 0, false});
            } else {
                gone = std::move(c->gone);
            }
            for (auto& member : timeline_->streams) {
                if (member.capture == graph.id) member.capture = 0;
            }
            std::erase_if(timeline_->captures, [&](const capture_state& x) { return x.id == graph.id; });
        }
        run(gone);
        return graph;
    }
    // Issues `graph` on `stream` as one item of work.
    std::uint64_t launch(const captured_graph& graph, stream_ref stream) {
        if (!graph.valid) throw capture_error("poolkit::host_events: launch of a graph whose capture was invalidated");
        const std::lock_guard lock(timeline_->mutex);
        graph_state* g = find_graph(graph.id);
        if (g == nullptr || g->destroyed) throw std::logic_error("poolkit::host_events: launch of a destroyed graph");
        auto& s = alive(stream);
        if (s.capture != 0) {  // into the capture, as a child graph
            ++find_capture(s.capture)->items;
            return 0;
        }
        g->last_stream = s.index;
        g->last_launch = ++s.issued;
        return g->last_launch;
    }
    // `gone` runs once the graph being captured on `stream` is gone (a CUDA user object the graph
    // retains); returns true, as it will tell. Throws std::logic_error for a stream not in capture.
    bool on_graph_gone(stream_ref stream, std::function<void()> gone) {
        const std::lock_guard lock(timeline_->mutex);
        const auto& s = alive(stream);
        if (s.capture == 0) throw std::logic_error("poolkit::host_events: on_graph_gone for a stream not in capture");
        find_capture(s.capture)->gone.push_back(std::move(gone));
        return true;
    }
    // cudaGraphExecDestroy and cudaGraphDestroy: the graph's on_graph_gone functions run once the
    // work of its last launch completed (now, or at the complete() that completes it).
    void destroy_graph(const captured_graph& graph) {
        run(locked([&] {
            graph_state* g = find_graph(graph.id);
            if (g == nullptr || g->destroyed) throw std::logic_error("poolkit::host_events: destroy_graph of no live graph");
            g->destroyed = true;
        }));
    }
    // The capture `stream` is in (0: none): cudaStreamGetCaptureInfo.
    [[nodiscard]] std::uint64_t capture_of(stream_ref stream) const {
        const std::lock_guard lock(timeline_->mutex);
        return state(stream).capture;
    }
    [[nodiscard]] bool capturing() const {
        const std::lock_guard lock(timeline_->mutex);
        return !timeline_->captures.empty();
    }
    // Sets this thread's capture mode; returns the one it had (cudaThreadExchangeStreamCaptureMode).
    capture_mode exchange_mode(capture_mode mode) {
        const std::lock_guard lock(timeline_->mutex);
        return std::exchange(timeline_->thread_modes[std::this_thread::get_id()], mode);
    }
    // Runs `f` with this thread in relaxed mode, then puts its mode back.
    template <class F>
    decltype(auto) unprohibited(F&& f) {
        struct restore {
            host_events& events;
            capture_mode mode;
            ~restore() { events.exchange_mode(mode); }
        } guard{*this, exchange_mode(capture_mode::relaxed)};
        return std::forward<F>(f)();
    }
    // A potentially unsafe call of an upstream (cudaMalloc, say), named `what`: throws capture_error
    // where a capture prohibits it on this thread.
    void unsafe_call(const char* what) {
        const std::lock_guard lock(timeline_->mutex);
        check_unsafe(what);
    }
    // A call that synchronizes the device implicitly (cudaFree, say): throws while any stream is
    // capturing.
    void synchronizing_call(const char* what) {
        const std::lock_guard lock(timeline_->mutex);
        if (!timeline_->captures.empty()) invalidate_all(what);
    }
    // Calls that broke a capture so far.
    [[nodiscard]] std::size_t capture_errors() const noexcept { return timeline_->capture_errors; }

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
        return {s.index, s.capture != 0 ? 0 : s.issued, s.capture};
    }
    void wait(stream_ref waiter, const event_type& event) {
        const std::lock_guard lock(timeline_->mutex);
        auto& s = alive(waiter);
        if (s.capture != 0 || event.capture != 0) {
            if (s.capture == 0) {  // the waiter joins the event's capture (a fork)
                s.capture = event.capture;
                return;
            }
            if (event.capture != s.capture) {
                invalidate(s.capture, event.capture == 0 ? "a stream in capture waited on an event from outside it"
                                                         : "a stream in capture waited on another capture's event");
            }
            return;  // an edge of the graph
        }
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
        check_event(event, "an event was queried");
        return is_done(event);
    }
    // Whether every item issued on `stream` so far has completed (cudaStreamQuery; counted as a
    // query). Forbidden on a stream in capture.
    [[nodiscard]] bool idle(stream_ref stream) const {
        const std::lock_guard lock(timeline_->mutex);
        ++timeline_->query_count;
        const stream_state& s = alive(stream);
        if (s.capture != 0) invalidate(s.capture, "a stream in capture was queried");
        return s.completed == s.issued;
    }
    // The host blocks until the event's work is done: the simulation completes just that.
    void synchronize(const event_type& event) {
        run(locked([&] {
            check_event(event, "the host waited for an event");
            ++timeline_->synchronizations;
            complete_until(timeline_->streams[event.stream], event.position);
        }));
    }
    // The host waits for everything on every stream.
    void synchronize_all() {
        run(locked([&] {
            if (!timeline_->captures.empty()) invalidate_all("the host waited for the whole device");
            ++timeline_->synchronizations;
            complete_everything();
        }));
    }
    void recycle(const event_type&) noexcept {}
    // Streams are never handed out again: the index tells them apart (for the per-thread handle,
    // the calling thread's stream).
    // Asking a stream in capture for its id breaks the capture, as cuStreamGetId does.
    [[nodiscard]] std::uint64_t identity(stream_ref stream) const {
        const std::lock_guard lock(timeline_->mutex);
        const stream_state& s = state(stream);
        if (s.capture != 0) invalidate(s.capture, "asking a stream in capture for its id");
        return s.index;
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
        bool lasting = false;  // declare_lasting
        std::uint64_t capture = 0;  // the capture it is in (0: none)
    };
    struct capture_state {
        std::uint64_t id;
        capture_mode mode;
        std::thread::id thread;  // that began it
        std::size_t origin;  // the stream it began on
        std::uint64_t items;
        bool invalid;
        std::vector<std::function<void()>> gone;  // on_graph_gone
    };
    struct graph_state {
        std::uint64_t id;
        std::vector<std::function<void()>> gone;
        std::size_t last_stream;  // where it was last launched
        std::uint64_t last_launch;  // that launch's position there (0: never launched)
        bool destroyed;
    };
    struct timeline {
        std::deque<stream_state> streams;  // deque: handles are addresses and must stay put
        std::map<std::thread::id, stream_state*> per_thread;
        std::vector<logged_wait> waits;
        std::uint64_t wait_count = 0;
        std::uint64_t record_count = 0;
        std::uint64_t query_count = 0;
        std::vector<capture_state> captures;  // in progress
        std::vector<graph_state> graphs;  // captured, until their on_graph_gone functions ran
        std::uint64_t last_capture = 0;
        std::map<std::thread::id, capture_mode> thread_modes;  // global where absent
        std::size_t capture_errors = 0;
        std::size_t synchronizations = 0;
        std::mutex mutex;
    };

    // Runs `f` under the lock; then returns the on_graph_gone functions of destroyed graphs whose
    // work completed, to be run once the lock is released (run()).
    template <class F>
    std::vector<std::function<void()>> locked(F&& f) {
        const std::lock_guard lock(timeline_->mutex);
        std::forward<F>(f)();
        std::vector<std::function<void()>> ready;
        std::erase_if(timeline_->graphs, [&](graph_state& g) {
            if (!g.destroyed || timeline_->streams[g.last_stream].completed < g.last_launch) return false;
            for (auto& gone : g.gone) ready.push_back(std::move(gone));
            return true;
        });
        return ready;
    }
    static void run(const std::vector<std::function<void()>>& functions) {
        for (const auto& f : functions) f();
    }
    graph_state* find_graph(std::uint64_t id) const {
        for (auto& g : timeline_->graphs) {
            if (g.id == id) return &g;
        }
        return nullptr;
    }

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
    capture_state* find_capture(std::uint64_t id) const noexcept {
        for (auto& c : timeline_->captures) {
            if (c.id == id) return &c;
        }
        return nullptr;
    }
    [[noreturn]] void fail(const std::string& what) const {
        ++timeline_->capture_errors;
        throw capture_error("poolkit::host_events: " + what + " during a stream capture");
    }
    [[noreturn]] void invalidate(std::uint64_t id, std::uint64_t other, const std::string& what) const {
        for (auto& c : timeline_->captures) c.invalid = c.invalid || c.id == id || c.id == other;
        fail(what);
    }
    [[noreturn]] void invalidate(std::uint64_t id, const std::string& what) const { invalidate(id, id, what); }
    [[noreturn]] void invalidate_all(const std::string& what) const {
        for (auto& c : timeline_->captures) c.invalid = true;
        fail(what);
    }
    // A potentially unsafe call from this thread: the captures that prohibit it are invalidated.
    void check_unsafe(const std::string& what) const {
        const std::thread::id here = std::this_thread::get_id();
        const auto mode = timeline_->thread_modes.find(here);
        const capture_mode thread_mode = mode == timeline_->thread_modes.end() ? capture_mode::global : mode->second;
        if (thread_mode == capture_mode::relaxed) return;
        bool prohibited = false;
        for (auto& c : timeline_->captures) {
            const bool own = c.thread == here && c.mode != capture_mode::relaxed;
            const bool others = thread_mode == capture_mode::global && c.thread != here && c.mode == capture_mode::global;
            if (own || others) {
                c.invalid = true;
                prohibited = true;
            }
        }
        if (prohibited) fail(what + " (a potentially unsafe call)");
    }
    // Asking about or waiting for `event`: never a captured one.
    void check_event(const event_type& event, const std::string& what) const {
        if (event.capture != 0) invalidate(event.capture, what + ", a captured one,");
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
