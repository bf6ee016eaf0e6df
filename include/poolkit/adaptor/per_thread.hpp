// per_thread<Upstream, Events>: a cache of free blocks in front of a shared pool for each host
// thread, so that threads which allocate and free often stop meeting at the shared pool's lock.
//
// Upstream is a thread-safe resource (synchronized_caching_device_resource, say; any
// synchronized<> stack). Requests up to options.max_size at alignments up to default_alignment
// are rounded up to a size class (four per doubling from 256 B: at most 25% more than asked)
// and served from the calling thread's cache; a miss takes a block of the class from Upstream.
// A free goes to the freeing thread's cache (blocks move freely between threads), and a cache
// past options.max_cached_bytes gives its blocks back until it holds half of that. Other
// requests pass straight to Upstream.
// Stream semantics: a thread keeps one set of bins per stream it uses (at most
// options.streams_per_thread; plain allocate/deallocate have a set of their own), keyed by the
// stream's identity (Events::identity: cudaStreamGetId for created streams), so a block freed on
// a stream is reused only on that stream, behind the work the free followed: no event. A block
// given back to Upstream from the current stream's set goes with deallocate_async on that stream,
// which the call names and so is alive. Blocks of a set whose stream may be gone (a set evicted
// for a new stream, the sets of an exiting thread, release(), exhaustion) go back only after
// Events::synchronize_all() (the whole device), with plain deallocate. So per_thread suits
// threads that keep their streams (a stream per worker, cudaStreamPerThread); a thread that makes
// a stream per request waits for the device each time a set is evicted.
// A block given to record_use (used on other streams too) is not cached at its free: it goes to
// Upstream, which orders its reuse after those streams.
// Thread safety: every entry point may be called from any thread. The hot path (a hit, or a free
// that does not overflow) takes no lock and writes only the calling thread's cache; it reads two
// shared words that change only at release() and record_use(). A thread's first call makes its
// cache (under a mutex); its exit gives the cache back. release() gives back the calling thread's
// cache and makes every other thread give back its own at its next call.
// Lifetime: a call after the calling thread's caches are destroyed (from a thread_local destroyed
// after them, or from a static object destroyed at exit(), which destroys the main thread's
// thread_locals first) skips the caches: a free goes straight to Upstream (deallocate_async on the
// stream it names, else deallocate), an allocation takes a block of its size class from Upstream.
// The per_thread itself must outlive every call, as any object: destroying it while another
// thread still calls it is undefined, and a global container of its blocks is declared after it.
// Statistics are exact: live_bytes() and cached_bytes() sum per-thread counters that only their
// thread writes. Upstream sees blocks in thread caches as live.
// CUDA graphs: a call on a stream in capture bypasses the caches: the upstream serves it from a
// graph pool, and the block goes back there at its free, in the capture or after it (marked at its
// allocation; a filter keeps other frees lock-free). The upstream must see captures (a
// stream_ordered over cuda_events) and check them at least as often as options.captures says.
// Where a set's blocks would go back after a wait for the whole device (a set evicted, release(),
// exhaustion, a thread's exit) while a capture the upstream served may run, which that wait would
// break, they are set aside instead (cached_bytes() counts them) and go back at the first miss,
// release() or destruction that finds no capture running.
// Complexity: a hit or a free is O(1) plus Events::identity (cuStreamGetId for a created stream,
// nothing for the special handles) and, where Events see captures, the capture check
// (cuStreamIsCapturing): tens of nanoseconds each (docs/costs.md); a miss is Upstream's allocate.
// Alignment: up to default_alignment from the caches; larger as Upstream gives it.
// Exhaustion: when Upstream throws out_of_memory on a miss, the calling thread gives back its
// cache, every other thread is told to give back its own, and the request is tried once more.
// Parts that know nothing of Upstream or Events (size classes, the thread registry, counters, the
// marked graph blocks): detail/per_thread_parts.hpp.
#pragma once

