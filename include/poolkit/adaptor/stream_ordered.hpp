// stream_ordered<Pool, Events>: stream-ordered reuse over any caching strategy.
//
// Every stream that allocates gets a lane: its own Pool (rebound onto a poolkit::ref to one shared
// upstream), so a block freed on stream A is reusable on A at once, with no event. Plain
// allocate/deallocate use a lane of their own whose free blocks are idle. On a miss in its own
// lane, a request takes a free block from another lane after ordering itself behind that lane's
// work: an event recorded there and waited on by the requesting stream (cudaStreamWaitEvent, no
// host synchronization), or a host synchronization for the plain lane. Only then does its own
// lane grow; when the upstream is exhausted, every lane is synchronized and releases its wholly
// free chunks, and the request is tried once more before out_of_memory. So no stream strands
// memory. A block freed on another stream than the one whose lane it came from, or used on other
// streams (record_use, PyTorch's record_stream), waits in a deferred list with one event per
// stream until all are done, then returns to its lane.
// A per-thread handle (cudaStreamPerThread) names another stream on each thread, so no event can
// be recorded on another thread's lane: such lanes are left out when borrowing, and reclaimed only
// after the whole device is synchronized (the exhaustion path, release()).
// Complexity: a lane hit is the Pool's cached allocate plus one hash-map insert; a miss visits
// each lane once. While there is one lane and no record_use (one stream, as in most programs and
// every replay), blocks need no map at all: the first second lane fills it from a walk of the
// first (when the Pool offers the walk of observe/walk.hpp; otherwise the map is always kept).
// Thread safety: none; wrap in synchronized<>. Alignment: the Pool's.
// Stream semantics: as above. Streams must outlive their use here; call forget_stream(s) before
// destroying a stream that allocated here (its lane stays, idle, for others to take from).
// Exhaustion: out_of_memory with live, reserved and cached bytes summed over lanes.
//
// Pool requirements: a resource with `try_allocate_cached(bytes, alignment) noexcept` (serve from
// free blocks only, never grow), `release()`, constructible from (ref<Upstream>, options_type);
// it need not be movable.
// Events requirements: the events_policy concept below (cuda_events, host_events).
#pragma once

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/detail/pointer_map.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/detail/walk_merge.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace poolkit {

// A pool that can serve a request from what it already holds, without growing.
template <class P>
concept cached_pool = resource<P> && has_release<P> && has_try_allocate_cached<P>;

// Events: record on a stream, let another stream wait, ask or block until done, recycle.
template <class E>
concept events_policy = requires(E& e, stream_ref stream, typename E::event_type event) {
    { e.record(stream) } -> std::same_as<typename E::event_type>;
    e.wait(stream, event);
    { e.done(event) } -> std::convertible_to<bool>;
    e.synchronize(event);
    e.synchronize_all();
    e.recycle(event);
    { E::per_thread(stream) } -> std::convertible_to<bool>;
};

namespace detail {
template <class Pool, class NewUpstream>
struct rebind_upstream;
template <template <class...> class P, class U, class... Rest, class NewUpstream>
struct rebind_upstream<P<U, Rest...>, NewUpstream> {
    using type = P<NewUpstream, Rest...>;
};
}  // namespace detail

// Pool with its upstream replaced by NewUpstream: best_fit<U> -> best_fit<NewUpstream>.
template <class Pool, class NewUpstream>
using rebind_upstream_t = typename detail::rebind_upstream<Pool, NewUpstream>::type;

template <class Pool, events_policy Events>
    requires cached_pool<rebind_upstream_t<Pool, ref<typename Pool::upstream_type>>>
class stream_ordered : public forward_properties<stream_ordered<Pool, Events>, typename Pool::upstream_type> {
public:
    using upstream_type = typename Pool::upstream_type;
    using lane_pool = rebind_upstream_t<Pool, ref<upstream_type>>;
    using pool_options = typename Pool::options_type;
    using event_type = typename Events::event_type;

    stream_ordered()
        requires std::default_initializable<upstream_type> && std::default_initializable<Events>
        : stream_ordered(upstream_type{}) {}

    explicit stream_ordered(upstream_type upstream, pool_options options = {}, Events events = {})
        : upstream_(std::move(upstream)), options_(options), events_(std::move(events)) {}

    stream_ordered(const stream_ordered&) = delete;
    stream_ordered& operator=(const stream_ordered&) = delete;

    // Deferred blocks are waited for; lanes return everything to the upstream as they go.
    ~stream_ordered() {
        try {
            drain_deferred(true);
        } catch (...) {
            POOLKIT_ASSERT(false, "stream_ordered could not wait for its deferred blocks on destruction");
        }
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        return allocate_in(lane_for(stream, false), bytes, alignment);
    }

    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        if (pointer == nullptr) return;
        free_from(pointer, bytes, alignment, &stream);
    }

    // Memory usable on any stream at once.
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        return allocate_in(lane_for(stream_ref{}, true), bytes, alignment);
    }

    // The caller promises no work still uses the block.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        free_from(pointer, bytes, alignment, nullptr);
    }

    // The block at `pointer` is also used by work on `stream` (PyTorch's record_stream): its reuse
    // waits until the work issued there before its deallocation is done.
    void record_use(void* pointer, stream_ref stream) {
        start_tracking();
        live_block* found = live_.find(pointer);
        POOLKIT_ASSERT(found != nullptr, "record_use of a pointer stream_ordered did not hand out");
        if (found == nullptr) return;
        auto& streams = uses_[pointer];
        const use here{stream, thread_of(stream)};
        if (std::find(streams.begin(), streams.end(), here) == streams.end()) streams.push_back(here);
        found->used_elsewhere = true;
    }

    // Synchronizes `stream` and marks its lane idle, so the stream may be destroyed: its free
    // blocks stay for any other stream to take without an event.
    void forget_stream(stream_ref stream) {
        lane* forgotten = find_lane(stream, false);
        if (forgotten == nullptr) return;
        synchronize_lane(*forgotten);
        forgotten->idle = true;
        if (last_ == forgotten) last_ = nullptr;
    }

    // Waits for every lane's work and deferred block, then returns every wholly free chunk
    // upstream (PyTorch's empty_cache).
    void release() {
        drain_deferred(true);
        const bool foreign = std::any_of(lanes_.begin(), lanes_.end(), [](const auto& l) { return !reachable(*l); });
        if (foreign) events_.synchronize_all();
        for (auto& l : lanes_) {
            if (!foreign) synchronize_lane(*l);
            l->pool.release();
        }
    }

    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<lane_pool>
    {
        if (tracked_) return live_.find(pointer) != nullptr;
        return !lanes_.empty() && lanes_.front()->pool.owns(pointer) && !is_deferred(pointer);
    }

    void check_invariants() const
        requires has_check_invariants<lane_pool>
    {
        for (const auto& l : lanes_) l->pool.check_invariants();
        POOLKIT_VERIFY(tracked_ || lanes_.size() <= 1, "several lanes, but live blocks are not tracked");
        POOLKIT_VERIFY(!tracked_ || live_.size() == live_count_, "the live map lost count");
        live_.for_each([](const void* pointer, const live_block& block) {
            POOLKIT_VERIFY(block.owner != nullptr, "a live block without a lane");
            if constexpr (has_owns<lane_pool>) POOLKIT_VERIFY(block.owner->pool.owns(pointer), "a live block its lane does not own");
        });
        for (const auto& [pointer, streams] : uses_) {
            const live_block* block = live_.find(pointer);
            POOLKIT_VERIFY(block != nullptr && block->used_elsewhere, "record_use streams of a block not live");
        }
    }

    // The walk of walk.hpp over every lane: the chunks of all lanes in address order, each chunk
    // and its blocks with the stream of their lane (0 for the plain lane); a block waiting in the
    // deferred list is pending_free, not live. O(blocks + chunks log chunks + deferred log
    // deferred); the visits are kept on the host heap for the merge.
    template <class Visitor>
        requires walkable<lane_pool>
    void for_each_block(Visitor&& visit) const {
        std::vector<std::uintptr_t> pending;
        pending.reserve(deferred_.size());
        for (const auto& entry : deferred_) pending.push_back(reinterpret_cast<std::uintptr_t>(entry.pointer));
        std::sort(pending.begin(), pending.end());
        detail::walk_recording recording;
        for (const auto& l : lanes_) {
            const std::uintptr_t stream = stream_id(l->stream);
            l->pool.for_each_block([&](const chunk_view& chunk, const block_view& block) {
                chunk_view chunk_seen = chunk;
                chunk_seen.stream = stream;
                block_view seen = block;
                seen.stream = stream;
                if (seen.live && std::binary_search(pending.begin(), pending.end(), seen.address)) {
                    seen.live = false;
                    seen.pending_free = true;
                }
                recording(chunk_seen, seen);
            });
        }
        recording.replay(visit);
    }

    // Blocks handed out now; lanes (streams seen, plus the plain lane once used); deferred blocks.
    [[nodiscard]] std::size_t live_blocks() const noexcept { return live_count_; }
    [[nodiscard]] std::size_t lanes() const noexcept { return lanes_.size(); }
    [[nodiscard]] std::size_t deferred_blocks() const noexcept { return deferred_.size(); }
    // Bytes summed over lanes, where the lane pool counts them.
    [[nodiscard]] std::size_t reserved_bytes() const
        requires requires(const lane_pool& p) { p.reserved_bytes(); }
    {
        std::size_t total = 0;
        for (const auto& l : lanes_) total += l->pool.reserved_bytes();
        return total;
    }

    [[nodiscard]] upstream_type& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const upstream_type& upstream_resource() const noexcept { return upstream_; }
    [[nodiscard]] Events& events() noexcept { return events_; }
    // The pool of the lane of `stream`, or nullptr if that stream never allocated here.
    [[nodiscard]] const lane_pool* pool_of(stream_ref stream) const {
        const lane* l = const_cast<stream_ordered*>(this)->find_lane(stream, false);
        return l ? &l->pool : nullptr;
    }

    friend bool operator==(const stream_ordered& a, const stream_ordered& b) noexcept { return &a == &b; }

