// stream_ordered<Upstream, Lanes, Events>: stream-ordered reuse over any caching strategy, with
// one pool that every stream shares — cudaMallocAsync's model over poolkit's placement strategies.
//
//   stream_ordered<cuda_device_resource, lanes<best_fit>> pool;
//
// The free index is one Pool (any strategy or stack, made by Lanes over a gated reference to the
// upstream) plus the frees not yet ready for every stream, each tagged with its stream. The parts,
// each with its contract in adaptor/detail/:
// - stream_table: one record per stream, found by identity (and thread, for per-thread handles).
// - front_cache, fronts, open_fronts: a block freed on stream S waits in S's front; S's requests
//   of its exact size take it at once (S's order covers it), no other stream may. A front is
//   covered during a call on S — into the pool at once where S has no work pending (idle():
//   cudaStreamQuery), else behind one event recorded on S — when it is full, past the fronts'
//   byte budget, among too many open fronts, asked for by another stream's miss, or aged. Where
//   events cost nothing (completed_events) every free is covered at once.
// - waiting_blocks: covered fronts (and blocks with record_use streams) behind their events. Done
//   batches go into the pool, where they coalesce and serve every stream (polled at misses and
//   every poll_interval calls). Before the pool grows, a miss may make its stream wait on the GPU
//   for a waiting block of its exact size, then put the oldest batches into the pool behind their
//   events: internal_dependencies(), on by default, as cudaMallocAsync allows.
// - pool_tag: for whom the pool's free blocks are ready. A stream alone in use (no plain allocate)
//   is the pool's home and frees straight into it with no event; when a second comes, the home
//   covers the pool at its next call, and until then the newcomer takes memory straight from the
//   upstream (passed_through) for settle_after misses at most. A stream that has made every call
//   for rehome_after calls becomes the home again (a program that left its other streams); each
//   time another stream ends such a home while its frees are uncovered, the wait doubles
//   (sole_stream). Batches
//   put in before growth are the tag's covers: every other stream waits on them once before it
//   next takes from the pool.
// - block_uses: record_use (PyTorch's record_stream) streams; such a block waits at its free
//   behind an event on each of them and on the freeing stream.
// No stream is touched after the call that named it (one may be destroyed once its work is
// issued), but one the Events call lasting (never destroyed): where its front must be covered and
// it was idle at its last cover, the front is covered at the next allocation, on any stream, so
// that a run of frees costs one query. A front asked settle_after misses ago and still open (its
// stream destroyed without forget_stream, say) makes the host wait for the whole device once, and
// everything becomes free for all. No memory leaves the pool before the work that may use it is done: the pool reaches the
// upstream only through its gate (detail/gated_upstream.hpp), which first waits for the home's
// frees and the covers. When the upstream is exhausted the host waits for everything, every free
// block goes into the pool, the pool releases its wholly free chunks and the request is tried once
// more before out_of_memory.
// CUDA graphs (Events that see captures: cuda_events, host_events; docs/stream_ordering.md):
// - capture_door: which capture a call is in (asked on every call, or only while one is
//   announced: capture_checks()), and what calls outside any capture may do while a capture the
//   pool served may run — relaxed capture mode, no device-wide wait, chunks given back held,
//   granules unmapped only where events make it safe.
// - graph_pools: a call on a stream in capture is served by the capture's graph pool, grown in
//   relaxed mode, and makes no call a capture forbids (no event query or host wait, no cudaFree,
//   no identity: graph pools key streams by handle). Over virtual memory, graph pools are caching
//   pools of whole mapped granules: an expandable Pool would unmap what a graph may use.
// Complexity: a stream's record O(1); a hit is a front take (O(1) when its size mask rules the
// size out) or the Pool's cached allocate; a free is a front push, or the Pool's deallocate for
// the home. Records of streams not seen since the last trim, with empty fronts, are dropped once
// there are twice as many as the trim kept (min_trim_records at least): O(1) amortized.
// Thread safety: none; wrap in synchronized<>. Alignment: the Pool's.
// Exhaustion: out_of_memory with the pool's live and reserved bytes.
//
// Lanes: the lane policy (adaptor/lanes.hpp; pool_lanes in adaptor/stream_concepts.hpp) that
// makes the Pool over a gated reference to the upstream: lanes<Strategy> (with the strategy's
// options) or lanes<Stack, Options>, a stack being an alias template. The Pool serves from what
// it holds with `try_allocate_cached(bytes, alignment) noexcept` and gives chunks back with
// `release()`; it need not be movable. The constructor takes the upstream and the Lanes' options.
// Events: the events_policy concept (cuda_events, the default with CUDA; host_events;
// completed_events, the default without CUDA).
#pragma once

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/detail/block_uses.hpp>
#include <poolkit/adaptor/detail/capture_door.hpp>
#include <poolkit/adaptor/detail/due_fronts.hpp>
#include <poolkit/adaptor/detail/fronts.hpp>
#include <poolkit/adaptor/detail/gated_upstream.hpp>
#include <poolkit/adaptor/detail/graph_pools.hpp>
#include <poolkit/adaptor/detail/passed_through.hpp>
#include <poolkit/adaptor/detail/pending_walk.hpp>
#include <poolkit/adaptor/detail/pool_tag.hpp>
#include <poolkit/adaptor/detail/sole_stream.hpp>
#include <poolkit/adaptor/detail/stream_table.hpp>
#include <poolkit/adaptor/detail/waiting_blocks.hpp>
#include <poolkit/adaptor/lanes.hpp>
#include <poolkit/adaptor/stream_concepts.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/captures.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/core/virtual_memory.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/caching_pool.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <stdexcept>
#include <span>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#if POOLKIT_HAS_CUDA
#  include <poolkit/adaptor/cuda_events.hpp>
#endif

namespace poolkit {

template <class Upstream, class Lanes, events_policy Events = default_events>
    requires pool_lanes<Lanes, Upstream>
class stream_ordered : public forward_properties<stream_ordered<Upstream, Lanes, Events>, Upstream> {
public:
    using upstream_type = Upstream;
    using lanes_type = Lanes;
    using pool_type = typename Lanes::template pool_type<detail::gated_upstream<Upstream>>;
    using pool_options = typename Lanes::template options_type<detail::gated_upstream<Upstream>>;
    using event_type = typename Events::event_type;