#include <poolkit/adaptor/detail/per_thread_parts.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/captures.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace poolkit {

struct per_thread_options {
    // Requests above this many bytes (rounded up to a size class) pass straight to the upstream.
    std::size_t max_size = std::size_t{4} << 20;
    // Bytes of free blocks one thread's cache may hold (over all its streams) before it gives
    // half of them back.
    std::size_t max_cached_bytes = std::size_t{32} << 20;
    // Free blocks one size class of one stream may hold.
    std::size_t max_blocks_per_class = 64;
    // Streams a thread keeps bins for; one more evicts the least recently used (after waiting for
    // the device).
    std::size_t streams_per_thread = 4;
    // When a stream call asks whether its stream is in capture (CUDA graphs), where Events can
    // say (core/captures.hpp): every call by default; announced or never save that driver call,
    // which stops scaling past a few threads (docs/threads.md).
    capture_check captures = capture_check::every_call;
};

template <resource Upstream, events_policy Events = default_events>
class per_thread : public forwarding<per_thread<Upstream, Events>, Upstream> {
    friend forwarding<per_thread, Upstream>;

public:
    using upstream_type = Upstream;
    using options_type = per_thread_options;

    per_thread()
        requires std::default_initializable<Upstream>
    {
        setup();
    }
    explicit per_thread(Upstream upstream, per_thread_options options = {}, Events events = {})
        : upstream_(std::move(upstream)), options_(options), events_(std::move(events)) {
        setup();
    }
    // In place (docs/concepts.md): the upstream built from its own constructor arguments (a
    // synchronized<> cannot move), after this adaptor's options and events where they are given.
    template <class... Arguments>
        requires constructible_in_place<Upstream, Arguments...>
    explicit per_thread(std::in_place_t, Arguments&&... arguments)
        : upstream_(build_from<Upstream>(std::forward<Arguments>(arguments)...)) {
        setup();
    }
    template <class... Arguments>
        requires constructible_in_place<Upstream, Arguments...>
    per_thread(std::in_place_t, per_thread_options options, Arguments&&... arguments)
        : upstream_(build_from<Upstream>(std::forward<Arguments>(arguments)...)), options_(options) {
        setup();
    }
    template <class... Arguments>
        requires constructible_in_place<Upstream, Arguments...>
    per_thread(std::in_place_t, per_thread_options options, Events events, Arguments&&... arguments)
        : upstream_(build_from<Upstream>(std::forward<Arguments>(arguments)...)), options_(options), events_(std::move(events)) {
        setup();
    }

    per_thread(const per_thread&) = delete;
    per_thread& operator=(const per_thread&) = delete;

    // Every thread's cache goes back to the upstream (after waiting for the device, since their
    // streams may be gone); threads that still hold a cache of this object drop it at exit.
    ~per_thread() {
        std::lock_guard lock(core_->mutex);
        bool waited = false;
        for (thread_cache* cache : core_->caches) {
            give_back_all(*cache, waited);
            cache->orphan();
        }
        core_->caches.clear();
        core_->owner = nullptr;
        give_back_deferred(true);
    }

    // The calling thread's cache goes back to the upstream, the other threads' at their next
    // call; then the upstream releases what it can.
    void release()
        requires has_release<Upstream>
    {
        release_caches();
        upstream_.release();
    }
    // As release(), for an upstream with nothing to release.
    void release_caches() {
        core_->epoch.fetch_add(1, std::memory_order_relaxed);
        if (thread_cache* cache = find_cache()) {
            bool waited = false;
            give_back_all(*cache, waited);
            cache->epoch = core_->epoch.load(std::memory_order_relaxed);
        }
        give_back_deferred(false);
    }

    // `pointer` (live) is used on `stream` too (PyTorch's record_stream): the upstream orders its
    // reuse after that work, so its free passes straight to the upstream instead of a cache.
    void record_use(void* pointer, stream_ref stream)
        requires has_record_use<Upstream>
    {
        {
            std::lock_guard lock(core_->mutex);
            auto& used = core_->used_elsewhere;
            if (std::find(used.begin(), used.end(), pointer) == used.end()) used.push_back(pointer);
            core_->used_count.store(used.size(), std::memory_order_relaxed);
        }
        upstream_.record_use(pointer, stream);
    }