private:
    struct lane {
        lane(stream_ref stream_, std::thread::id thread_, bool plain_, ref<upstream_type> upstream,
             const pool_options& options)
            : stream(stream_), thread(thread_), plain(plain_), pool(upstream, options) {}
        stream_ref stream;
        std::thread::id thread;  // only for per-thread stream handles
        bool plain;              // the lane of allocate/deallocate: its free blocks are idle
        bool idle = false;       // forgotten stream: its free blocks are idle too
        lane_pool pool;
    };

    // A stream that used a block (record_use), with the thread for per-thread handles.
    struct use {
        stream_ref stream;
        std::thread::id thread;
        friend bool operator==(const use&, const use&) = default;
    };

    struct live_block {
        lane* owner = nullptr;
        bool used_elsewhere = false;  // has record_use streams in uses_
    };

    struct deferred_block {
        void* pointer;
        std::size_t bytes;
        std::size_t alignment;
        lane* owner;
        std::vector<event_type> events;
    };

    static std::thread::id thread_of(stream_ref stream) {
        return Events::per_thread(stream) ? std::this_thread::get_id() : std::thread::id{};
    }

    // Whether this thread can record an event on `l`'s stream.
    static bool reachable(const lane& l) noexcept {
        return l.thread == std::thread::id{} || l.thread == std::this_thread::get_id();
    }

    // Whether `l` is the lane of `stream` (`thread_of(stream)` passed in to compute it once).
    static bool is_lane_of(const lane& l, stream_ref stream, std::thread::id thread, bool plain) noexcept {
        return l.plain == plain && (plain || (l.stream == stream && l.thread == thread));
    }

    lane* find_lane(stream_ref stream, bool plain) {
        const std::thread::id thread = thread_of(stream);
        if (last_ != nullptr && is_lane_of(*last_, stream, thread, plain)) return last_;
        for (auto& l : lanes_) {
            if (is_lane_of(*l, stream, thread, plain)) return last_ = l.get();
        }
        return nullptr;
    }

    lane& lane_for(stream_ref stream, bool plain) {
        if (lane* found = find_lane(stream, plain)) {
            found->idle = false;  // a reused handle: the stream is alive again
            return *found;
        }
        if (!lanes_.empty()) start_tracking();
        lanes_.push_back(std::make_unique<lane>(stream, thread_of(stream), plain, ref<upstream_type>(upstream_), options_));
        return *(last_ = lanes_.back().get());
    }

    // Requires: a valid alignment and bytes > 0.
    void* allocate_in(lane& own, std::size_t bytes, std::size_t alignment) {
        if (!deferred_.empty()) drain_deferred(false);
        if (tracked_) live_.reserve(live_.size() + 1);  // so that recording the block below cannot throw
        if (void* pointer = own.pool.try_allocate_cached(bytes, alignment)) return hand_out(pointer, own);
        for (auto& other : lanes_) {
            if (other.get() == &own || !reachable(*other)) continue;
            if (void* pointer = other->pool.try_allocate_cached(bytes, alignment)) {
                order_after(own, *other);
                return hand_out(pointer, *other);
            }
        }
        try {
            return hand_out(own.pool.allocate(bytes, alignment), own);
        } catch (const std::bad_alloc&) {
        }
        release();
        try {
            return hand_out(own.pool.allocate(bytes, alignment), own);
        } catch (const std::bad_alloc&) {
            throw out_of_memory("stream_ordered", figures(bytes, alignment));
        }
    }

    void* hand_out(void* pointer, lane& owner) noexcept {
        if (tracked_) live_.insert(pointer, live_block{&owner, false});  // room was reserved
        ++live_count_;
        return pointer;
    }

    // From now on every live block is in live_. Until then there is at most one lane, and every
    // live block is its block that is not waiting in deferred_.
    void start_tracking() {
        if (tracked_) return;
        if constexpr (walkable<lane_pool>) {
            if (!lanes_.empty()) {
                lane* only = lanes_.front().get();
                live_.reserve(live_count_ + 1);
                only->pool.for_each_block([&](const chunk_view&, const block_view& block) {
                    const auto* pointer = reinterpret_cast<const void*>(block.address);
                    if (block.live && !is_deferred(pointer)) live_.insert(pointer, live_block{only, false});
                });
            }
        }
        tracked_ = true;
    }

    [[nodiscard]] bool is_deferred(const void* pointer) const noexcept {
        return std::any_of(deferred_.begin(), deferred_.end(), [pointer](const deferred_block& entry) { return entry.pointer == pointer; });
    }

    // Work that `taker` issues from now on runs after the work issued so far on `giver`'s stream.
    void order_after(lane& taker, lane& giver) {
        if (giver.plain || giver.idle) return;
        event_type event = events_.record(giver.stream);
        if (taker.plain) {
            events_.synchronize(event);
        } else {
            events_.wait(taker.stream, event);
        }
        events_.recycle(event);
    }

    void synchronize_lane(lane& l) {
        if (l.plain || l.idle) return;
        if (!reachable(l)) {
            events_.synchronize_all();
            return;
        }
        event_type event = events_.record(l.stream);
        events_.synchronize(event);
        events_.recycle(event);
    }

    // `stream`: the stream the block is freed on; nullptr for a plain deallocate (already idle).
    void free_from(void* pointer, std::size_t bytes, std::size_t alignment, const stream_ref* stream) noexcept {
        lane* owner = nullptr;
        std::vector<use> streams;
        if (tracked_) {
            const live_block* found = live_.find(pointer);
            POOLKIT_ASSERT(found != nullptr, "deallocate of a pointer stream_ordered did not hand out (or freed twice)");
            if (found == nullptr) return;
            owner = found->owner;
            if (found->used_elsewhere) {
                const auto uses = uses_.find(pointer);
                streams = std::move(uses->second);
                uses_.erase(uses);
            }
            live_.erase(pointer);
        } else {
            POOLKIT_ASSERT(!lanes_.empty(), "deallocate of a pointer stream_ordered did not hand out");
            if (lanes_.empty()) return;
            owner = lanes_.front().get();  // the only lane: the lane pool checks the pointer itself
        }
        --live_count_;
        // Freed on its own lane's stream, or idle (a plain free): reusable in its lane at once.
        if (stream != nullptr && !is_lane_of(*owner, *stream, thread_of(*stream), false)) {
            streams.push_back({*stream, thread_of(*stream)});
        }
        // A per-thread stream of another thread cannot take an event from here: wait for the device.
        if (std::erase_if(streams, [](const use& u) { return u.thread != std::thread::id{} && u.thread != std::this_thread::get_id(); }) > 0) {
            try {
                events_.synchronize_all();
            } catch (...) {
                POOLKIT_ASSERT(false, "stream_ordered could not synchronize for a per-thread stream's use");
            }
        }
        if (streams.empty()) {
            owner->pool.deallocate(pointer, bytes, alignment);
            return;
        }
        try {
            deferred_block entry{pointer, bytes, alignment, owner, {}};
            entry.events.reserve(streams.size());
            for (const use& user : streams) entry.events.push_back(events_.record(user.stream));
            deferred_.push_back(std::move(entry));
        } catch (...) {
            // No event could be recorded: wait for the device by the slow road rather than lose order.
            for (const use& user : streams) {
                try {
                    events_.synchronize(events_.record(user.stream));
                } catch (...) {
                    POOLKIT_ASSERT(false, "stream_ordered could not order a deferred free");
                }
            }
            owner->pool.deallocate(pointer, bytes, alignment);
        }
    }

    // Returns deferred blocks whose events are done (all of them, blocking, when `wait`).
    void drain_deferred(bool wait) {
        std::erase_if(deferred_, [this, wait](deferred_block& entry) {
            const bool ready = std::all_of(entry.events.begin(), entry.events.end(), [&](const event_type& event) {
                if (wait) events_.synchronize(event);
                return wait || events_.done(event);
            });
            if (!ready) return false;
            for (const auto& event : entry.events) events_.recycle(event);
            entry.owner->pool.deallocate(entry.pointer, entry.bytes, entry.alignment);
            return true;
        });
    }

    memory_figures figures(std::size_t bytes, std::size_t alignment) const {
        if constexpr (requires(const lane_pool& p) {
                          p.reserved_bytes();
                          p.live_bytes();
                      }) {
            std::size_t reserved = 0, live = 0;
            for (const auto& l : lanes_) {
                reserved += l->pool.reserved_bytes();
                live += l->pool.live_bytes();
            }
            return memory_figures::held(bytes, alignment, live, reserved);
        } else {
            return memory_figures::request(bytes, alignment);
        }
    }

    upstream_type upstream_;
    pool_options options_;
    Events events_;
    std::vector<std::unique_ptr<lane>> lanes_;  // stable addresses: live blocks point at lanes
    lane* last_ = nullptr;                      // the lane of the last call: most calls hit it
    // Live blocks and their lanes, once tracked_ (see start_tracking); live_count_ always.
    detail::pointer_map<live_block> live_;
    bool tracked_ = !walkable<lane_pool>;
    std::size_t live_count_ = 0;
    std::unordered_map<void*, std::vector<use>> uses_;  // record_use streams, rarely any
    std::vector<deferred_block> deferred_;
};

static_assert(stream_resource_with<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<host_accessible>>,
                                                  completed_events>,
                                   host_accessible>);
static_assert(has_release<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>> &&
              has_check_invariants<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>> &&
              has_owns<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>> &&
              walkable<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>>);

}  // namespace poolkit