    // The bounds of the fronts (detail/fronts.hpp): blocks per front, streams with an open front,
    // the byte budget's least, a large free's least, and the age at which a front is covered.
    static constexpr std::size_t front_blocks = detail::front_limits::blocks_per_front;
    static constexpr std::size_t max_open_fronts = detail::front_limits::max_open;
    static constexpr std::size_t min_front_budget = detail::front_limits::min_budget;
    static constexpr std::size_t min_large_free = detail::front_limits::min_large;
    static constexpr std::size_t front_age = detail::front_limits::age;
    // A front asked for this many misses ago and still open: its stream may be gone; the host
    // waits for the whole device once.
    static constexpr std::size_t settle_after = 32;
    // A miss about to grow puts at most this many of the oldest waiting batches into the pool
    // behind their events (internal_dependencies).
    static constexpr std::size_t max_batches_behind = 8;
    // A poll stops after this many batches of waiting blocks that are not done. Misses poll, and
    // one call in poll_interval; a miss about to grow the pool polls every batch.
    static constexpr std::size_t drain_patience = 2;
    static constexpr std::size_t poll_interval = 32;
    // Records of streams (with empty fronts) are dropped once there are this many, or twice as
    // many as after the last drop.
    static constexpr std::size_t min_trim_records = 8192;
    // A stream that has made every stream call for this many calls becomes the pool's home again
    // (its frees straight into the pool, no front, no event) once the pool is ready for every
    // stream. Doubled (up to max_rehome_after) each time another stream's call ends such a home
    // while its frees are uncovered: the first miss before the home covers again waits for the
    // whole device once (where the first turn from one stream to several passes settle_after
    // misses through from the upstream first).
    static constexpr std::uint64_t rehome_after = detail::sole_stream_limits::first_wait;
    static constexpr std::uint64_t max_rehome_after = detail::sole_stream_limits::max_wait;

    // The upstream is built in place here (it need not move: cuda_vmm_resource).
    stream_ordered()
        requires std::default_initializable<upstream_type> && std::default_initializable<Events>
        : upstream_(), events_(), pool_(make_pool({})) {}
    // In place (docs/concepts.md): the upstream built from `args`, after the pool's own options and
    // events where they are given.
    template <class... Args>
        requires constructible_in_place<upstream_type, Args...> && std::default_initializable<Events>
    explicit stream_ordered(std::in_place_t, Args&&... args)
        : upstream_(build_from<upstream_type>(std::forward<Args>(args)...)), events_(), pool_(make_pool({})) {}
    template <class... Args>
        requires constructible_in_place<upstream_type, Args...> && std::default_initializable<Events>
    stream_ordered(std::in_place_t, pool_options options, Args&&... args)
        : upstream_(build_from<upstream_type>(std::forward<Args>(args)...)), events_(), pool_(make_pool(options)) {}
    template <class... Args>
        requires constructible_in_place<upstream_type, Args...>
    stream_ordered(std::in_place_t, pool_options options, Events events, Args&&... args)
        : upstream_(build_from<upstream_type>(std::forward<Args>(args)...)), events_(std::move(events)), pool_(make_pool(options)) {}
    // The order before the rule: the upstream's one argument first. An upstream itself goes to the
    // constructor below (as build_from passes it, from a lane policy or an adaptor above).
    template <class UpstreamOptions>
        requires std::constructible_from<upstream_type, UpstreamOptions> &&
                     (!std::same_as<std::remove_cvref_t<UpstreamOptions>, upstream_type>)
    [[deprecated("in place, the pool's own arguments come first (docs/concepts.md)")]] stream_ordered(std::in_place_t,
                                                                                                      UpstreamOptions&& upstream_options,
                                                                                                      pool_options options,
                                                                                                      Events events = {})
        : upstream_(std::forward<UpstreamOptions>(upstream_options)), events_(std::move(events)), pool_(make_pool(options)) {}

    explicit stream_ordered(upstream_type upstream, pool_options options = {}, Events events = {})
        : upstream_(std::move(upstream)), events_(std::move(events)), pool_(make_pool(options)) {}

    stream_ordered(const stream_ordered&) = delete;
    stream_ordered& operator=(const stream_ordered&) = delete;

    // Everything is waited for; the pool then returns everything to the upstream.
    ~stream_ordered() {
        try {
            if (graphs_type* graphs = door_.graphs()) {  // graphs may still run on their pools
                wait_for_device();
                graphs->release_all([&](const detail::free_block& b) { into_pool(b); });
            }
            settle_everything();
            if constexpr (resource<upstream_type>) {
                for (const detail::free_block& b : door_.take_held()) upstream_.deallocate(b.pointer, b.bytes, b.alignment);
            }
        } catch (...) {
            POOLKIT_ASSERT(false, "stream_ordered could not wait for its streams on destruction");
        }
        closing_ = true;
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        if (const std::uint64_t capture = door_.capture_of(stream); capture != 0)
            return allocate_captured(capture, stream, bytes, alignment);
        const call_on on{*this, &stream};
        ++clock_;
        return eager(&stream, [&] { return allocate_on(&record_for(stream), &stream, bytes, alignment); });
    }

    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        if (pointer == nullptr) return;
        const call_on on{*this, &stream};
        ++clock_;
        const std::uint64_t capture = door_.capture_of(stream);
        if (capture != 0 || door_.graphs() != nullptr) {
            if (free_captured(capture, {pointer, bytes, alignment}, stream)) return;
        }
        const auto free = [&]() noexcept {
            if (!uses_.empty() && free_used(pointer, bytes, alignment, &stream)) return;
            --live_count_;
            free_on(stream, {pointer, bytes, alignment});
        };
        try {
            eager(&stream, free);
        } catch (...) {  // the capture mode could not be set: freed in the thread's own mode
            free();
        }
    }