    // Bytes handed out through this front and not yet freed (size classes, as handed out).
    [[nodiscard]] std::size_t live_bytes() const { return static_cast<std::size_t>(sum(&thread_cache::live, &core::retired_live)); }
    // Bytes of free blocks in every thread's cache.
    [[nodiscard]] std::size_t cached_bytes() const {
        return static_cast<std::size_t>(sum(&thread_cache::cached)) + core_->deferred_bytes.load(std::memory_order_relaxed);
    }
    // Requests served from a thread's cache, and requests it had to take from the upstream.
    [[nodiscard]] std::size_t hits() const { return static_cast<std::size_t>(sum(&thread_cache::hit_count, &core::retired_hits)); }
    [[nodiscard]] std::size_t misses() const { return static_cast<std::size_t>(sum(&thread_cache::miss_count, &core::retired_misses)); }
    // Threads that hold a cache of this object now.
    [[nodiscard]] std::size_t thread_caches() const {
        std::lock_guard lock(core_->mutex);
        return core_->caches.size();
    }

    // The calling thread's cache: each free block in a bin of its size class, the byte count
    // right; then the upstream's invariants.
    void check_invariants() const {
        if (const thread_cache* cache = find_cache()) cache->check();
        if constexpr (has_check_invariants<Upstream>) upstream_.check_invariants();
    }

    [[nodiscard]] const per_thread_options& options() const noexcept { return options_; }
    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const per_thread& a, const per_thread& b) noexcept { return &a == &b; }

