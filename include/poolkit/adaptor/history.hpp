// history: a bounded record of what an allocator did, for the question "why did memory grow": blocks
// handed out and freed, segments taken from and given back to the device, refusals. recorded<>
// (adaptor/recorded.hpp) writes into it; history_json() renders it as the "device_traces" of
// PyTorch's torch.cuda.memory._snapshot(), which PyTorch's viewers (_memory_viz trace_plot,
// pytorch.org/memory_viz) draw.
//
//   history h;
//   h.start(100'000);                         // off until started; keeps the newest 100,000 events
//   recording pool{best_fit<...>{...}, h};    // every allocate and free of `pool` is an event
//   ...
//   for (const history_event& e : h.events()) ...   // oldest first
//
// Each event may carry a label from a history_context given to start(): a number the caller
// chooses (a call stack's id, a training step), gathered outside poolkit's locks and handed back
// through release() when the event leaves the history, so that the caller can free what it
// names. Segment events carry none: they happen under a pool's lock.
// Complexity: amortized O(1) per event, one lock; one atomic load per call while not started. Thread
// safety: every member may be called from any thread.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace poolkit {

// What happened, in PyTorch's words. free_requested: the user freed a block; free_completed: it is
// reusable (at once for a block no other stream uses; after that work for one given to
// record_use). segment_alloc/free: memory taken from or given back to the upstream; segment_map/
// unmap: physical memory mapped into or out of reserved address space (virtual memory); oom: a
// request refused.
enum class history_action : std::uint8_t {
    alloc,
    free_requested,
    free_completed,
    segment_alloc,
    segment_free,
    segment_map,
    segment_unmap,
    oom,
};

[[nodiscard]] constexpr const char* name_of(history_action action) noexcept {
    constexpr const char* names[] = {"alloc",        "free_requested", "free_completed", "segment_alloc",
                                     "segment_free", "segment_map",    "segment_unmap",  "oom"};
    return names[static_cast<std::size_t>(action)];
}

struct history_event {
    history_action action = history_action::alloc;
    std::uintptr_t address = 0;  // 0 for oom
    std::size_t bytes = 0;  // as asked (blocks), as taken (segments)
    std::uintptr_t stream = 0;  // the stream's handle; 0: the default stream, or none
    std::int64_t time_us = 0;  // microseconds since the Unix epoch
    std::uint64_t label = 0;  // the context's label; 0: none
    std::size_t device_free = 0;  // oom: the bytes the device or limit still had, where known
};

// Labels events (all function pointers may be null). gather(user, action) is called for alloc,
// free_requested and oom events, on the thread that made them, holding none of poolkit's locks;
// it returns the event's label (0: none). release(user, label) is called once for each nonzero
// label when its event leaves the history (overwritten, stop(), start(), destruction), holding the
// history's lock: it must not call into the history.
struct history_context {
    std::uint64_t (*gather)(void* user, history_action action) noexcept = nullptr;
    void (*release)(void* user, std::uint64_t label) noexcept = nullptr;
    void* user = nullptr;
};

class history {
public:
    history() = default;
    history(const history&) = delete;
    history& operator=(const history&) = delete;
    ~history() { stop(); }

    // Starts recording into a ring of at most `max_entries` events (at least 1; it grows to that
    // as events come, so SIZE_MAX means "every event host memory holds"), dropping what was
    // recorded before.
    void start(std::size_t max_entries, history_context context = {}) {
        std::lock_guard lock(mutex_);
        drop_all();
        ring_ = {};
        max_entries_ = std::max<std::size_t>(max_entries, 1);
        context_ = context;
        recording_.store(true, std::memory_order_release);
    }
    // Stops recording and drops every event.
    void stop() noexcept {
        std::lock_guard lock(mutex_);
        recording_.store(false, std::memory_order_release);
        drop_all();
        ring_ = {};
        max_entries_ = 0;
        context_ = {};
    }
    [[nodiscard]] bool recording() const noexcept { return recording_.load(std::memory_order_relaxed); }

    // The label of an event about to be recorded (0 when not recording or unlabelled).
    [[nodiscard]] std::uint64_t label(history_action action) const noexcept {
        if (!recording()) return 0;
        history_context context;
        {
            std::lock_guard lock(mutex_);
            context = context_;
        }
        return context.gather != nullptr ? context.gather(context.user, action) : 0;
    }