    // Memory usable on any stream at once.
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        plain_allocations_ = true;  // the pool has no home from now on (it would wait here each time)
        return eager(nullptr, [&] { return allocate_on(nullptr, nullptr, bytes, alignment); });
    }

    // The caller promises no work still uses the block.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        if (door_.graphs() != nullptr && free_captured(0, {pointer, bytes, alignment}, default_stream)) return;
        if (!uses_.empty() && free_used(pointer, bytes, alignment, nullptr)) return;
        --live_count_;
        into_pool({pointer, bytes, alignment});
    }
    POOLKIT_CUDA_MR_MEMBERS(stream_ordered);

    // The block at `pointer` is also used by work on `stream` (PyTorch's record_stream): its reuse
    // waits until the work issued there before its deallocation is done. The deallocation records
    // an event on `stream`, so `stream` must still exist then — or have been passed to
    // forget_stream() before it was destroyed, which waits for its work and drops it from every
    // block's uses.
    void record_use(void* pointer, stream_ref stream) {
        if constexpr (has_owns<pool_type>) {
            POOLKIT_ASSERT(handed_by_us(pointer) && !pending_free(pointer), "record_use of a pointer stream_ordered did not hand out");
        }
        uses_.add(pointer, {stream, thread_of(stream)});
    }

    // Whether the block at `pointer` was freed and has not reached the pool yet: it waits in a
    // stream's front or behind events (a block given to record_use waits for that work).
    // O(blocks freed and not in the pool).
    [[nodiscard]] bool pending_free(const void* pointer) const noexcept {
        bool found = false;
        records_.for_each([&](const record_type& r) {
            for (const detail::free_block& b : r.front.blocks()) found = found || b.pointer == pointer;
        });
        waiting_.for_each_block([&](const detail::free_block& b) { found = found || b.pointer == pointer; });
        return found;
    }

    // Synchronizes `stream`, drops it from the uses of every live block (record_use) and puts its
    // front into the pool, free for all. Optional before destroying a stream that freed blocks (a
    // stream gone quiet is settled after settle_after misses); required for one named in
    // record_use whose blocks are still live.
    void forget_stream(stream_ref stream) {
        if (door_.capture_of(stream) != 0) throw std::logic_error("poolkit: stream_ordered::forget_stream of a stream in capture");
        const detail::stream_use gone{stream, thread_of(stream)};
        const bool used = uses_.uses(gone);
        record_type* forgotten = records_.find(key_of(stream));
        if (forgotten == nullptr && !used) return;
        eager(&stream, [&] { wait_for(stream); });
        uses_.forget(gone);
        if (forgotten == nullptr) return;
        if (tag_.home() == forgotten) tag_.clear();  // its frees are done
        sole_.forget(*forgotten);
        due_.drop(*forgotten);
        front_into_pool(*forgotten);
        records_.erase_if([&](const record_type& r) { return &r == forgotten; });
    }

    // CUDA graphs (docs/stream_ordering.md): a request on a stream in capture is served by a graph
    // pool, private to the captures into it, whose blocks serve nothing else until it is released.
    // capture_into() names the pool the capture `stream` is in allocates from, so that graphs share
    // one (by default each capture has its own, named by the capture's id: graph_pool_of()).
    // Requires Events that see captures (cuda_events, host_events) and `stream` in capture.
    void capture_into(stream_ref stream, std::uint64_t pool) {
        const std::uint64_t capture = door_.capture_of(stream, capture_check::every_call);
        if (capture == 0) throw std::logic_error("poolkit: stream_ordered::capture_into of a stream not in capture");
        graphs().share(capture, pool);
    }
    // The graph pool the capture `stream` is in allocates from (0: not in capture).
    [[nodiscard]] std::uint64_t graph_pool_of(stream_ref stream) {
        const std::uint64_t capture = door_.capture_of(stream, capture_check::every_call);
        return capture == 0 ? 0 : (door_.graphs() != nullptr ? door_.graphs()->pool_of(capture) : capture);
    }
    // The graphs that allocate from `pool` will not be launched again: the host waits for the
    // device (outside any capture), then the pool's free memory goes back upstream, blocks of the
    // shared pool the graphs held go back to it, and blocks still live go back as they are freed.
    void release_graph_pool(std::uint64_t pool) {
        graphs_type* graphs = door_.graphs();
        if (graphs == nullptr) return;
        wait_for_device();
        graphs->release(pool, [&](const detail::free_block& b) { into_pool(b); });
    }
    // Graph pools with memory, and blocks handed out from them.
    [[nodiscard]] std::size_t graph_pools() const noexcept { return door_.graphs() != nullptr ? door_.graphs()->pools() : 0; }
    [[nodiscard]] std::size_t graph_blocks() const noexcept { return door_.graphs() != nullptr ? door_.graphs()->live_blocks() : 0; }

    // Waits for every stream's frees, puts every free block into the pool and returns its wholly
    // free chunks upstream (PyTorch's empty_cache).
    // While a capture this pool served may still run, only what no capture forbids: the waiting
    // blocks are waited for, and the chunks given back are held until the captures end.
    void release() {
        if (door_.graphs() != nullptr) door_.release_gone([&](const detail::free_block& b) { into_pool(b); });
        if (door_.graphs() != nullptr && door_.during_captures(nullptr, give_back_held())) {
            door_.capture_safe([&] {
                waiting_.wait_all([&](const detail::free_block& b) { into_pool(b); });
                pool_.release();
            });
        } else {
            settle_everything();
            pool_.release();
        }
    }

    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<pool_type>
    {
        return handed_by_us(pointer) && !pending_free(pointer);
    }

    void check_invariants() const
        requires has_check_invariants<pool_type>
    {
        pool_.check_invariants();
        if (door_.graphs() != nullptr) door_.graphs()->check_invariants();
        POOLKIT_VERIFY(records_.consistent(), "a stream record missing from its index");
        POOLKIT_VERIFY(fronts_.open().consistent() && waiting_.consistent(), "open fronts or waiting blocks lost count");
        std::size_t bytes = 0, open = 0, due = 0;
        bool home_found = tag_.home() == nullptr;
        records_.for_each([&](const record_type& r) {
            POOLKIT_VERIFY(r.front.consistent(), "a front cache lost count");
            due += r.cover_due ? 1 : 0;
            bytes += r.front.bytes();
            open += r.front.empty() ? 0 : 1;
            home_found = home_found || tag_.home() == &r;
        });
        POOLKIT_VERIFY(bytes == fronts_.bytes() && open == fronts_.open().size(), "the fronts lost count");
        POOLKIT_VERIFY(due_.consistent(due), "the fronts due to be covered lost count");
        POOLKIT_VERIFY(home_found, "the pool's home is not a stream record");
        bool sole_found = sole_.last() == nullptr;
        records_.for_each([&](const record_type& r) { sole_found = sole_found || sole_.last() == &r; });
        POOLKIT_VERIFY(sole_found, "the stream of the last call is not a stream record");
        if constexpr (has_owns<pool_type>) {
            records_.for_each([&](const record_type& r) {
                for (const detail::free_block& b : r.front.blocks())
                    POOLKIT_VERIFY(handed_by_us(b.pointer), "a front block stream_ordered did not hand out");
            });
            waiting_.for_each_block([&](const detail::free_block& b) {
                POOLKIT_VERIFY(handed_by_us(b.pointer), "a waiting block stream_ordered did not hand out");
            });
            uses_.for_each_block([&](const void* p) { POOLKIT_VERIFY(handed_by_us(p), "record_use streams of a block not live"); });
        }
    }

    // The walk of walk.hpp over the pool, in address order; a block in a front, waiting, or kept
    // by a graph pool (freed in a capture) is pending_free (with its stream, for a front), not
    // live. Then the graph pools' chunks (chunk_view::pool set). O(blocks + pending log pending).
    template <class Visitor>
        requires walkable<pool_type>
    void for_each_block(Visitor&& visit) const {
        std::vector<detail::pending_block> pending_blocks;
        pending_blocks.reserve(waiting_.blocks() + front_blocks_held());
        records_.for_each([&](const record_type& r) {
            for (const detail::free_block& b : r.front.blocks()) pending_blocks.emplace_back(address_of(b.pointer), stream_id(r.stream));
        });
        waiting_.for_each_block([&](const detail::free_block& b) { pending_blocks.emplace_back(address_of(b.pointer), 0); });
        if (door_.graphs() != nullptr) {
            door_.graphs()->for_each_adopted(
                [&](std::uint64_t, const detail::free_block& b) { pending_blocks.emplace_back(address_of(b.pointer), 0); });
        }
        std::sort(pending_blocks.begin(), pending_blocks.end());
        detail::walk_pending(pool_, pending_blocks, visit);
        if (door_.graphs() != nullptr) door_.graphs()->for_each_block(visit);
    }

    // Blocks handed out now; streams with a record; blocks in fronts; blocks waiting for events.
    [[nodiscard]] std::size_t live_blocks() const noexcept { return live_count_; }
    [[nodiscard]] std::size_t streams() const noexcept { return records_.size(); }
    [[nodiscard]] std::size_t front_blocks_held() const noexcept {
        std::size_t count = 0;
        records_.for_each([&](const record_type& r) { count += r.front.size(); });
        return count;
    }
    [[nodiscard]] std::size_t waiting_blocks() const noexcept { return waiting_.blocks(); }
    // Times a stream became the pool's home again after others (rehome_after).
    [[nodiscard]] std::size_t homes_regained() const noexcept { return sole_.regains(); }
    // Bytes of the blocks freed but not in the pool yet (fronts and waiting).
    [[nodiscard]] std::size_t pending_bytes() const noexcept { return fronts_.bytes() + waiting_.bytes(); }
    [[nodiscard]] std::size_t reserved_bytes() const
        requires requires(const pool_type& p) { p.reserved_bytes(); }
    {
        return pool_.reserved_bytes();
    }

    // Whether a miss may make its stream wait (on the GPU) for another stream's event to take a
    // block of its exact size before the pool grows: cudaMallocAsync's
    // cudaMemPoolReuseAllowInternalDependencies. On by default; off, a stream never waits on
    // another's work for memory, at the cost of growth.
    void internal_dependencies(bool allowed) noexcept { internal_dependencies_ = allowed; }
    [[nodiscard]] bool internal_dependencies() const noexcept { return internal_dependencies_; }
    // When stream calls ask whether their stream is in capture (core/captures.hpp): every call by
    // default (one driver call each); only while a capture is announced; never.
    void capture_checks(capture_check check) noexcept { door_.checks(check); }
    [[nodiscard]] capture_check capture_checks() const noexcept { return door_.checks(); }
    // Whether a capture this pool served may still run (from its first call in capture until a
    // call on one of its streams finds it ended, or a wait for the whole device succeeded):
    // meanwhile nothing may wait for the whole device.
    [[nodiscard]] bool captures_running() const noexcept { return door_.running(); }

    [[nodiscard]] upstream_type& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const upstream_type& upstream_resource() const noexcept { return upstream_; }
    [[nodiscard]] Events& events() noexcept { return events_; }
    // The one pool every stream shares.
    [[nodiscard]] const pool_type& pool() const noexcept { return pool_; }

    friend bool operator==(const stream_ordered& a, const stream_ordered& b) noexcept { return &a == &b; }

