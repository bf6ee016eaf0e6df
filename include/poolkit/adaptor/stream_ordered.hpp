// stream_ordered<Pool, Events>: stream-ordered reuse over any caching strategy.
//
// Every stream that allocates gets a lane: its own Pool (rebound onto a gated reference to one
// shared upstream), so a block freed on stream A is reusable on A at once, with no event. Plain
// allocate/deallocate use a lane of their own whose free blocks are idle.
// Events are recorded only where a reuse needs one. A free records nothing; it marks its lane's
// free blocks uncovered. On a miss in its own lane, a request takes a free block from another lane
// whose frees an event covers, waiting on that event (cudaStreamWaitEvent, no host
// synchronization; the host waits for it for the plain lane); a lane it skips because no event
// covers its frees is asked for one, and records it on its stream at its next call (that stream is
// alive then). After settle_after misses that skipped such lanes (their streams may have been
// destroyed), the host waits for the whole device once and every free block is taken freely.
// Only then does the own lane grow — or first, while the lanes reserve less than growth_slack()
// times the bytes out of them. When the upstream is exhausted, every lane's work is waited for,
// every lane releases its wholly free chunks, and the request is tried once more before
// out_of_memory. So no stream strands memory, and no stream is touched after the call that named
// it: a stream may be destroyed once its work is issued. No memory leaves a lane before the work
// that may use it is done, by any path: a lane's pool reaches the upstream only through its gate
// (detail/gated_upstream.hpp), which waits first for the work before the lane's frees (an event
// on the lane's stream when the call is on it, else the whole device) — so a strategy's own
// release before growth, a retry after the upstream ran out, a trim or an unmap are all safe.
// A block freed on another stream than its lane's is parked in the freeing stream's lane: a
// request there of the same size and alignment takes it, before its own pool, with no event (the
// freeing stream's order covers it). So is a block a lane took from another and freed on its own
// stream (adopted): the lane keeps its working set. Past max_parked_blocks in the lane, or max_parked_bytes parked over
// all lanes by streams that did not take them (so that many streams do not hold many times as
// much), the lane's parked blocks go back to their lanes behind one event recorded on its stream.
// A block used on other streams (record_use, PyTorch's record_stream) waits in a deferred list
// with one event per stream until all are done, then returns to its lane; deferred blocks are
// returned at a miss.
// A per-thread handle (cudaStreamPerThread) names another stream on each host thread: its lanes are
// kept apart by thread, and a free there from another thread waits for the whole device.
// Complexity: finding a stream's lane is O(1) (the last call's, else a flat index by the stream's
// identity); a lane hit is the Pool's cached allocate, plus one hash-map insert while there are
// several lanes. A miss asks only lanes that may serve it: lanes are filed in a bucket per power of
// two of the request, leave a bucket when they fail one of its requests and come back when they
// get memory back (O(1) amortized per call; 64 bucket slots per lane).
// While there is one lane and no record_use (one stream, as in most programs and every replay),
// blocks need no map at all: the first second lane fills it from a walk of the first (when the
// Pool offers the walk of core/walk.hpp; otherwise the map is always kept).
// Thread safety: none; wrap in synchronized<>. Alignment: the Pool's.
// Stream semantics: as above. Lanes are keyed by the stream's identity (Events::identity:
// cuStreamGetId for created streams, unique over the program's life), so a new stream that gets
// a destroyed one's handle has a lane of its own. A destroyed stream's lane stays; its free blocks
// are taken after the wait for the whole device above, or at exhaustion or release().
// forget_stream(s) before destroying s makes them idle (taken with no wait).
// Exhaustion: out_of_memory with live, reserved and cached bytes summed over lanes.
//
// Pool requirements: the lane_pool concept below: rebuilt over a gated ref to one shared upstream, each
// lane serves from what it holds with `try_allocate_cached(bytes, alignment) noexcept` and gives
// chunks back with `release()`; it need not be movable. The constructor takes the shared upstream
// and the lane options (lane_options_t<Pool>: the strategy's options, through any adaptors).
// Events requirements: the events_policy concept below (cuda_events, the default with CUDA;
// host_events; completed_events, the default without CUDA).
#pragma once

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/detail/gated_upstream.hpp>
#include <poolkit/adaptor/detail/pointer_map.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/detail/walk_merge.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/rebind.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#if POOLKIT_HAS_CUDA
#  include <poolkit/adaptor/cuda_events.hpp>
#endif

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
    { e.identity(stream) } -> std::convertible_to<std::uint64_t>;
};

// What stream_ordered needs of its Pool: rebuilt over a gated reference to the upstream all lanes
// share (core/rebind.hpp: rebind_t, lane_upstream_t, lane_options_t, build_over;
// detail/gated_upstream.hpp), each lane a cached_pool. Every strategy, combinator and
// adaptor-over-strategy stack of poolkit is one.
template <class Pool>
using lane_pool_t = rebind_t<Pool, detail::gated_upstream<lane_upstream_t<Pool>>>;
template <class Pool>
concept lane_pool = cached_pool<lane_pool_t<Pool>> && buildable_over<lane_pool_t<Pool>, detail::gated_upstream<lane_upstream_t<Pool>>>;

// Streams are CUDA's where the toolkit is; without it no work runs on a stream, so every event is
// complete.
#if POOLKIT_HAS_CUDA
using default_events = cuda_events;
#else
using default_events = completed_events;
#endif

template <lane_pool Pool, events_policy Events = default_events>
class stream_ordered : public forward_properties<stream_ordered<Pool, Events>, lane_upstream_t<Pool>> {
public:
    using upstream_type = lane_upstream_t<Pool>;
    using lane_pool_type = lane_pool_t<Pool>;
    using pool_options = lane_options_t<lane_pool_type>;
    using event_type = typename Events::event_type;

    // A lane parks at most this many blocks freed on its stream from other lanes before it returns
    // them behind one event; so does a lane that parks a block while all lanes together hold more
    // than max_parked_bytes of blocks freed on another stream than the one that took them.
    static constexpr std::size_t max_parked_blocks = 64;
    static constexpr std::size_t max_parked_bytes = std::size_t{256} << 20;
    // After this many misses that skipped lanes no event covers (their streams may be gone), the
    // host waits for the whole device once and every lane's free blocks are taken freely.
    static constexpr std::size_t settle_after = 64;
    // A miss grows its own pool before it takes from other lanes while the lanes reserve less than
    // growth_slack() times the bytes out of their pools (live, parked, deferred): a lane that took
    // from others at every miss would pay for it at every miss. Past it, memory is shared first.
    static constexpr std::size_t default_growth_slack = 2;
    // Idle lanes (streams forgotten, or settled after a wait for the device) kept as lanes of their
    // own, donors to every stream; past this many, a new stream takes over the oldest with its pool.
    static constexpr std::size_t max_idle_lanes = 16;