    // Records an event (nothing while not recording; a label is then released).
    void record(history_action action, const void* address, std::size_t bytes, std::uintptr_t stream, std::uint64_t label = 0,
                std::size_t device_free = 0) noexcept {
        record_at(action, reinterpret_cast<std::uintptr_t>(address), bytes, stream, label, device_free);
    }
    // The same with the address as a number (of a block freed already, say).
    void record_at(history_action action, std::uintptr_t address, std::size_t bytes, std::uintptr_t stream, std::uint64_t label = 0,
                   std::size_t device_free = 0) noexcept {
        const history_event event{
            action,
            address,
            bytes,
            stream,
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count(),
            label,
            device_free};
        std::lock_guard lock(mutex_);
        if (!recording()) {
            release(label);
            return;
        }
        if (ring_.size() < max_entries_) {
            try {
                ring_.push_back(event);
                return;
            } catch (...) {  // no host memory to grow: the ring is full at this size
                max_entries_ = ring_.size();
                if (ring_.empty()) return release(label);
            }
        }
        release(ring_[oldest_].label);
        ring_[oldest_] = event;
        oldest_ = (oldest_ + 1) % ring_.size();
        ++dropped_;
    }

    // Gives back a label gathered for an event that was not recorded after all.
    void discard(std::uint64_t label) noexcept {
        if (label == 0) return;
        std::lock_guard lock(mutex_);
        release(label);
    }

    // The events held, oldest first.
    [[nodiscard]] std::vector<history_event> events() const {
        std::lock_guard lock(mutex_);
        std::vector<history_event> out;
        out.reserve(ring_.size());
        out.insert(out.end(), ring_.begin() + static_cast<std::ptrdiff_t>(oldest_), ring_.end());
        out.insert(out.end(), ring_.begin(), ring_.begin() + static_cast<std::ptrdiff_t>(oldest_));
        return out;
    }
    // Events overwritten by newer ones since start().
    [[nodiscard]] std::size_t dropped() const {
        std::lock_guard lock(mutex_);
        return dropped_;
    }
    [[nodiscard]] std::size_t max_entries() const {
        std::lock_guard lock(mutex_);
        return max_entries_;
    }

private:
    void release(std::uint64_t label) const noexcept {
        if (label != 0 && context_.release != nullptr) context_.release(context_.user, label);
    }
    // Under the lock.
    void drop_all() noexcept {
        for (const history_event& event : ring_) release(event.label);
        ring_.clear();
        oldest_ = 0;
        dropped_ = 0;
    }

    mutable std::mutex mutex_;
    std::atomic<bool> recording_{false};
    std::vector<history_event> ring_;  // at most max_entries_; once full, the oldest is at oldest_
    std::size_t max_entries_ = 0;
    std::size_t oldest_ = 0;
    std::size_t dropped_ = 0;
    history_context context_;
};

// The history of recorded<> adaptors built without one (lanes of a stream_ordered among them),
// off until started. Never destroyed: pools that outlive main may still record into it.
[[nodiscard]] inline history& default_history() {
    static history* const shared = new history;
    return *shared;
}

// The events as the JSON list of one device's "device_traces" in PyTorch's snapshot:
//   [{"action": "alloc", "addr": 139637976727552, "size": 1024, "stream": 0, "time_us": ...,
//     "label": 7}, {"action": "oom", ..., "device_free": 0}]
// Addresses decimal, as PyTorch writes them; "label" only where nonzero, "device_free" only for oom.
[[nodiscard]] inline std::string history_json(std::span<const history_event> events) {
    std::string json = "[";
    for (const history_event& e : events) {
        if (json.size() > 1) json += ", ";
        json += std::string("{\"action\": \"") + name_of(e.action) + "\", \"addr\": " + std::to_string(e.address) +
                ", \"size\": " + std::to_string(e.bytes) + ", \"stream\": " + std::to_string(e.stream) +
                ", \"time_us\": " + std::to_string(e.time_us);
        if (e.label != 0) json += ", \"label\": " + std::to_string(e.label);
        if (e.action == history_action::oom) json += ", \"device_free\": " + std::to_string(e.device_free);
        json += "}";
    }
    return json + "]";
}

}  // namespace poolkit