private:
    static constexpr bool counts_reserved = requires(const pool_type& p) { p.reserved_bytes(); };
    // Graph pools over virtual memory are caching pools over its resource face (whole mapped
    // granules): an expandable pool unmaps free granules as it goes, which a graph launched
    // earlier from the same pool may still use.
    static constexpr bool over_virtual_memory = virtual_memory<referent_t<upstream_type>>;
    using graph_lanes = std::conditional_t<over_virtual_memory, lanes<caching_pool>, Lanes>;
    using graphs_type = detail::graph_pools<Events, graph_lanes, upstream_type>;
    // Events that cost nothing and are done when recorded (completed_events): every free is covered
    // at once and every call polls, which gives the smallest footprint.
    static constexpr bool cheap_events = requires { requires Events::costs_nothing; };

    // What stream_ordered knows of one stream.
    struct record_type {
        record_type(const detail::stream_key& key_, stream_ref stream_) : key(key_), stream(stream_), front(front_blocks) {}
        detail::stream_key key;
        stream_ref stream;  // the handle it was made with
        detail::front_cache front;  // its frees no event covers
        // open_fronts' (detail/open_fronts.hpp): asked to cover its front (or, as the pool's
        // home, the pool) at its next call.
        std::size_t open_slot = 0;
        bool wanted = false;
        std::uint64_t asked_at = 0;
        std::uint64_t cover_seen = 0;  // the pool cover its stream waited for (pool_tag)
        std::uint64_t opened_at = 0;  // the call clock when its front last went from empty to open
        std::uint64_t last_call = 0;  // the call clock at its stream's last call
        std::uint8_t busy_streak = 0;  // fronts' idle_first
        std::uint8_t idle_skips = 0;
        bool cover_due = false;  // due_fronts': its front is covered before the pool next serves
    };

    // The pool's return gate: memory leaves it only after secure().
    struct gate final : detail::return_gate {
        explicit gate(stream_ordered& owner_) noexcept : owner(&owner_) {}
        bool before_return() noexcept override {
            if (owner->door_.safe()) return false;  // cudaFree would break the capture: held
            owner->secure();
            return true;
        }
        void hold(void* pointer, std::size_t bytes, std::size_t alignment) noexcept override {
            owner->door_.hold({pointer, bytes, alignment});
        }
        // While a capture may run, granules are unmapped only where events alone make it safe.
        bool may_unmap() noexcept override { return !owner->door_.safe() || owner->secure_by_events(); }
        void before_unmap() noexcept override { owner->secure(); }
        stream_ordered* owner;
    };

    pool_type make_pool(const pool_options& options) {
        options_ = options;
        return Lanes::make(detail::gated_upstream<upstream_type>(upstream_, gate_), options);
    }

    graphs_type& graphs() {
        return door_.graphs([&] {
            if constexpr (over_virtual_memory) {
                return std::make_unique<graphs_type>(events_, upstream_, caching_options{});
            } else {
                return std::make_unique<graphs_type>(events_, upstream_, options_);
            }
        });
    }

    // Runs `f`, a call outside any capture on `stream` (nullptr: a plain call), through the door:
    // capture-safe while a capture this pool served may run.
    template <class F>
    decltype(auto) eager(const stream_ref* stream, F&& f) {
        if (door_.graphs() == nullptr) [[likely]]
            return std::forward<F>(f)();
        const detail::stream_key key = stream != nullptr ? capture_key_of(*stream) : detail::stream_key{};
        return door_.eager(
            stream != nullptr ? &key : nullptr, std::forward<F>(f), [&](const detail::free_block& b) { into_pool(b); }, give_back_held());
    }
    // Gives back upstream a chunk the gate held during captures.
    auto give_back_held() noexcept {
        return [this](const detail::free_block& b) {
            secure();
            if constexpr (resource<upstream_type>) upstream_.deallocate(b.pointer, b.bytes, b.alignment);
        };
    }

    // A request on a stream in capture: from the capture's graph pool, grown in relaxed capture
    // mode (cudaMalloc is then allowed); nothing else this adaptor does could run in a capture.
    [[gnu::noinline]] void* allocate_captured(std::uint64_t capture, stream_ref stream, std::size_t bytes, std::size_t alignment) {
        if constexpr (capture_events<Events> && resource<upstream_type>) {
            const detail::stream_key key = capture_key_of(stream);
            graphs().note_running(capture, key);
            graphs().watch(capture, stream);
            void* pointer =
                graphs().allocate(capture, key, stream, bytes, alignment, [&](auto call) { return events_.unprohibited(call); });
            return handed_out(pointer);
        } else {
            static_cast<void>(capture), static_cast<void>(stream), static_cast<void>(bytes), static_cast<void>(alignment);
            throw std::logic_error("poolkit: stream_ordered over an upstream that is not a resource cannot serve a stream in capture");
        }
    }

    // A free that concerns a graph: a block of a graph pool (to it), or a block of the shared pool
    // freed on a stream in capture `capture` (the graph uses it: kept until its pool's release).
    // False: neither.
    [[gnu::noinline]] bool free_captured(std::uint64_t capture, const detail::free_block& block, stream_ref stream) noexcept {
        if (capture != 0) {
            try {
                graphs().note_running(capture, capture_key_of(stream));
                graphs().watch(capture, stream);
            } catch (...) {  // no host memory to note it: eager calls meanwhile may break the capture
            }
        }
        if (door_.graphs() != nullptr &&
            door_.graphs()->deallocate(block.pointer, block.bytes, block.alignment, stream, capture_key_of(stream), capture)) {
            if (!uses_.empty()) static_cast<void>(uses_.take(block.pointer));  // the graph pool orders its own
            --live_count_;
            return true;
        }
        if (capture == 0) return false;
        try {
            graphs().adopt(capture, block);
        } catch (...) {
            return false;  // no host memory: freed as if outside the capture (the capture may break)
        }
        static_cast<void>(uses_.take(block.pointer));  // its uses end with the graph's
        --live_count_;
        return true;
    }

    static std::thread::id thread_of(stream_ref stream) {
        return Events::per_thread(stream) ? std::this_thread::get_id() : std::thread::id{};
    }
    detail::stream_key key_of(stream_ref stream) const { return {static_cast<std::uint64_t>(events_.identity(stream)), thread_of(stream)}; }
    // The key of graph pools and captures: the handle, as a stream in capture cannot be asked for
    // its identity (that breaks the capture). A handle is only reused after its stream was
    // destroyed, which ends its captures.
    static detail::stream_key capture_key_of(stream_ref stream) noexcept { return {stream_id(stream), thread_of(stream)}; }
    static std::uintptr_t address_of(const void* pointer) noexcept { return reinterpret_cast<std::uintptr_t>(pointer); }

    record_type& record_for(stream_ref stream) {
        const detail::stream_key key = key_of(stream);
        record_type* found = records_.find(key);
        if (found == nullptr) found = &add_record(stream, key);
        found->last_call = clock_;
        if (found != sole_.last()) [[unlikely]]
            turn_to(*found);
        return *found;
    }

    // A call on `r` after calls on another stream (or none): a home whose frees are uncovered covers
    // the pool at its next call, so that `r` can take from it; `r` may become the home once it has
    // made every call for a while (sole_stream).
    [[gnu::noinline]] void turn_to(record_type& r) noexcept {
        if (record_type* home = tag_.home(); home != nullptr && home != &r && tag_.uncovered()) {
            home->wanted = true;
            if (sole_.regained_home()) {
                sole_.ended();
                // Its stream may not call again soon: the first miss waits for the device rather
                // than take memory from the upstream meanwhile.
                uncovered_misses_ = settle_after;
            }
        }
        sole_.turn_to(r, clock_);
    }

    [[gnu::noinline]] record_type& add_record(stream_ref stream, const detail::stream_key& key) {
        if (records_.size() >= trim_at_) {
            // Streams not seen since the last trim, with nothing in their fronts (their streams may
            // be gone: a new one has a new identity). The last call's stream was seen since.
            records_.erase_if(
                [&](const record_type& r) { return r.front.empty() && !r.cover_due && tag_.home() != &r && r.last_call < trimmed_at_; });
            trim_at_ = std::max(min_trim_records, 2 * records_.size());
            trimmed_at_ = clock_;
        }
        due_.reserve(records_.size() + 1);  // cover_soon() cannot fail
        return records_.add(std::make_unique<record_type>(key, stream));  // turn_to() tells the home
    }

    // Whether `r`'s frees go straight into the pool, as the pool's home: no plain allocate, and `r`
    // is the only stream in use, or has made every call for a while (sole_stream) and the pool is
    // ready for every stream (or `r` is its home already).
    bool frees_home(record_type& r) noexcept {
        if (plain_allocations_) return false;
        if (records_.size() == 1) return tag_.clean() || tag_.home() == &r;
        if (!sole_.alone_long(r, clock_)) return false;
        const bool new_home = tag_.home() != &r;
        if (new_home && !rehome()) return false;
        sole_.regained(new_home);
        return true;
    }

    // Whether the pool is ready for every stream, for a new home: covers done are dropped. Asked
    // again only sole_stream's wait later where it is not.
    [[gnu::noinline]] bool rehome() noexcept {
        bool clean = false;
        try {
            clean = tag_.drop_done();
        } catch (...) {  // the event queries failed: not now
        }
        if (!clean) sole_.not_ready(clock_);
        return clean;
    }

    // `r`: the record of the call's stream (nullptr for a plain allocate); `stream`: that stream.
    // Requires a valid alignment and bytes > 0.
    void* allocate_on(record_type* r, const stream_ref* stream, std::size_t bytes, std::size_t alignment) {
        if (!due_.empty()) [[unlikely]]
            cover_due();
        if (r != nullptr) {
            if (fronts_.due(*r, clock_)) cover(*r, *stream);
            if (!r->front.empty()) {
                if (void* pointer = r->front.take(bytes, alignment)) {
                    fronts_.took(*r, bytes);
                    return handed_out(pointer);
                }
            }
        }
        // Waiting blocks whose events are done go into the pool before it serves: a block that fits
        // better may be among them. Polled every poll_interval calls (each query is a driver call).
        if (!waiting_.empty() && (cheap_events || ++polls_ % poll_interval == 0)) drain();
        if (tag_.ready_for(r, r ? r->cover_seen : 0)) {
            if (void* pointer = pool_.try_allocate_cached(bytes, alignment)) return handed_out(pointer);
        }
        return allocate_missed(r, stream, bytes, alignment);
    }

    // Out of line, so that the hit above stays small enough to inline the pool's own path.
    [[gnu::noinline]] void* allocate_missed(record_type* r, const stream_ref* stream, std::size_t bytes, std::size_t alignment) {
        bool retry = drain() > 0;
        std::uint64_t plain_seen = 0;
        std::uint64_t& seen = r != nullptr ? r->cover_seen : plain_seen;
        if (!tag_.ready_for(r, seen)) {
            retry = true;
            if (!tag_.make_ready(stream, seen)) {
                // The home's frees are not covered yet (it covers them at its next call), and its
                // stream may be gone: a waiting block of this size, or memory straight from the
                // upstream, for settle_after such misses; then one wait for the whole device.
                if (void* pointer = take_waiting(stream, bytes, alignment)) return handed_out(pointer);
                if (++uncovered_misses_ <= settle_after || door_.safe()) {
                    if (void* pointer = passed_.take(upstream_, bytes, alignment)) return handed_out(pointer);
                    if (door_.safe()) throw out_of_memory("stream_ordered", figures(bytes, alignment));  // no device-wide wait now
                }
                settle();
            }
        }
        if (retry) {
            if (void* pointer = pool_.try_allocate_cached(bytes, alignment)) return handed_out(pointer);
        }
        if (void* pointer = take_waiting(stream, bytes, alignment)) return handed_out(pointer);
        // Other streams' fronts are asked for; one asked long ago may belong to a stream gone.
        if (fronts_.open().ask_all(r) && !door_.safe() && fronts_.open().stale(settle_after)) {
            settle();
            if (void* pointer = pool_.try_allocate_cached(bytes, alignment)) return handed_out(pointer);
        }
        // Before growing, every waiting batch is polled: one slow stream's batches must not keep
        // done ones of other streams out of the pool.
        if (!waiting_.empty() && waiting_.drain(waiting_.batches(), [&](const detail::free_block& b) { into_pool(b); }) > 0) {
            if (void* pointer = pool_.try_allocate_cached(bytes, alignment)) return handed_out(pointer);
        }
        if (r != nullptr && internal_dependencies_ && tag_.home() == nullptr && !waiting_.empty()) {
            if (void* pointer = take_behind_waiting(*r, *stream, bytes, alignment)) return handed_out(pointer);
        }
        if (void* pointer = try_grow(bytes, alignment)) return handed_out(pointer);
        if (!door_.safe()) {  // a capture forbids the device-wide wait and cudaFree of a release
            release();
            if (void* pointer = try_grow(bytes, alignment)) return handed_out(pointer);
        }
        throw out_of_memory("stream_ordered", figures(bytes, alignment));
    }

    // The pool's allocate, which may take memory from the upstream; nullptr where it has none.
    void* try_grow(std::size_t bytes, std::size_t alignment) {
        try {
            return pool_.allocate(bytes, alignment);
        } catch (const std::bad_alloc&) {
            return nullptr;
        }
    }

    // A waiting block of exactly this size, with the caller's stream ordered after its events
    // (the host waits for a plain allocate); nullptr if none, or where that is not allowed.
    void* take_waiting(const stream_ref* stream, std::size_t bytes, std::size_t alignment) {
        if (!internal_dependencies_ || waiting_.empty()) return nullptr;
        return waiting_.take_after(bytes, alignment, stream);
    }

    // cudaMallocAsync's internal dependencies, for any block that fits: the oldest waiting batches
    // go into the pool behind their events. `r`'s stream waits on them first; every other stream
    // waits on them too before it next takes from the pool (pool_tag's covers). Requires no home.
    void* take_behind_waiting(record_type& r, stream_ref stream, std::size_t bytes, std::size_t alignment) {
        tag_.reserve(waiting_.events_of_oldest(max_batches_behind));
        waiting_.hand_oldest_after(max_batches_behind, stream,
                                   [&](std::span<const event_type> covers, std::span<const detail::free_block> blocks) {
                                       tag_.add_covers(covers, r.cover_seen);
                                       for (const detail::free_block& b : blocks) into_pool(b);
                                   });
        return pool_.try_allocate_cached(bytes, alignment);
    }

    void* handed_out(void* pointer) noexcept {
        ++live_count_;
        return pointer;
    }

    // A block freed on `stream`, used on no other.
    void free_on(stream_ref stream, const detail::free_block& block) noexcept {
        record_type* r = nullptr;
        try {
            r = &record_for(stream);
            fronts_.reserve(*r);
        } catch (...) {  // no host memory for a record: wait for the stream here
            wait_then_pool(stream, block);
            return;
        }
        if (passed_.holds(block.pointer)) {
            // Passed through (rare, a turn from one stream to several): back to the upstream once
            // this stream's work is done, never among the waiting blocks a miss may pool early.
            wait_then_pool(stream, block);
            return;
        }
        if (frees_home(*r)) {
            tag_.note_home_free(*r);  // before the pool may return memory (secure)
            into_pool(block);
            return;
        }
        if constexpr (cheap_events) {
            cover_one(stream, block);  // nothing to batch: covered and polled at once
            return;
        }
        // A smaller free after a front was left for cover_due covers it first, as it found the
        // front covered before: the pool then gets what it would have, when it would have.
        if (r->cover_due && block.bytes < fronts_.large(reserved_or_zero())) [[unlikely]] {
            due_.drop(*r);
            cover(*r, stream);
        }
        if (fronts_.due(*r, clock_) || r->front.full()) cover(*r, stream);
        if (!fronts_.push(*r, block, clock_)) {  // no event could be recorded, or no room
            wait_then_pool(stream, block);
            return;
        }
        if (fronts_.crowded(*r, block.bytes, reserved_or_zero(), clock_)) cover_soon(*r, stream);
    }

    // `r`'s front must be covered now that its stream freed. Where that stream is lasting (Events'
    // lasting(): never destroyed, so any call may ask about it) and was idle at its last cover, it
    // is covered at the next allocation instead, on whatever stream (cover_due): before the pool
    // serves again, so that it holds what it would have, and a run of large frees costs one query
    // instead of one each. A stream found busy is covered now: an event recorded later would also
    // cover work issued after the frees.
    void cover_soon(record_type& r, stream_ref stream) noexcept {
        if constexpr (lasting_events<Events> && idle_events<Events>) {
            if (r.cover_due) return;
            if (r.busy_streak == 0 && tag_.home() != &r && lasting(stream)) {
                static_cast<void>(due_.add(r));  // room for every record (add_record)
                return;
            }
        }
        cover(r, stream);
    }

    // The fronts cover_soon() left, covered before the pool serves: one query of each lasting
    // stream for every free it made since. A stream that began a capture since is not asked (that
    // would break the capture): its front stays open for its own calls.
    [[gnu::noinline]] void cover_due() noexcept {
        due_.take_all([&](record_type& r) {
            std::uint64_t capture = 1;
            try {
                capture = door_.capture_of(r.stream);
            } catch (...) {  // taken as in capture
            }
            if (capture == 0) cover(r, r.stream);
        });
    }

    bool lasting(stream_ref stream) noexcept {
        if constexpr (lasting_events<Events>) {
            try {
                return events_.lasting(stream);
            } catch (...) {
            }
        }
        return false;
    }

    // `block`, freed on `stream`, behind an event of its own (into the pool at once where events
    // cost nothing and that one is done already).
    void cover_one(stream_ref stream, const detail::free_block& block) noexcept {
        try {
            const event_type event = events_.record(stream);
            if constexpr (cheap_events) {
                if (events_.done(event)) {
                    events_.recycle(event);
                    into_pool(block);
                    return;
                }
            }
            try {
                waiting_.add(std::span(&block, 1), std::span(&event, 1));
                return;
            } catch (...) {
                events_.recycle(event);
            }
        } catch (...) {
        }
        wait_then_pool(stream, block);
    }

    // What the pool reserves, for the fronts' bounds (0 where the Pool does not say: the least
    // bounds then).
    [[nodiscard]] std::size_t reserved_or_zero() const noexcept {
        if constexpr (counts_reserved) {
            return pool_.reserved_bytes();
        } else {
            return 0;
        }
    }

    // The host waits for `stream`'s work, then the block goes into the pool (the slow road where
    // no host memory or no event is at hand).
    void wait_then_pool(stream_ref stream, const detail::free_block& block) noexcept {
        try {
            wait_for(stream);
        } catch (...) {
            try {
                wait_for_device();
            } catch (...) {
                POOLKIT_ASSERT(false, "stream_ordered could not order a free");
            }
        }
        into_pool(block);
    }

    // The host waits for the work issued on `stream` so far. May throw (from the event calls).
    void wait_for(stream_ref stream) {
        const event_type event = events_.record(stream);
        try {
            events_.synchronize(event);
        } catch (...) {
            events_.recycle(event);
            throw;
        }
        events_.recycle(event);
    }

    // Covers `r`'s front (and the pool, if `r` is its home) during a call on `stream`, `r`'s
    // stream: where all its work is done (fronts' idle_first), the front goes into the pool with
    // no event; else behind one event recorded on it. Where no event can be recorded, the front
    // stays open.
    [[gnu::noinline]] void cover(record_type& r, stream_ref stream) noexcept {
        const bool home = tag_.home() == &r && tag_.uncovered();
        if (!home && r.front.empty()) {
            r.wanted = false;
            return;
        }
        if (fronts_.idle_first(r, stream)) {
            if (home) {  // the home's frees are done, and its covers (events on its stream)
                tag_.clear();
                uncovered_misses_ = 0;
            }
            r.wanted = false;
            front_into_pool(r);
            return;
        }
        if (home) {
            try {
                tag_.cover(stream);
                uncovered_misses_ = 0;
            } catch (...) {  // taken after a wait for the whole device
            }
        }
        fronts_.cover(r, stream);
    }

    // A block into the pool: its frees are done, or its stream is the pool's home. A block passed
    // through goes back to the upstream (the home's never comes here: free_on).
    void into_pool(const detail::free_block& block) noexcept {
        if (!passed_.give_back(upstream_, block)) pool_.deallocate(block.pointer, block.bytes, block.alignment);
    }

    // Whether `pointer` is a block the pool or the upstream (passed through) handed out.
    [[nodiscard]] bool handed_by_us(const void* pointer) const noexcept
        requires has_owns<pool_type>
    {
        return pool_.owns(pointer) || passed_.holds(pointer) || (door_.graphs() != nullptr && door_.graphs()->owns(pointer));
    }

    void front_into_pool(record_type& r) noexcept {
        fronts_.empty_into(r, [&](const detail::free_block& b) { into_pool(b); });
    }

    // The waiting blocks whose events are done go into the pool. Returns how many.
    std::size_t drain() noexcept {
        if (waiting_.empty()) return 0;
        return waiting_.drain(drain_patience, [&](const detail::free_block& b) { into_pool(b); });
    }

    // The host waits for the whole device: every front and waiting block goes into the pool, and
    // the pool is ready for every stream.
    void settle() {
        wait_for_device();
        uncovered_misses_ = 0;
        waiting_.give_all([&](const detail::free_block& b) { into_pool(b); });
        records_.for_each([&](record_type& r) { front_into_pool(r); });
        tag_.clear();
    }

    // The host waits for everything (no more than it must: the device only where a stream that
    // may be gone holds frees; lasting streams' due fronts are covered first); every free block is
    // then in the pool.
    void settle_everything() {
        if (!due_.empty()) cover_due();
        waiting_.wait_all([&](const detail::free_block& b) { into_pool(b); });
        if (fronts_.open().empty() && !tag_.uncovered()) {
            tag_.wait_for_all(nullptr);
            return;
        }
        wait_for_device();
        records_.for_each([&](record_type& r) { front_into_pool(r); });
        tag_.clear();
    }

    // The gate (detail/gated_upstream.hpp): memory is about to leave the pool. Only the home's
    // frees may be in it unfinished: the host waits for them — for an event recorded now when this
    // call is on the home's stream, for the cover, or for the whole device. Touches no pool.
    void secure() noexcept {
        if (secure_by_events()) return;
        try {
            wait_for_device();
            tag_.clear();
        } catch (...) {
            POOLKIT_ASSERT(false, "stream_ordered could not wait before memory left its pool");
        }
    }

    // The host waits for the whole device. No capture allows that (cudaDeviceSynchronize fails
    // while one runs, in every mode): once it returned, none of the captures noted runs any more.
    void wait_for_device() {
        events_.synchronize_all();
        if (door_.graphs() != nullptr) door_.graphs()->none_running();
    }

    // secure() without the wait for the whole device, which a running capture forbids: false
    // where only that would do.
    bool secure_by_events() noexcept {
        if (closing_ || tag_.clean()) return true;
        try {
            const bool on_home = call_stream_ != nullptr && tag_.home() != nullptr && key_of(*call_stream_) == tag_.home()->key;
            return tag_.wait_for_all(on_home ? call_stream_ : nullptr);
        } catch (...) {
            return false;
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

    // A free of a block with record_use streams (false: `pointer` has none). It waits behind an
    // event on each of them and on the freeing stream `stream` (nullptr: a plain deallocate).
    [[gnu::noinline]] bool free_used(void* pointer, std::size_t bytes, std::size_t alignment, const stream_ref* stream) noexcept {
        std::vector<detail::stream_use> streams = uses_.take(pointer);
        if (streams.empty()) return false;
        --live_count_;
        const detail::free_block block{pointer, bytes, alignment};
        std::vector<event_type> events;
        try {
            if (stream != nullptr) streams.push_back({*stream, thread_of(*stream)});
            // A per-thread stream of another thread cannot take an event from here: the device waits.
            if (std::erase_if(streams, [](const detail::stream_use& u) {
                    return u.thread != std::thread::id{} && u.thread != std::this_thread::get_id();
                }) > 0) {
                wait_for_device();
            }
            // A use on a stream in capture is the graph's: the block stays with its graph pool.
            for (const detail::stream_use& user : streams) {
                if (const std::uint64_t capture = door_.capture_of(user.stream); capture != 0) {
                    graphs().adopt(capture, block);
                    return true;
                }
            }
            if (passed_.holds(pointer)) {  // back to the upstream only once every use is done (see free_on)
                for (const detail::stream_use& user : streams) wait_for(user.stream);
            } else if (!streams.empty()) {
                events.reserve(streams.size());
                for (const detail::stream_use& user : streams) events.push_back(events_.record(user.stream));
                waiting_.add(std::span(&block, 1), events);
                return true;
            }
        } catch (...) {  // no host memory or no event: the device waits, rather than lose order
            for (const event_type& event : events) events_.recycle(event);
            try {
                wait_for_device();
            } catch (...) {
                POOLKIT_ASSERT(false, "stream_ordered could not order a free used on other streams");
            }
        }
        into_pool(block);
        return true;
    }

    memory_figures figures(std::size_t bytes, std::size_t alignment) const {
        if constexpr (requires(const pool_type& p) {
                          p.reserved_bytes();
                          p.live_bytes();
                      }) {
            const std::size_t live = pool_.live_bytes();
            return memory_figures::held(bytes, alignment, live - std::min(live, pending_bytes()), pool_.reserved_bytes());
        } else {
            return memory_figures::request(bytes, alignment);
        }
    }

    upstream_type upstream_;
    Events events_;
    gate gate_{*this};
    pool_options options_;  // the Pool's (set by make_pool), for graph pools
    pool_type pool_;  // built over a gated reference to upstream_ (make_pool)
    detail::stream_table<record_type> records_;
    detail::pool_tag<Events, record_type> tag_{events_};
    detail::waiting_blocks<Events> waiting_{events_};
    detail::fronts<Events, record_type> fronts_{events_, waiting_};
    detail::block_uses uses_;  // record_use streams, rarely any
    detail::passed_through<upstream_type> passed_;
    detail::capture_door<Events, graphs_type> door_{events_};  // captures, graph pools, what is held meanwhile
    detail::due_fronts<record_type> due_;  // lasting streams' fronts to cover before the pool serves (cover_soon)
    std::size_t uncovered_misses_ = 0;  // misses passed through since the home last covered
    std::size_t live_count_ = 0;
    std::size_t trim_at_ = min_trim_records;
    std::uint64_t clock_ = 0;  // stream calls so far (front ages, record trims)
    std::uint64_t trimmed_at_ = 0;  // the clock at the last trim of records
    std::uint64_t polls_ = 0;  // hits since the start, for poll_interval
    bool plain_allocations_ = false;
    detail::sole_stream<record_type> sole_;  // the stream of the last calls; when it may become the home again
    bool internal_dependencies_ = true;
    const stream_ref* call_stream_ = nullptr;  // the stream of the call in progress (call_on)
    bool closing_ = false;  // destroyed: everything was waited for
};

static_assert(stream_resource_with<
              stream_ordered<detail::resource_archetype<host_accessible>, lanes<detail::cached_pool_archetype>, completed_events>,
              host_accessible>);
static_assert(has_release<stream_ordered<detail::resource_archetype<>, lanes<detail::cached_pool_archetype>, completed_events>> &&
              has_check_invariants<stream_ordered<detail::resource_archetype<>, lanes<detail::cached_pool_archetype>, completed_events>> &&
              has_owns<stream_ordered<detail::resource_archetype<>, lanes<detail::cached_pool_archetype>, completed_events>> &&
              walkable<stream_ordered<detail::resource_archetype<>, lanes<detail::cached_pool_archetype>, completed_events>>);

}  // namespace poolkit