private:
    static constexpr std::size_t no_class = std::numeric_limits<std::size_t>::max();
    static constexpr std::uint64_t plain_identity = std::numeric_limits<std::uint64_t>::max();

    // One stream's free blocks, by size class.
    struct stream_set {
        stream_ref stream = default_stream;
        std::uint64_t identity = plain_identity;
        std::uint64_t last_use = 0;
        std::size_t bytes = 0;
        std::size_t per_class = 0;  // max_blocks_per_class
        std::vector<void*> blocks;  // per_class slots for each size class, in class order
        std::vector<std::size_t> counts;
        void*& slot(std::size_t index, std::size_t i) noexcept { return blocks[index * per_class + i]; }
    };

    struct core;

    class thread_cache final : public detail::per_thread_parts::cache_base {
    public:
        thread_cache(std::uint64_t owner_id, std::shared_ptr<core> shared) : cache_base(owner_id), core_(std::move(shared)) {}

        void thread_exit() noexcept override {
            std::lock_guard lock(core_->mutex);
            if (core_->owner == nullptr) return;  // the per_thread is gone; so are its blocks
            bool waited = false;
            core_->owner->give_back_all(*this, waited);
            core_->retired_live += live.get();
            core_->retired_hits += hit_count.get();
            core_->retired_misses += miss_count.get();
            auto& list = core_->caches;
            list.erase(std::remove(list.begin(), list.end(), this), list.end());
        }
        [[nodiscard]] bool orphaned() const noexcept override { return dead.load(std::memory_order_acquire); }
        void orphan() noexcept { dead.store(true, std::memory_order_release); }

        void check() const {
            std::size_t total = 0;
            for (const auto& set : sets) {
                std::size_t in_set = 0;
                for (std::size_t c = 0; c < set->counts.size(); ++c) in_set += set->counts[c] * detail::per_thread_parts::class_size(c);
                POOLKIT_VERIFY(in_set == set->bytes, "a stream's cached byte count drifted");
                total += in_set;
            }
            POOLKIT_VERIFY(static_cast<std::int64_t>(total) == cached.get(), "a thread's cached byte count drifted");
        }

        std::shared_ptr<core> core_;
        std::vector<std::unique_ptr<stream_set>> sets;
        stream_set* current = nullptr;  // the last call's set
        std::uint64_t clock = 0;
        std::uint64_t epoch = 0;  // the release epoch this cache has caught up with
        detail::per_thread_parts::owned_counter live, cached, hit_count, miss_count;
        std::atomic<bool> dead{false};
    };

    // What a per_thread shares with its threads' caches, which may outlive it.
    struct core {
        std::mutex mutex;
        per_thread* owner = nullptr;
        std::vector<thread_cache*> caches;  // guarded by mutex
        // Of exited threads, and of calls made after their thread's caches were gone; guarded by mutex.
        std::int64_t retired_live = 0, retired_hits = 0, retired_misses = 0;
        std::vector<void*> used_elsewhere;  // live blocks given to record_use; guarded by mutex
        std::atomic<std::size_t> used_count{0};
        detail::per_thread_parts::marked_blocks graph_blocks;  // live blocks of graph pools
        std::atomic<std::uint64_t> epoch{0};
        // Blocks set aside while a capture may run: they go back after a wait for the device.
        std::mutex deferred_mutex;
        std::vector<std::pair<void*, std::size_t>> deferred;  // guarded by deferred_mutex
        std::atomic<std::size_t> deferred_bytes{0};
    };

    // What every constructor does last: the core's owner, and the options made consistent.
    void setup() {
        core_->owner = this;
        if (options_.max_size < detail::per_thread_parts::smallest_class) options_.max_size = 0;
        classes_ = options_.max_size == 0 ? 0 : detail::per_thread_parts::class_of(options_.max_size) + 1;
        options_.max_size = classes_ == 0 ? 0 : detail::per_thread_parts::class_size(classes_ - 1);
        options_.max_blocks_per_class = std::max<std::size_t>(options_.max_blocks_per_class, 1);
        options_.streams_per_thread = std::max<std::size_t>(options_.streams_per_thread, 1);
    }

    // The size class of a request, or no_class where it passes straight to the upstream.
    [[nodiscard]] std::size_t class_for(std::size_t bytes, std::size_t alignment) const noexcept {
        if (bytes == 0 || bytes > options_.max_size || alignment > default_alignment) return no_class;
        return detail::per_thread_parts::class_of(bytes);
    }

    // The calling thread's cache of this object; nullptr where it has none (or no more).
    [[nodiscard]] thread_cache* find_cache() const noexcept {
        auto* mine = detail::per_thread_parts::this_thread();
        if (mine == nullptr) return nullptr;  // its thread_local teardown has run
        if (mine->last != nullptr && mine->last->owner == id_)
            return static_cast<thread_cache*>(const_cast<detail::per_thread_parts::cache_base*>(mine->last));
        for (auto& cache : mine->caches) {
            if (cache->owner == id_) {
                mine->last = cache.get();
                return static_cast<thread_cache*>(cache.get());
            }
        }
        return nullptr;
    }

    // The calling thread's cache, made on its first call (and caches of dead objects dropped);
    // nullptr once the thread's caches are gone (a call from a thread_local or static object
    // destroyed after them), when the call skips the caches.
    thread_cache* cache() {
        if (thread_cache* found = find_cache()) return found;
        auto* mine = detail::per_thread_parts::this_thread();
        if (mine == nullptr) return nullptr;
        mine->last = nullptr;  // it may be one of the caches dropped below, and a step below may throw
        std::erase_if(mine->caches, [](const auto& c) { return c->orphaned(); });
        mine->caches.reserve(mine->caches.size() + 1);
        auto made = std::make_unique<thread_cache>(id_, core_);
        {
            std::lock_guard lock(core_->mutex);
            core_->caches.push_back(made.get());
        }
        made->epoch = core_->epoch.load(std::memory_order_relaxed);
        mine->caches.push_back(std::move(made));
        mine->last = mine->caches.back().get();
        return static_cast<thread_cache*>(mine->caches.back().get());
    }

    // The set of `stream` (of the plain calls where !on_stream), by identity; made where missing,
    // evicting the least recently used set past streams_per_thread. nullptr: none could be made.
    stream_set* set_for(thread_cache& c, bool on_stream, stream_ref stream) {
        const std::uint64_t identity = on_stream ? static_cast<std::uint64_t>(events_.identity(stream)) : plain_identity;
        if (c.current != nullptr && c.current->identity == identity) return touch(c, *c.current, stream);
        for (auto& set : c.sets) {
            if (set->identity == identity) return touch(c, *(c.current = set.get()), stream);
        }
        if (c.sets.size() >= options_.streams_per_thread) {
            auto oldest =
                std::min_element(c.sets.begin(), c.sets.end(), [](const auto& a, const auto& b) { return a->last_use < b->last_use; });
            bool waited = false;
            give_back_set(c, **oldest, waited);
            if (c.current == oldest->get()) c.current = nullptr;
            c.sets.erase(oldest);
        }
        auto made = std::make_unique<stream_set>();
        made->stream = stream;
        made->identity = identity;
        made->per_class = options_.max_blocks_per_class;
        made->blocks.resize(classes_ * made->per_class);
        made->counts.assign(classes_, 0);
        c.sets.reserve(c.sets.size() + 1);
        c.sets.push_back(std::move(made));
        return touch(c, *(c.current = c.sets.back().get()), stream);
    }
    static stream_set* touch(thread_cache& c, stream_set& set, stream_ref stream) noexcept {
        set.last_use = ++c.clock;
        set.stream = stream;  // the handle this call named (alive now)
        return &set;
    }

    // A free's set: the one whose handle the call names (cheap), else by identity. nullptr: none.
    stream_set* free_set(thread_cache& c, bool on_stream, stream_ref stream) noexcept {
        if (c.current != nullptr &&
            (on_stream ? (c.current->identity != plain_identity && c.current->stream == stream) : c.current->identity == plain_identity)) {
            return c.current;
        }
        for (auto& set : c.sets) {
            if (on_stream ? (set->identity != plain_identity && set->stream == stream) : set->identity == plain_identity) return set.get();
        }
        try {
            return set_for(c, on_stream, stream);
        } catch (...) {
            return nullptr;
        }
    }

    // Catches up with release(): a release since this cache's last call gives its blocks back.
    void catch_up(thread_cache& c) {
        const std::uint64_t now = core_->epoch.load(std::memory_order_relaxed);
        if (c.epoch == now) return;
        bool waited = false;
        give_back_all(c, waited);
        c.epoch = now;
    }

    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        validate_alignment(request.alignment);
        const std::size_t index = class_for(request.bytes, request.alignment);
        thread_cache* const mine = cache();
        if (index == no_class) {
            void* pointer = std::forward<Call>(call)();
            if (pointer != nullptr) count(mine, static_cast<std::int64_t>(request.bytes));
            return pointer;
        }
        const std::size_t size = detail::per_thread_parts::class_size(index);
        const bool on_stream = request.kind == allocation_kind::allocate_async;
        if (on_stream && in_capture(request.stream)) [[unlikely]]
            return take_for_graph(mine, request, size);
        if (mine == nullptr) {  // the thread's caches are gone: a block of the class from the upstream
            void* pointer = take_from_upstream(nullptr, request, size);
            if (pointer != nullptr) count(nullptr, static_cast<std::int64_t>(size), 1);
            return pointer;
        }
        thread_cache& c = *mine;
        catch_up(c);
        stream_set& set = *set_for(c, on_stream, request.stream);
        if (set.counts[index] > 0) {
            void* pointer = set.slot(index, --set.counts[index]);
            set.bytes -= size;
            c.cached.add(-static_cast<std::int64_t>(size));
            c.live.add(static_cast<std::int64_t>(size));
            c.hit_count.add(1);
            return pointer;
        }
        c.miss_count.add(1);
        if (core_->deferred_bytes.load(std::memory_order_relaxed) != 0) [[unlikely]]
            give_back_deferred(false);
        void* pointer = take_from_upstream(&c, request, size);
        if (pointer != nullptr) c.live.add(static_cast<std::int64_t>(size));
        return pointer;
    }

    // A block of the class from the upstream, as the request asked (nullptr from the try_ forms);
    // on exhaustion every cache (the calling thread's `c` at once, where it has one) gives back
    // and the upstream is asked once more.
    void* take_from_upstream(thread_cache* c, const allocation_request& request, std::size_t size) {
        const auto ask = [&]() -> void* {
            switch (request.kind) {
                case allocation_kind::allocate_async:
                    if constexpr (stream_resource<Upstream>)
                        return upstream_.allocate_async(size, default_alignment, request.stream);
                    else
                        return nullptr;
                case allocation_kind::try_allocate:
                    if constexpr (has_try_allocate<Upstream>)
                        return upstream_.try_allocate(size, default_alignment);
                    else
                        return nullptr;
                case allocation_kind::try_allocate_cached:
                    if constexpr (has_try_allocate_cached<Upstream>)
                        return upstream_.try_allocate_cached(size, default_alignment);
                    else
                        return nullptr;
                case allocation_kind::allocate:
                    break;
            }
            return upstream_.allocate(size, default_alignment);
        };
        try {
            if (void* pointer = ask()) return pointer;
            if (request.kind == allocation_kind::try_allocate_cached) return nullptr;  // it never grows
        } catch (const std::bad_alloc&) {
            if (request.may_fail_quietly()) return nullptr;
        }
        core_->epoch.fetch_add(1, std::memory_order_relaxed);
        if (c != nullptr) {
            bool waited = false;
            give_back_all(*c, waited);
            c->epoch = core_->epoch.load(std::memory_order_relaxed);
        }
        void* pointer = ask();
        return pointer;
    }

    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        const std::size_t index = class_for(request.bytes, request.alignment);
        if (index == no_class) {
            std::forward<Call>(call)();
            count(cache_or_null(), -static_cast<std::int64_t>(request.bytes));
            return;
        }
        const std::size_t size = detail::per_thread_parts::class_size(index);
        const bool passes_back =
            forget_use(request.pointer) || core_->graph_blocks.take(request.pointer) || (request.on_stream && in_capture(request.stream));
        thread_cache* c = cache_or_null();
        stream_set* set = c != nullptr && !passes_back ? free_set(*c, request.on_stream, request.stream) : nullptr;
        if (set == nullptr) {  // used on other streams, no cache (gone, or no memory): straight back
            hand_back(request, request.pointer, size);
            count(c, -static_cast<std::int64_t>(size));
            return;
        }
        c->live.add(-static_cast<std::int64_t>(size));
        if (set->counts[index] == options_.max_blocks_per_class) {
            hand_back(request, request.pointer, size);
            return;
        }
        set->slot(index, set->counts[index]++) = request.pointer;
        set->bytes += size;
        c->cached.add(static_cast<std::int64_t>(size));
        if (static_cast<std::size_t>(c->cached.get()) > options_.max_cached_bytes) shrink(*c, *set, request);
    }

    // CUDA graphs: a stream in capture never meets the caches, whose blocks serve eager work (and
    // asking it for its identity would break the capture). Its requests take blocks of their class
    // from the upstream, which serves them from a graph pool, and are marked (graph_blocks), so that
    // their frees, in capture or not, go back there too; a free in capture goes to the upstream
    // (the graph may use the block). One driver call per stream call (cuStreamIsCapturing).
    bool in_capture(stream_ref stream) noexcept {
        if constexpr (capture_events<Events> && stream_resource<Upstream>) {
            if (!asks_about_captures(options_.captures)) return false;
            try {
                return static_cast<std::uint64_t>(events_.capture_of(stream)) != 0;
            } catch (...) {  // the driver could not say: as if in capture (the upstream decides)
                return true;
            }
        } else {
            static_cast<void>(stream);
            return false;
        }
    }
    void* take_for_graph(thread_cache* c, const allocation_request& request, std::size_t size) {
        if constexpr (stream_resource<Upstream>) {
            void* pointer = upstream_.allocate_async(size, default_alignment, request.stream);
            try {
                core_->graph_blocks.add(pointer);
            } catch (...) {
                upstream_.deallocate_async(pointer, size, default_alignment, request.stream);
                throw;
            }
            count(c, static_cast<std::int64_t>(size), 1);
            return pointer;
        } else {
            static_cast<void>(c), static_cast<void>(request), static_cast<void>(size);
            return nullptr;
        }
    }

    // Whether `pointer` was given to record_use (and now is not any more).
    bool forget_use(void* pointer) noexcept {
        if (core_->used_count.load(std::memory_order_relaxed) == 0) return false;
        std::lock_guard lock(core_->mutex);
        auto& used = core_->used_elsewhere;
        const auto found = std::find(used.begin(), used.end(), pointer);
        if (found == used.end()) return false;
        *found = used.back();
        used.pop_back();
        core_->used_count.store(used.size(), std::memory_order_relaxed);
        return true;
    }

    thread_cache* cache_or_null() noexcept {
        try {
            return cache();
        } catch (...) {
            return nullptr;
        }
    }

    // Counts live bytes (negative at a free) and misses on the calling thread's cache `c`, or, where
    // the thread has none, on the core.
    void count(thread_cache* c, std::int64_t live, std::int64_t misses = 0) noexcept {
        if (c != nullptr) {
            c->live.add(live);
            if (misses != 0) c->miss_count.add(misses);
            return;
        }
        std::lock_guard lock(core_->mutex);
        core_->retired_live += live;
        core_->retired_misses += misses;
    }

    // A block straight back to the upstream, on the stream the free named.
    void hand_back(const deallocation_request& request, void* pointer, std::size_t size) noexcept {
        if (request.on_stream) {
            if constexpr (stream_resource<Upstream>) upstream_.deallocate_async(pointer, size, default_alignment, request.stream);
        } else {
            upstream_.deallocate(pointer, size, default_alignment);
        }
    }

    // The cache holds too much: the freeing stream's set gives back from its largest classes (on
    // that stream, alive in this call) until the cache holds half its bound; then the other sets.
    void shrink(thread_cache& c, stream_set& set, const deallocation_request& request) noexcept {
        const auto target = static_cast<std::int64_t>(options_.max_cached_bytes / 2);
        const bool same_stream = request.on_stream ? identity_or_plain(request.stream) == set.identity : set.identity == plain_identity;
        for (std::size_t index = classes_; index-- > 0 && c.cached.get() > target;) {
            const std::size_t size = detail::per_thread_parts::class_size(index);
            while (set.counts[index] > 0 && c.cached.get() > target) {
                void* pointer = set.slot(index, --set.counts[index]);
                set.bytes -= size;
                c.cached.add(-static_cast<std::int64_t>(size));
                if (same_stream) {
                    hand_back(request, pointer, size);
                } else {  // the set is a dead stream's that this stream's handle found
                    bool waited = false;
                    give_back_after_device(pointer, size, waited);
                }
            }
        }
        bool waited = false;
        for (auto& other : c.sets) {
            if (c.cached.get() <= target) break;
            if (other.get() != &set) give_back_set(c, *other, waited);
        }
    }

    // The stream's identity; plain_identity, which no stream's set has, where the events model
    // cannot say (the caller then treats the stream as another one: it waits for the device).
    std::uint64_t identity_or_plain(stream_ref stream) noexcept {
        try {
            return static_cast<std::uint64_t>(events_.identity(stream));
        } catch (...) {
            return plain_identity;
        }
    }

    // Every block of `set` back to the upstream with plain deallocate, after waiting for the
    // device (once per `waited`): its stream may be gone.
    void give_back_set(thread_cache& c, stream_set& set, bool& waited) noexcept {
        if (set.bytes == 0) return;
        const bool plain = set.identity == plain_identity;
        for (std::size_t index = 0; index < classes_; ++index) {
            const std::size_t size = detail::per_thread_parts::class_size(index);
            for (std::size_t i = 0; i < set.counts[index]; ++i) {
                if (plain) {
                    upstream_.deallocate(set.slot(index, i), size, default_alignment);
                } else {
                    give_back_after_device(set.slot(index, i), size, waited);
                }
            }
            set.counts[index] = 0;
        }
        c.cached.add(-static_cast<std::int64_t>(set.bytes));
        set.bytes = 0;
    }
    void give_back_all(thread_cache& c, bool& waited) noexcept {
        for (auto& set : c.sets) give_back_set(c, *set, waited);
    }
    void wait_for_device(bool& waited) noexcept {
        if (waited) return;
        try {
            events_.synchronize_all();
        } catch (...) {
            POOLKIT_ASSERT(false, "per_thread could not wait for the device before giving blocks back");
        }
        waited = true;
    }

    // A block whose stream may be gone back to the upstream after a wait for the device (once per
    // `waited`); set aside instead while a capture may run, which that wait would break.
    void give_back_after_device(void* pointer, std::size_t size, bool& waited) noexcept {
        if (!waited && captures_running()) [[unlikely]] {
            try {
                const std::lock_guard lock(core_->deferred_mutex);
                core_->deferred.emplace_back(pointer, size);
                core_->deferred_bytes.fetch_add(size, std::memory_order_relaxed);
                return;
            } catch (...) {  // no host memory to note it: wait now, whatever the capture
            }
        }
        wait_for_device(waited);
        upstream_.deallocate(pointer, size, default_alignment);
    }
    // The blocks set aside go back, once no capture may run (or `now`: the per_thread is destroyed).
    void give_back_deferred(bool now) noexcept {
        if (core_->deferred_bytes.load(std::memory_order_relaxed) == 0 || (!now && captures_running())) return;
        std::vector<std::pair<void*, std::size_t>> blocks;
        {
            const std::lock_guard lock(core_->deferred_mutex);
            blocks.swap(core_->deferred);
            core_->deferred_bytes.store(0, std::memory_order_relaxed);
        }
        bool waited = false;
        for (const auto& [pointer, size] : blocks) {
            wait_for_device(waited);
            upstream_.deallocate(pointer, size, default_alignment);
        }
    }
    // Whether a capture the upstream served may still run (a stream_ordered's captures_running(),
    // under a synchronized<>'s lock): asked only before a wait for the whole device.
    bool captures_running() noexcept {
        auto& upstream = detail::referent<Upstream>::get(upstream_);
        if constexpr (requires { upstream.captures_running(); }) {
            return upstream.captures_running();
        } else if constexpr (requires {
                                 upstream.upstream_resource().captures_running();
                                 upstream.locked([](auto&) {});
                             }) {
            return upstream.locked([](auto& p) { return p.captures_running(); });
        } else {
            return false;
        }
    }

    // Sums a counter over every thread's cache, plus what exited threads left in `retired`.
    std::int64_t sum(detail::per_thread_parts::owned_counter thread_cache::*counter, std::int64_t core::*retired = nullptr) const {
        std::lock_guard lock(core_->mutex);
        std::int64_t total = retired != nullptr ? (*core_).*retired : 0;
        for (const thread_cache* c : core_->caches) total += (c->*counter).get();
        // A block freed on one thread while another's count of it is read: never below zero.
        return std::max<std::int64_t>(total, 0);
    }

    Upstream upstream_;
    per_thread_options options_;
    Events events_;
    std::size_t classes_ = 0;
    const std::uint64_t id_ = detail::per_thread_parts::next_id();
    std::shared_ptr<core> core_ = std::make_shared<core>();
};

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
per_thread(R&) -> per_thread<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
per_thread(R&&) -> per_thread<R>;

}  // namespace poolkit