    // The upstream is built in place here (it need not move: cuda_vmm_resource).
    stream_ordered()
        requires std::default_initializable<upstream_type> && std::default_initializable<Events>
        : upstream_(), options_(), events_() {}
    // The upstream built in place from `upstream_options` (one argument).
    template <class UpstreamOptions>
        requires std::constructible_from<upstream_type, UpstreamOptions>
    stream_ordered(std::in_place_t, UpstreamOptions&& upstream_options, pool_options options = {}, Events events = {})
        : upstream_(std::forward<UpstreamOptions>(upstream_options)), options_(options), events_(std::move(events)) {}

    explicit stream_ordered(upstream_type upstream, pool_options options = {}, Events events = {})
        : upstream_(std::move(upstream)), options_(options), events_(std::move(events)) {}

    stream_ordered(const stream_ordered&) = delete;
    stream_ordered& operator=(const stream_ordered&) = delete;

    // Deferred blocks are waited for; lanes return everything to the upstream as they go.
    ~stream_ordered() {
        try {
            wait_for_deferred();
            return_all_parked();
            settle_frees();  // so that the lanes' pools may return everything
        } catch (...) {
            POOLKIT_ASSERT(false, "stream_ordered could not wait for its deferred blocks on destruction");
        }
        closing_ = true;
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const call_on on{*this, &stream};
        return allocate_in(stream_lane(stream), stream, bytes, alignment);
    }

    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        if (pointer == nullptr) return;
        const call_on on{*this, &stream};
        free_from(pointer, bytes, alignment, &stream);
    }

    // Memory usable on any stream at once.
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        return allocate_in(lane_for(default_stream, plain_key()), default_stream, bytes, alignment);
    }

    // The caller promises no work still uses the block.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        free_from(pointer, bytes, alignment, nullptr);
    }
    POOLKIT_CUDA_MR_MEMBERS(stream_ordered);

    // The block at `pointer` is also used by work on `stream` (PyTorch's record_stream): its reuse
    // waits until the work issued there before its deallocation is done. The deallocation records
    // an event on `stream`, so `stream` must still exist then — or have been passed to
    // forget_stream() before it was destroyed, which waits for its work and drops it from every
    // block's uses.
    void record_use(void* pointer, stream_ref stream) {
        start_tracking();
        live_block* found = find_live(pointer);
        POOLKIT_ASSERT(found != nullptr, "record_use of a pointer stream_ordered did not hand out");
        if (found == nullptr) return;
        auto& streams = uses_[pointer];
        const use here{stream, thread_of(stream)};
        if (std::find(streams.begin(), streams.end(), here) == streams.end()) streams.push_back(here);
        found->used_elsewhere = true;
    }

    // Synchronizes `stream`, drops it from the uses of every live block (record_use) and marks its
    // lane idle: its free blocks stay for any other stream to take without a wait. Optional before
    // destroying a stream that has a lane (see above); required for one named in record_use whose
    // blocks are still live.
    void forget_stream(stream_ref stream) {
        const use gone{stream, thread_of(stream)};
        const bool used = std::any_of(uses_.begin(), uses_.end(), [&](const auto& entry) {
            return std::find(entry.second.begin(), entry.second.end(), gone) != entry.second.end();
        });
        lane* forgotten = find_lane(key_of(stream));
        if (forgotten == nullptr && !used) return;
        const event_type event = events_.record(stream);
        events_.synchronize(event);
        events_.recycle(event);
        for (auto entry = uses_.begin(); entry != uses_.end();) {
            std::erase(entry->second, gone);
            if (!entry->second.empty()) {
                ++entry;
                continue;
            }
            if (live_block* block = live_.find(entry->first)) block->used_elsewhere = false;
            entry = uses_.erase(entry);
        }
        if (forgotten == nullptr) return;
        forgotten->idle = true;
        forget_frees(*forgotten);
        return_parked(*forgotten);  // freed on `stream`, whose work is done
        if (last_ == forgotten) last_ = nullptr;
        note_idle(*forgotten);
    }

    // Waits for every deferred block and for the work before every lane's last free, then returns
    // every wholly free chunk upstream (PyTorch's empty_cache) and drops every lane that has no
    // block out: a stream that comes back gets a new one.
    void release() { release_all(nullptr); }

    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<lane_pool_type>
    {
        if (tracked_) return live_.find(pointer) != nullptr;
        return !lanes_.empty() && lanes_.front()->pool.owns(pointer) && !is_deferred(pointer);
    }

    void check_invariants() const
        requires has_check_invariants<lane_pool_type>
    {
        for (const auto& l : lanes_) {
            l->pool.check_invariants();
            POOLKIT_VERIFY(indexed(l->key) == l.get(), "a lane missing from the lane index");
        }
        POOLKIT_VERIFY(lane_index_.size() + stream_index_.size() == lanes_.size(), "the lane index holds a lane that is not there");
        POOLKIT_VERIFY(tracked_ || lanes_.size() <= 1, "several lanes, but live blocks are not tracked");
        POOLKIT_VERIFY(!tracked_ || live_.size() + untracked_blocks_ == live_count_, "the live map lost count");
        live_.for_each([](const void* pointer, const live_block& block) {
            POOLKIT_VERIFY(block.owner != nullptr, "a live block without a lane");
            if constexpr (has_owns<lane_pool_type>) POOLKIT_VERIFY(block.owner->pool.owns(pointer), "a live block its lane does not own");
        });
        for (const auto& [pointer, streams] : uses_) {
            const live_block* block = live_.find(pointer);
            POOLKIT_VERIFY(block != nullptr && block->used_elsewhere, "record_use streams of a block not live");
        }
        std::size_t parked = 0, parked_bytes = 0, filed = 0, deferred = 0;
        for (const auto& l : lanes_) {
            std::size_t bytes = 0;
            for (const parked_block& b : l->parked) {
                bytes += b.adopted ? 0 : b.bytes;
                POOLKIT_VERIFY(b.owner != l.get() && live_.find(b.pointer) == nullptr, "a parked block is live or in its own lane");
                if constexpr (has_owns<lane_pool_type>) POOLKIT_VERIFY(b.owner->pool.owns(b.pointer), "a parked block its lane does not own");
                POOLKIT_VERIFY((l->parked_sizes & parked_bit(b.bytes)) != 0, "a parked block its lane's size mask hides");
            }
            POOLKIT_VERIFY(bytes == l->foreign_bytes, "a lane's parked bytes lost count");
            parked += l->parked.size();
            parked_bytes += bytes;
        }
        for (unsigned k = 0; k < donor_buckets; ++k) {
            for (std::size_t i = 0; i < donors_[k].size(); ++i) {
                const lane& l = *donors_[k][i];
                POOLKIT_VERIFY(l.donor_slot[k] == i && (l.refused >> k & 1) == 0, "a lane filed in a donor bucket it left");
            }
            filed += donors_[k].size();
        }
        std::size_t refused = 0;
        for (const auto& l : lanes_) refused += static_cast<std::size_t>(std::popcount(l->refused));
        for (const auto& entry : deferred_) deferred += entry.blocks.size();
        POOLKIT_VERIFY(parked == parked_count_ && deferred == deferred_count_, "parked or deferred blocks lost count");
        POOLKIT_VERIFY(parked_bytes == foreign_bytes_, "parked bytes lost count");
        if constexpr (counts_reserved) POOLKIT_VERIFY(reserved_bytes_ == reserved_bytes(), "reserved bytes lost count");
        POOLKIT_VERIFY(held_bytes_ == 0 || live_count_ + parked_count_ + deferred_count_ > 0, "bytes out of the pools with no block out");
        POOLKIT_VERIFY(filed + refused == lanes_.size() * donor_buckets, "a lane missing from the donor buckets");
    }

    // The walk of walk.hpp over every lane: the chunks of all lanes in address order, each chunk
    // and its blocks with the stream of their lane (0 for the plain lane); a block waiting in the
    // deferred list is pending_free, not live. O(blocks + chunks log chunks + deferred log
    // deferred); the visits are kept on the host heap for the merge.
    template <class Visitor>
        requires walkable<lane_pool_type>
    void for_each_block(Visitor&& visit) const {
        std::vector<std::uintptr_t> pending;
        pending.reserve(deferred_count_ + parked_count_);
        const auto note = [&](const parked_block& b) { pending.push_back(reinterpret_cast<std::uintptr_t>(b.pointer)); };
        for (const auto& entry : deferred_) std::for_each(entry.blocks.begin(), entry.blocks.end(), note);
        for (const auto& l : lanes_) std::for_each(l->parked.begin(), l->parked.end(), note);
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

    // Blocks handed out now; lanes (streams seen, plus the plain lane once used); blocks waiting
    // for events to return to their lanes; blocks parked on the stream that freed them.
    [[nodiscard]] std::size_t live_blocks() const noexcept { return live_count_; }
    [[nodiscard]] std::size_t lanes() const noexcept { return lanes_.size(); }
    [[nodiscard]] std::size_t deferred_blocks() const noexcept { return deferred_count_; }
    [[nodiscard]] std::size_t parked_blocks() const noexcept { return parked_count_; }
    // Bytes summed over lanes, where the lane pool counts them.
    [[nodiscard]] std::size_t reserved_bytes() const
        requires requires(const lane_pool_type& p) { p.reserved_bytes(); }
    {
        std::size_t total = 0;
        for (const auto& l : lanes_) total += l->pool.reserved_bytes();
        return total;
    }

    // 0: a miss always takes from other lanes before it grows (the smallest footprint; a pipeline
    // whose blocks are freed on other streams then takes at most misses). Only where the lane pool
    // counts what it reserves; otherwise other lanes always come first.
    void growth_slack(std::size_t slack) noexcept { growth_slack_ = slack; }
    [[nodiscard]] std::size_t growth_slack() const noexcept { return growth_slack_; }

    [[nodiscard]] upstream_type& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const upstream_type& upstream_resource() const noexcept { return upstream_; }
    [[nodiscard]] Events& events() noexcept { return events_; }
    // The pool of the lane of `stream`, or nullptr if that stream never allocated here.
    [[nodiscard]] const lane_pool_type* pool_of(stream_ref stream) const {
        const lane* l = const_cast<stream_ordered*>(this)->find_lane(key_of(stream));
        return l ? &l->pool : nullptr;
    }

    friend bool operator==(const stream_ordered& a, const stream_ordered& b) noexcept { return &a == &b; }

private:
    // Which lane a call belongs to: the stream's identity (unique over the program's life, so a new
    // stream that gets a destroyed one's handle gets a lane of its own), the thread for per-thread
    // handles, and the lane of allocate/deallocate apart from all streams.
    struct lane_key {
        std::uint64_t stream = 0;
        std::thread::id thread;
        bool plain = false;
        friend bool operator==(const lane_key&, const lane_key&) = default;
    };

    static constexpr unsigned donor_buckets = 64;  // requests in (2^(k-1), 2^k] are bucket k
    static constexpr bool counts_reserved = requires(const lane_pool_type& p) { p.reserved_bytes(); };
    // Past drain_after deferred blocks a hit polls the oldest entry; a miss polls until
    // drain_pending entries were not done. Each poll is a driver call (cudaEventQuery, ~0.3 µs).
    static constexpr std::size_t drain_after = 64;
    static constexpr std::size_t drain_pending = 8;

    struct lane;
    // A block freed on another lane's stream than its own, held there (it still belongs to `owner`);
    // adopted: that lane had taken it (not counted in max_parked_bytes).
    struct parked_block {
        void* pointer;
        std::size_t bytes;
        std::size_t alignment;
        lane* owner;
        bool adopted = false;
    };

    // A lane is its pool's return gate: memory leaves the pool only after secure(lane).
    struct lane final : detail::return_gate {
        lane(stream_ordered& owner_, stream_ref stream_, const lane_key& key_, const pool_options& options)
            : owner(&owner_), stream(stream_), key(key_), plain(key_.plain),
              pool(build_over<lane_pool_type>(detail::gated_upstream<upstream_type>(owner_.upstream_, *this), options)) {}
        lane(const lane&) = delete;
        lane& operator=(const lane&) = delete;
        ~lane() = default;
        void before_return() noexcept override { owner->secure(*this); }

        stream_ordered* owner;
        stream_ref stream;       // the handle it was made with (for the walk's views)
        lane_key key;
        bool plain;              // the lane of allocate/deallocate: its free blocks are idle
        bool idle = false;       // forgotten stream: its free blocks are idle too
        // What a taker from another lane waits on: an event recorded on the lane's stream after
        // frees there; whether frees happened since (uncovered: no taker may use them yet); and
        // whether a taker asked for an event (wanted: the lane's next call records one).
        std::optional<event_type> freed;
        bool uncovered = false;
        bool wanted = false;
        // Blocks of other lanes freed on this lane's stream: reused here with no event.
        std::vector<parked_block> parked;
        std::uint64_t parked_sizes = 0;  // parked_bit of each parked block: most requests scan nothing
        std::size_t foreign_bytes = 0;   // of the parked blocks not adopted
        // The miss path's index: bit k set when the pool failed a request of bucket k and got no
        // memory since (the lane is out of donors_[k]); its place in each donors_[k] it is in.
        std::uint64_t refused = 0;
        std::array<std::uint32_t, donor_buckets> donor_slot{};
        std::size_t out_blocks = 0;    // blocks of its pool handed out and not back (live, parked, deferred)
        std::size_t taken_blocks = 0;  // live blocks of other lanes' pools it took
        bool listed_idle = false;      // in idle_lanes_
        bool dropping = false;         // being dropped (drop_empty_lanes)
        lane_pool_type pool;
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
        lane* taker = nullptr;        // the lane it was handed to, where another lane owns it
    };

    // Blocks that return to their lanes once every event is done.
    struct deferred_block {
        std::vector<parked_block> blocks;
        std::vector<event_type> events;
    };

    static std::thread::id thread_of(stream_ref stream) {
        return Events::per_thread(stream) ? std::this_thread::get_id() : std::thread::id{};
    }

    lane_key key_of(stream_ref stream) const { return {static_cast<std::uint64_t>(events_.identity(stream)), thread_of(stream), false}; }
    static lane_key plain_key() noexcept { return {0, {}, true}; }

    struct lane_key_hash {
        std::size_t operator()(const lane_key& key) const noexcept {
            const std::size_t thread = std::hash<std::thread::id>{}(key.thread);
            return std::hash<std::uint64_t>{}(key.stream) ^ (thread + 0x9e3779b97f4a7c15 + (key.plain ? 1 : 0));
        }
    };

    // O(1) in the number of lanes: the lane of the last call, else the index (a flat one for
    // the common key: a created stream, not per-thread).
    lane* find_lane(const lane_key& key) {
        if (last_ != nullptr && last_->key == key) return last_;
        lane* found = indexed(key);
        if (found != nullptr) last_ = found;
        return found;
    }
    lane* indexed(const lane_key& key) const {
        if (is_plain_stream_key(key)) {
            lane* const* found = stream_index_.find(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(key.stream)));
            return found == nullptr ? nullptr : *found;
        }
        const auto found = lane_index_.find(key);
        return found == lane_index_.end() ? nullptr : found->second;
    }
    static bool is_plain_stream_key(const lane_key& key) noexcept {
        return !key.plain && key.thread == std::thread::id{} && key.stream != 0;
    }

    // The lane of `stream` for an allocation, by the stream's identity (Events::identity).
    lane& stream_lane(stream_ref stream) { return lane_for(stream, key_of(stream)); }

    // Whether `l` was made for the handle `stream` (on this thread, for a per-thread handle).
    static bool is_handle_of(const lane& l, stream_ref stream) noexcept {
        return !l.plain && l.stream == stream && l.key.thread == thread_of(stream);
    }

    lane& lane_for(stream_ref stream, const lane_key& key) {
        if (lane* found = find_lane(key)) {
            found->idle = false;  // a forgotten stream is in use again
            return *found;
        }
        if (!lanes_.empty()) start_tracking();
        // Room for one more lane everywhere, grown geometrically: a new lane costs O(1) amortized.
        const std::size_t room = lanes_.size() < lanes_.capacity() ? lanes_.capacity() : std::max<std::size_t>(8, 2 * lanes_.capacity());
        lanes_.reserve(room);
        for (auto& bucket : donors_) bucket.reserve(room);  // filing never allocates
        if (is_plain_stream_key(key)) {
            stream_index_.reserve(room);  // first: if it throws, nothing else changed
        } else {
            lane_index_.reserve(lane_index_.size() + 1);
        }
        if (!key.plain) {
            if (lane* recycled = recycle_idle_lane(stream, key)) return *(last_ = recycled);
            // Streams destroyed without forget_stream leave lanes whose frees no event covers: past
            // twice the lanes in use at the last settle (64 at least), the host waits for the
            // device once and every lane with nothing out becomes idle, for new streams to take.
            if (lanes_.size() >= settle_lanes_at_) {
                settle_all(nullptr);
                const auto in_use = static_cast<std::size_t>(std::count_if(lanes_.begin(), lanes_.end(), [](const auto& l) { return !l->idle; }));
                settle_lanes_at_ = std::max<std::size_t>(64, 2 * in_use);
                if (lane* recycled = recycle_idle_lane(stream, key)) return *(last_ = recycled);
            }
        }
        auto made = std::make_unique<lane>(*this, stream, key, options_);
        if (!is_plain_stream_key(key)) lane_index_.emplace(key, made.get());
        lanes_.push_back(std::move(made));  // room was reserved
        if (is_plain_stream_key(key)) stream_index_.insert(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(key.stream)), lanes_.back().get());
        lane& filed = *lanes_.back();
        for (unsigned k = 0; k < donor_buckets; ++k) file_donor(filed, k);
        if constexpr (counts_reserved) reserved_bytes_ += filed.pool.reserved_bytes();  // a pool may start with some
        return *(last_ = &filed);
    }

    // `stream`: the stream of this call (ignored for the plain lane). Requires: a valid alignment
    // and bytes > 0.
    void* allocate_in(lane& own, stream_ref stream, std::size_t bytes, std::size_t alignment) {
        if (own.wanted) cover(own, stream);  // a taker waits for this lane's frees: its stream is alive now
        if (deferred_count_ > drain_after) drain_deferred(1);  // else only on a miss
        if (tracked_) live_.reserve(live_.size() + untracked_blocks_ + 1);  // so that recording it (or find_live) cannot throw
        // A block of this size freed here from another lane first: reused now, it goes nowhere
        // (else it waits for an event to go home) and leaves the pool's blocks to its own frees.
        if ((own.parked_sizes & parked_bit(bytes)) != 0) {
            if (void* pointer = take_parked(own, bytes, alignment)) return pointer;
        }
        if (void* pointer = own.pool.try_allocate_cached(bytes, alignment)) return hand_out(pointer, own, bytes);
        return allocate_missed(own, stream, bytes, alignment);
    }

    // Out of line, so that the hit above stays small enough to inline the lane pool's own path.
    [[gnu::noinline]] void* allocate_missed(lane& own, stream_ref stream, std::size_t bytes, std::size_t alignment) {
        if (!deferred_.empty()) {
            drain_deferred(drain_pending);
            if (void* pointer = own.pool.try_allocate_cached(bytes, alignment)) return hand_out(pointer, own, bytes);
        }
        // Growth first while the lanes hold little beside what is out of them: a lane that takes
        // from others at every miss pays for it at every miss.
        const bool grow_first = prefers_growth();
        if (!grow_first) {
            if (void* pointer = take_from_others(own, stream, bytes, alignment)) return pointer;
        }
        if (void* pointer = try_grow(own, bytes, alignment)) return pointer;
        if (grow_first) {
            if (void* pointer = take_from_others(own, stream, bytes, alignment)) return pointer;
        }
        release_all(&own);
        if (void* pointer = try_grow(own, bytes, alignment)) return pointer;
        throw out_of_memory("stream_ordered", figures(bytes, alignment));
    }

    // Whether the lanes reserve less than growth_slack() times the bytes out of their pools (live,
    // parked, deferred). Only where the lane pool counts what it reserves.
    [[nodiscard]] bool prefers_growth() const noexcept {
        if constexpr (counts_reserved) {
            return growth_slack_ != 0 && reserved_bytes_ / growth_slack_ < held_bytes_;
        } else {
            return false;
        }
    }

    // The own pool's allocate, which may take memory from the upstream; nullptr where it has none.
    void* try_grow(lane& own, std::size_t bytes, std::size_t alignment) {
        std::size_t before = 0;
        if constexpr (counts_reserved) before = own.pool.reserved_bytes();
        void* pointer = nullptr;
        try {
            pointer = own.pool.allocate(bytes, alignment);
        } catch (const std::bad_alloc&) {
        }
        // Even a failed allocate may have returned wholly free chunks first.
        if constexpr (counts_reserved) reserved_bytes_ = reserved_bytes_ - before + own.pool.reserved_bytes();
        if (pointer == nullptr) return nullptr;
        raise_donor(own);  // what is left of its new memory may serve others
        return hand_out(pointer, own, bytes);
    }

    // A block of exactly this request's size and alignment that was freed on own's stream (see
    // park): reused at once, its stream's order covers it. Newest first.
    void* take_parked(lane& own, std::size_t bytes, std::size_t alignment) noexcept {
        for (auto it = own.parked.rbegin(); it != own.parked.rend(); ++it) {
            if (it->bytes != bytes || it->alignment != alignment) continue;
            const parked_block found = *it;
            *it = own.parked.back();
            own.parked.pop_back();
            own.parked_sizes = 0;
            for (const parked_block& b : own.parked) own.parked_sizes |= parked_bit(b.bytes);
            if (!found.adopted) {
                own.foreign_bytes -= bytes;
                foreign_bytes_ -= bytes;
            }
            --parked_count_;
            return hand_out(found.pointer, *found.owner, 0, &own);  // still out of its pool: no bytes
        }
        return nullptr;
    }

    // A free block of another lane, behind that lane's event. A miss asks only the lanes of its
    // request's bucket (donors_: requests within a power of two); a lane that fails one leaves
    // that bucket and comes back when it gets memory back. A lane's index says nothing of other
    // buckets: pools that keep sizes apart (caching_pool's small and large pools) fail small
    // requests and still serve large ones. A lane whose frees no event covers yet is skipped and
    // asked for one (its next call records it); after settle_after misses that skipped such lanes —
    // their streams may be gone — the host waits for the whole device once and takes from them.
    void* take_from_others(lane& own, stream_ref stream, std::size_t bytes, std::size_t alignment) {
        bool skipped = false;
        if (void* pointer = take_from_donors(own, stream, bytes, alignment, skipped)) return pointer;
        if (!skipped || ++stale_misses_ < settle_after) return nullptr;
        settle_all(&own);
        return take_from_donors(own, stream, bytes, alignment, skipped);
    }

    void* take_from_donors(lane& own, stream_ref stream, std::size_t bytes, std::size_t alignment, bool& skipped) {
        const unsigned k = bucket_of(bytes);
        std::vector<lane*>& bucket = donors_[k];
        // Newest first; a lane that fails is swapped with the last, which was asked already.
        for (std::size_t i = bucket.size(); i-- > 0;) {
            lane& other = *bucket[i];
            if (&other == &own) continue;
            if (other.uncovered && !other.plain && !other.idle) {
                other.wanted = true;
                skipped = true;
                continue;
            }
            if (void* pointer = other.pool.try_allocate_cached(bytes, alignment)) {
                try {
                    order_after(own, stream, other);
                } catch (...) {
                    deallocate_in(other, pointer, bytes, alignment);
                    throw;
                }
                return hand_out(pointer, other, bytes, &own);
            }
            // Larger alignments fail where smaller ones may not: only theirs take a lane out.
            if (alignment <= default_alignment) refuse_donor(other, k);
        }
        return nullptr;
    }

    // A bit of lane::parked_sizes, by a hash of the size.
    static std::uint64_t parked_bit(std::size_t bytes) noexcept {
        return std::uint64_t{1} << ((static_cast<std::uint64_t>(bytes) * 0x9e3779b97f4a7c15) >> 58);
    }

    // Requires bytes > 0.
    static unsigned bucket_of(std::size_t bytes) noexcept {
        return std::min(static_cast<unsigned>(std::bit_width(bytes - 1)), donor_buckets - 1);
    }
    void file_donor(lane& l, unsigned k) noexcept {
        l.donor_slot[k] = static_cast<std::uint32_t>(donors_[k].size());
        donors_[k].push_back(&l);  // room for every lane was reserved
    }
    void refuse_donor(lane& l, unsigned k) noexcept {
        unfile_donor(l, k);
        l.refused |= std::uint64_t{1} << k;
    }
    void unfile_donor(lane& l, unsigned k) noexcept {
        std::vector<lane*>& bucket = donors_[k];
        lane* last = bucket.back();
        bucket[l.donor_slot[k]] = last;
        last->donor_slot[k] = l.donor_slot[k];
        bucket.pop_back();
    }
    // `l`'s pool got memory back (a free, a return, growth): it may serve any bucket again.
    void raise_donor(lane& l) noexcept {
        if (l.refused == 0) return;
        for (std::uint64_t refused = l.refused; refused != 0; refused &= refused - 1) {
            file_donor(l, static_cast<unsigned>(std::countr_zero(refused)));
        }
        l.refused = 0;
    }

    // A block back to its own pool, which may serve any request again.
    void give_back(lane& owner, void* pointer, std::size_t bytes, std::size_t alignment) noexcept {
        deallocate_in(owner, pointer, bytes, alignment);
        --owner.out_blocks;
        held_bytes_ -= bytes;
        raise_donor(owner);
    }
    // The pool's deallocate, which may return memory upstream (expandable unmaps granules).
    void deallocate_in(lane& l, void* pointer, std::size_t bytes, std::size_t alignment) noexcept {
        if constexpr (counts_reserved) {
            const std::size_t before = l.pool.reserved_bytes();
            l.pool.deallocate(pointer, bytes, alignment);
            reserved_bytes_ = reserved_bytes_ - before + l.pool.reserved_bytes();
        } else {
            l.pool.deallocate(pointer, bytes, alignment);
        }
    }

    // `bytes`: what leaves the owner's pool now (0 for a parked block, out of it already).
    void* hand_out(void* pointer, lane& owner, std::size_t bytes, lane* taker = nullptr) noexcept {
        if (bytes != 0) ++owner.out_blocks;  // 0: a parked block, out of its pool already
        if (taker != nullptr) ++taker->taken_blocks;
        held_bytes_ += bytes;
        if (tracked_) live_.insert(pointer, live_block{&owner, false, taker});  // room was reserved
        ++live_count_;
        return pointer;
    }

    // From now on every live block is in live_. Until then there is at most one lane, and every
    // live block is its block that is not waiting in deferred_.
    void start_tracking() {
        if (tracked_) return;
        if constexpr (walkable<lane_pool_type>) {
            if (!lanes_.empty()) {
                lane* only = lanes_.front().get();
                live_.reserve(live_count_ + 1);
                only->pool.for_each_block([&](const chunk_view&, const block_view& block) {
                    const auto* pointer = reinterpret_cast<const void*>(block.address);
                    if (block.live && !is_deferred(pointer)) live_.insert(pointer, live_block{only, false, nullptr});
                });
                // Blocks the walk does not show (passed through to the upstream: fixed_size's
                // large requests, size_classes' past its largest class) are the only lane's too.
                untracked_blocks_ = live_count_ - live_.size();
                untracked_owner_ = only;
            }
        }
        tracked_ = true;
    }

    // The entry of live block `pointer`. One handed out before tracking started that the walk did
    // not show is entered now, as the block of the lane of that time. Never allocates: room for
    // every live block is reserved.
    live_block* find_live(const void* pointer) noexcept {
        live_block* found = live_.find(pointer);
        if (found != nullptr || untracked_blocks_ == 0) return found;
        live_.insert(pointer, live_block{untracked_owner_, false, nullptr});
        --untracked_blocks_;
        return live_.find(pointer);
    }

    [[nodiscard]] bool is_deferred(const void* pointer) const noexcept {
        return std::any_of(deferred_.begin(), deferred_.end(), [pointer](const deferred_block& entry) {
            return std::any_of(entry.blocks.begin(), entry.blocks.end(), [pointer](const parked_block& b) { return b.pointer == pointer; });
        });
    }

    // Work that `taker` issues on `stream` from now on runs after the work issued before `giver`'s
    // frees. Touches no stream but the taker's: the giver's may be gone.
    void order_after(const lane& taker, stream_ref stream, lane& giver) {
        if (giver.plain || giver.idle) return;
        POOLKIT_ASSERT(!giver.uncovered, "stream_ordered took a block no event covers");
        if (giver.freed) {
            // Done already: no wait, now or for later takes until the giver frees again.
            if (events_.done(*giver.freed)) {
                forget_frees(giver);
            } else if (taker.plain) {
                events_.synchronize(*giver.freed);
            } else {
                events_.wait(stream, *giver.freed);
            }
        }
        // Neither: the giver's free blocks were never handed out, no work can use them.
    }

    // A block was just freed on `l`'s own stream, which is alive during this call. No event is
    // recorded unless a taker wants one: most frees are reused on their own stream.
    void note_free(lane& l, stream_ref stream) noexcept {
        mark_freed(l);
        // Only on the lane's own stream: a new stream that got a destroyed one's handle frees here
        // too, and an event on it would not cover the destroyed stream's work.
        if (l.wanted && key_of(stream) == l.key) cover(l, stream);
    }

    void mark_freed(lane& l) noexcept {
        l.uncovered = true;
        l.idle = false;  // a forgotten stream in use again: its frees are ordered like any other's
    }

    // The gate of `l`'s pool (detail/gated_upstream.hpp): memory is about to leave it — to the
    // upstream, by whatever path the pool takes. Its free blocks may still be used by work queued
    // on its stream, so the host waits for that work first: for an event recorded now when this
    // call is on that stream, for the event that covers its frees, or for the whole device when
    // its stream is not at hand (it may be gone). Touches no pool: the lane's is mid-call.
    void secure(lane& l) noexcept {
        if (closing_ || l.plain || l.idle || (!l.uncovered && !l.freed)) return;
        try {
            if (l.uncovered && call_stream_ != nullptr && key_of(*call_stream_) == l.key) cover(l, *call_stream_);
            if (!l.uncovered) {
                events_.synchronize(*l.freed);
                forget_frees(l);
                return;
            }
        } catch (...) {  // no event to wait for: the whole device below
        }
        // Not on the lane's stream (it may be gone), or no event could be recorded.
        try {
            events_.synchronize_all();
            for (auto& other : lanes_) forget_frees(*other);
        } catch (...) {
            POOLKIT_ASSERT(false, "stream_ordered could not wait before memory left a lane");
        }
    }

    // The stream of the public call in progress, for secure(): alive during the call.
    struct call_on {
        call_on(stream_ordered& self_, const stream_ref* stream) noexcept : self(self_), saved(self_.call_stream_) {
            self.call_stream_ = stream;
        }
        ~call_on() { self.call_stream_ = saved; }
        call_on(const call_on&) = delete;
        call_on& operator=(const call_on&) = delete;
        stream_ordered& self;
        const stream_ref* saved;
    };

    // Records `l`'s event on its stream (alive during this call): every free so far is covered.
    [[gnu::noinline]] void cover(lane& l, stream_ref stream) noexcept {
        try {
            const event_type event = events_.record(stream);
            if (l.freed) events_.recycle(*l.freed);
            l.freed = event;
            l.uncovered = false;
            l.wanted = false;
        } catch (...) {
            // No event: the frees stay uncovered, taken after a wait for the whole device.
        }
    }

    // Waits for the whole device: every lane's frees are covered and every parked block goes back
    // to its lane (their streams may be gone).
    // Lanes with no block out become idle then, all but `keep`: their streams may be gone, and a
    // new stream may take them over (recycle_idle_lane).
    void settle_all(const lane* keep) {
        events_.synchronize_all();
        for (auto& l : lanes_) {
            forget_frees(*l);
            return_parked(*l);
        }
        stale_misses_ = 0;
        for (auto& l : lanes_) {
            if (l.get() != keep && droppable(*l)) note_idle(*l);
        }
    }

    // release(), keeping `keep` (the lane of a request in progress) however empty.
    void release_all(const lane* keep) {
        wait_for_deferred();
        return_all_parked();
        settle_frees();
        for (auto& l : lanes_) l->pool.release();
        if constexpr (counts_reserved) reserved_bytes_ = reserved_bytes();
        drop_empty_lanes(keep);
    }

    // Whether `l` can go: no block of its pool out (live, parked, deferred), none it took from
    // others live, none parked in it, and no free that the host has not waited for.
    [[nodiscard]] static bool droppable(const lane& l) noexcept {
        return l.out_blocks == 0 && l.taken_blocks == 0 && l.parked.empty() && (l.idle || l.plain || (!l.uncovered && !l.freed));
    }

    // `l` has no uncovered frees and may belong to a stream that is gone: a new stream may take it
    // over with its pool (its free blocks need no wait). Checked again when taken.
    void note_idle(lane& l) noexcept {
        l.idle = true;
        if (l.plain || l.listed_idle) return;
        try {
            idle_lanes_.push_back(&l);
            l.listed_idle = true;
        } catch (...) {  // it stays a lane of its own
        }
    }

    // Past max_idle_lanes idle lanes with nothing out, the oldest re-keyed to `stream` (its pool and
    // what it holds kept); else nullptr. So streams made and forgotten (or destroyed and settled)
    // one after another reuse a bounded set of lanes instead of adding one each. Requires room in
    // the indexes (lane_for reserved it).
    lane* recycle_idle_lane(stream_ref stream, const lane_key& key) {
        // Oldest first; entries of lanes in use again or with blocks out are dropped as they come up.
        while (idle_lanes_.size() > max_idle_lanes) {
            lane* l = idle_lanes_.front();
            idle_lanes_.pop_front();
            l->listed_idle = false;
            if (!l->idle || !droppable(*l)) continue;
            unindex(*l);
            l->stream = stream;
            l->key = key;
            if (is_plain_stream_key(key)) {
                stream_index_.insert(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(key.stream)), l);
            } else {
                lane_index_.emplace(key, l);
            }
            l->idle = false;
            forget_frees(*l);
            return l;
        }
        return nullptr;
    }

    void unindex(const lane& l) noexcept {
        if (is_plain_stream_key(l.key)) {
            stream_index_.erase(reinterpret_cast<const void*>(static_cast<std::uintptr_t>(l.key.stream)));
        } else {
            lane_index_.erase(l.key);
        }
        if (last_ == &l) last_ = nullptr;
    }

    // Drops every droppable lane but `keep`: out of every index, then destroyed — its pool returns
    // all it holds to the upstream (its frees were waited for: droppable). O(lanes + idle lanes).
    void drop_empty_lanes(const lane* keep) noexcept {
        bool any = false;
        for (auto& owned : lanes_) {
            lane& l = *owned;
            if (&l == keep || !droppable(l)) continue;
            for (unsigned k = 0; k < donor_buckets; ++k) {
                if ((l.refused >> k & 1) == 0) unfile_donor(l, k);
            }
            unindex(l);
            forget_frees(l);
            if constexpr (counts_reserved) reserved_bytes_ -= l.pool.reserved_bytes();
            l.dropping = true;
            any = true;
        }
        if (!any) return;
        std::erase_if(idle_lanes_, [](const lane* l) { return l->dropping; });
        std::erase_if(lanes_, [](const std::unique_ptr<lane>& l) { return l->dropping; });  // the pools give everything back now
    }

    // The work before every lane's frees is done: the host waits for it.
    void settle_frees() {
        const bool device = std::any_of(lanes_.begin(), lanes_.end(), [](const auto& l) { return l->uncovered && !l->idle; });
        if (device) events_.synchronize_all();
        for (auto& l : lanes_) {
            if (!device && l->freed && !l->idle) events_.synchronize(*l->freed);
            forget_frees(*l);
        }
    }

    // `l`'s free blocks need no wait any more.
    void forget_frees(lane& l) noexcept {
        if (l.freed) events_.recycle(*l.freed);
        l.freed.reset();
        l.uncovered = false;
        l.wanted = false;
    }

    // `stream`: the stream the block is freed on; nullptr for a plain deallocate (already idle).
    void free_from(void* pointer, std::size_t bytes, std::size_t alignment, const stream_ref* stream) noexcept {
        lane* owner = nullptr;
        lane* taker = nullptr;
        std::vector<use> streams;
        if (tracked_) {
            const live_block* found = find_live(pointer);
            POOLKIT_ASSERT(found != nullptr, "deallocate of a pointer stream_ordered did not hand out (or freed twice)");
            if (found == nullptr) return;
            owner = found->owner;
            taker = found->taker;
            if (taker != nullptr) --taker->taken_blocks;
            if (found->used_elsewhere) {
                const auto uses = uses_.find(pointer);
                streams = std::move(uses->second);
                uses_.erase(uses);
            }
        } else {
            POOLKIT_ASSERT(!lanes_.empty(), "deallocate of a pointer stream_ordered did not hand out");
            if (lanes_.empty()) return;
            owner = lanes_.front().get();  // the only lane: the lane pool checks the pointer itself
        }
        // Freed on its own lane's stream, or idle (a plain free): reusable in its lane at once.
        // By handle, without the identity: a new stream that got a destroyed stream's handle
        // orders the block after its own work, and the event recorded below is on a live stream.
        const bool own_stream = stream != nullptr && is_handle_of(*owner, *stream);
        if ((stream == nullptr || own_stream) && streams.empty()) {
            if (tracked_) live_.erase(pointer);
            --live_count_;
            if (own_stream) mark_freed(*owner);  // before the pool may return it (secure)
            give_back(*owner, pointer, bytes, alignment);
            if (own_stream) note_free(*owner, *stream);
            return;
        }
        free_elsewhere(pointer, bytes, alignment, stream, *owner, taker, own_stream, std::move(streams));
    }

    // A free on another stream than the block's lane's, or of a block used on other streams.
    [[gnu::noinline]] void free_elsewhere(void* pointer, std::size_t bytes, std::size_t alignment, const stream_ref* stream,
                                          lane& owner_lane, const lane* taker, bool own_stream, std::vector<use> streams) noexcept {
        lane* owner = &owner_lane;
        // Freed on another stream, and used on no other: parked in that stream's lane (made here if
        // need be, which starts tracking), where its next request of the same size takes it with
        // no event. Lanes that cannot be found or made leave it to the deferred list below.
        lane* parking = stream != nullptr && !own_stream && streams.empty() ? parking_lane(*stream) : nullptr;
        if (tracked_ && find_live(pointer) != nullptr) {
            live_.erase(pointer);
        } else if (tracked_) {  // untracked until just now, and not a live block
            POOLKIT_ASSERT(false, "deallocate of a pointer stream_ordered did not hand out");
            return;
        }
        --live_count_;
        if (parking == owner) {  // another handle of the lane's own stream (0 and cudaStreamLegacy)
            mark_freed(*owner);
            give_back(*owner, pointer, bytes, alignment);
            note_free(*owner, *stream);
            return;
        }
        if (parking != nullptr && park(*parking, {pointer, bytes, alignment, owner, parking == taker}, *stream)) return;
        // The freeing stream's work is waited for too, own or not: the block goes back to its lane
        // when all are done, and no event of the lane covers this free.
        if (stream != nullptr) {
            try {
                streams.push_back({*stream, thread_of(*stream)});
            } catch (...) {  // no host memory to defer it: wait for the freeing stream here
                try {
                    events_.synchronize(events_.record(*stream));
                } catch (...) {
                    POOLKIT_ASSERT(false, "stream_ordered could not order a free on another stream");
                }
            }
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
            if (own_stream) mark_freed(*owner);
            give_back(*owner, pointer, bytes, alignment);
            if (own_stream) note_free(*owner, *stream);
            return;
        }
        try {
            deferred_block entry{{{pointer, bytes, alignment, owner}}, {}};
            entry.events.reserve(streams.size());
            for (const use& user : streams) entry.events.push_back(events_.record(user.stream));
            deferred_.push_back(std::move(entry));
            ++deferred_count_;
        } catch (...) {
            // No event could be recorded: wait for the device by the slow road rather than lose order.
            for (const use& user : streams) {
                try {
                    events_.synchronize(events_.record(user.stream));
                } catch (...) {
                    POOLKIT_ASSERT(false, "stream_ordered could not order a deferred free");
                }
            }
            give_back(*owner, pointer, bytes, alignment);
        }
    }

    // The lane of `stream` for parking a block freed there, or nullptr where it cannot be had.
    lane* parking_lane(stream_ref stream) noexcept {
        try {
            return &stream_lane(stream);
        } catch (...) {
            return nullptr;
        }
    }

    // Holds `block`, freed on `stream`, in `at` (the lane of `stream`). Past max_parked_blocks or
    // max_parked_bytes, everything parked there goes back to its lanes behind one event recorded on
    // `stream` (alive during this call). False: it could not be held (no host memory), nothing changed.
    bool park(lane& at, const parked_block& block, stream_ref stream) noexcept {
        try {
            at.parked.push_back(block);
        } catch (...) {
            return false;
        }
        at.parked_sizes |= parked_bit(block.bytes);
        if (!block.adopted) {
            at.foreign_bytes += block.bytes;
            foreign_bytes_ += block.bytes;
        }
        ++parked_count_;
        if (at.parked.size() <= max_parked_blocks && foreign_bytes_ <= max_parked_bytes) return true;
        deferred_block entry;
        try {
            deferred_.reserve(deferred_.size() + 1);
            entry.events.push_back(events_.record(stream));
        } catch (...) {
            // No event or no room for the entry: wait for the device rather than lose order.
            try {
                events_.synchronize_all();
            } catch (...) {
                POOLKIT_ASSERT(false, "stream_ordered could not order parked blocks");
            }
            return_parked(at);
            return true;
        }
        const std::size_t count = at.parked.size();
        entry.blocks.swap(at.parked);
        at.parked_sizes = 0;
        foreign_bytes_ -= at.foreign_bytes;
        at.foreign_bytes = 0;
        parked_count_ -= count;
        deferred_count_ += count;
        deferred_.push_back(std::move(entry));  // room was reserved
        return true;
    }

    // Gives every block parked in `l` back to its lane; their stream's work is done.
    void return_parked(lane& l) noexcept {
        for (const parked_block& b : l.parked) {
            give_back(*b.owner, b.pointer, b.bytes, b.alignment);
        }
        parked_count_ -= l.parked.size();
        foreign_bytes_ -= l.foreign_bytes;
        l.parked.clear();
        l.parked_sizes = 0;
        l.foreign_bytes = 0;
    }

    // Every parked block back to its lane, after the whole device: their streams may be gone.
    void return_all_parked() {
        if (parked_count_ == 0) return;
        events_.synchronize_all();
        for (auto& l : lanes_) return_parked(*l);
    }

    // Returns the deferred blocks whose events are done to their lanes, oldest first, and stops
    // polling after `patience` entries that are not done (the newer ones are mostly behind them).
    void drain_deferred(std::size_t patience) {
        std::size_t kept = 0;
        for (std::size_t i = 0; i < deferred_.size(); ++i) {
            deferred_block& entry = deferred_[i];
            const bool done = patience > 0 && std::all_of(entry.events.begin(), entry.events.end(),
                                                          [&](const event_type& event) { return events_.done(event); });
            if (done) {
                return_deferred(entry);
                continue;
            }
            if (patience > 0) --patience;
            if (kept != i) deferred_[kept] = std::move(entry);
            ++kept;
        }
        deferred_.erase(deferred_.begin() + static_cast<std::ptrdiff_t>(kept), deferred_.end());
    }

    // Waits for every deferred block's events, then returns them all to their lanes.
    void wait_for_deferred() {
        for (deferred_block& entry : deferred_) {
            for (const event_type& event : entry.events) events_.synchronize(event);
        }
        for (deferred_block& entry : deferred_) return_deferred(entry);
        deferred_.clear();
    }

    void return_deferred(deferred_block& entry) noexcept {
        for (const auto& event : entry.events) events_.recycle(event);
        for (const parked_block& b : entry.blocks) {
            give_back(*b.owner, b.pointer, b.bytes, b.alignment);
        }
        deferred_count_ -= entry.blocks.size();
    }

    memory_figures figures(std::size_t bytes, std::size_t alignment) const {
        if constexpr (requires(const lane_pool_type& p) {
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
    detail::pointer_map<lane*> stream_index_;  // the lanes of created streams, by identity
    std::unordered_map<lane_key, lane*, lane_key_hash> lane_index_;  // every other lane, by key
    lane* last_ = nullptr;                      // the lane of the last call: most calls hit it
    // Live blocks and their lanes, once tracked_ (see start_tracking); live_count_ always.
    detail::pointer_map<live_block> live_;
    bool tracked_ = !walkable<lane_pool_type>;
    std::size_t live_count_ = 0;
    std::unordered_map<void*, std::vector<use>> uses_;  // record_use streams, rarely any
    std::vector<deferred_block> deferred_;
    std::size_t deferred_count_ = 0;  // blocks in deferred_
    std::size_t stale_misses_ = 0;    // misses that skipped uncovered lanes since the last settle_all
    std::size_t parked_count_ = 0;    // blocks parked over all lanes
    std::size_t foreign_bytes_ = 0;   // bytes of those not adopted (lane::foreign_bytes)
    std::size_t held_bytes_ = 0;      // requested bytes of the blocks out of their pools: live, parked, deferred
    std::size_t reserved_bytes_ = 0;  // what the lane pools reserve, where they count it
    std::size_t growth_slack_ = default_growth_slack;
    const stream_ref* call_stream_ = nullptr;  // the stream of the call in progress (call_on)
    std::size_t untracked_blocks_ = 0;         // live blocks of untracked_owner_ not in live_ (find_live)
    lane* untracked_owner_ = nullptr;
    std::deque<lane*> idle_lanes_;              // lanes a new stream may take over, oldest first (note_idle)
    std::size_t settle_lanes_at_ = 64;          // lanes at which a new one settles all first
    bool closing_ = false;                      // destroyed: everything was waited for
    // donors_[k]: the lanes that may serve a request of bucket k from what they hold.
    std::array<std::vector<lane*>, donor_buckets> donors_;
};

static_assert(stream_resource_with<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<host_accessible>>,
                                                  completed_events>,
                                   host_accessible>);
static_assert(has_release<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>> &&
              has_check_invariants<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>> &&
              has_owns<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>> &&
              walkable<stream_ordered<detail::cached_pool_archetype<detail::resource_archetype<>>, completed_events>>);

}  // namespace poolkit
