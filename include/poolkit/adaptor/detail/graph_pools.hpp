// graph_pools<Events, Lanes, Upstream>: the memory of CUDA graphs — pools private to
// the captures that allocate from them (PyTorch's private pools, made explicit).
//
// Contract:
// - A request on a stream in capture is served by a graph pool: the capture's own (named by the
//   capture's id), or one the owner named for it (share()), so that several graphs share one.
//   Addresses handed out there are baked into the graph: a graph pool's blocks never serve work
//   outside the captures into that pool until release().
// - Within a pool each stream has a Pool of its own: a block goes back to the Pool of the stream
//   that took it, and serves that stream's later requests in stream order, which is the graph's
//   order there. A block freed in a capture into its pool on another stream first gets an event
//   recorded there, in the capture, and waits beside the Pool until the next request of its stream
//   in that capture makes that stream wait on it (an edge of the graph); a request in a later
//   capture takes it with no edge (graphs that share a pool run one after another, as PyTorch
//   requires too). Freed outside any capture, it goes straight back. Freed in a capture into
//   another pool, whose graph may run beside this pool's, it waits for this pool's release.
// - Captured events are never asked about or waited for on the host, and nothing here gives memory
//   back to the upstream (cudaFree) before release(): the Pools' gate holds what they return. The
//   owner grows the Pools inside a relaxed capture mode (Events::unprohibited), as cudaMalloc then
//   may be called.
// - A block of the shared pool freed on a stream in capture is used by the graph: adopt() keeps it
//   with the capture's pool until release(), which hands it back.
// - It keeps which captures may still run: from a call on one of their streams in capture
//   (note_running) until a call on one of them finds it out of capture (running_after) or the
//   owner's host wait for the whole device succeeds (none_running), so that the owner's calls on
//   other streams meanwhile make none a capture forbids.
// - release(pool) follows the host's wait for the graphs' last launch: held memory goes upstream,
//   each Pool returns its wholly free chunks, and a Pool with live blocks stays until they are
//   freed (then it goes too).
// - Where Events can tell when a graph is gone (on_graph_gone: a CUDA user object the graph
//   retains, released once the graph and its executables are destroyed and their launches done),
//   watch() asks to be told for each capture; release_gone() then releases every pool all of
//   whose captures' graphs are gone. The telling may come from any thread (a CUDA thread): it
//   only notes the capture, under a lock of its own, for the owner's next call.
// Complexity: a request finds its Pool in O(pools' streams); a free of a graph block is O(1)
// (pointer_map) plus the Pool's. Not thread-safe.
#pragma once

#include <poolkit/adaptor/detail/front_cache.hpp>
#include <poolkit/adaptor/detail/gated_upstream.hpp>
#include <poolkit/adaptor/detail/pending_walk.hpp>
#include <poolkit/adaptor/detail/pointer_map.hpp>
#include <poolkit/adaptor/detail/stream_table.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/core/walk.hpp>

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

namespace poolkit::detail {

// Lanes: the lane policy (adaptor/lanes.hpp) that makes each Pool over a gated Upstream.
template <class Events, class Lanes, class Upstream>
class graph_pools {
    using pool_type = typename Lanes::template pool_type<gated_upstream<Upstream>>;
    using options_type = typename Lanes::template options_type<gated_upstream<Upstream>>;

public:
    using event_type = typename Events::event_type;

    graph_pools(Events& events, Upstream& upstream, const options_type& options)
        : events_(&events), upstream_(&upstream), options_(options) {}
    graph_pools(const graph_pools&) = delete;
    graph_pools& operator=(const graph_pools&) = delete;
    // The owner waited for everything: all goes back.
    ~graph_pools() {
        for (auto& p : parts_) settle(*p);
    }

    // Capture `capture` allocates from graph pool `pool` (by default its own, `capture`).
    void share(std::uint64_t capture, std::uint64_t pool) {
        for (auto& [c, p] : shared_) {
            if (c == capture) {
                p = pool;
                return;
            }
        }
        shared_.emplace_back(capture, pool);
    }
    [[nodiscard]] std::uint64_t pool_of(std::uint64_t capture) const noexcept {
        for (const auto& [c, p] : shared_) {
            if (c == capture) return p;
        }
        return capture;
    }

    // A block for a request on `stream` (whose key is `key`), in capture `capture`. `grow(call)`
    // runs a call that may reach the upstream (in a relaxed capture mode). May throw (the Pool's
    // exhaustion, no host memory).
    template <class Grow>
    void* allocate(std::uint64_t capture, const stream_key& key, stream_ref stream, std::size_t bytes, std::size_t alignment, Grow&& grow) {
        part& p = part_for(pool_of(capture), key, capture);
        join(p, stream);
        owners_.reserve(owners_.size() + 1);
        void* pointer = grow([&] { return p.blocks->pool.allocate(bytes, alignment); });
        owners_.insert(pointer, &p);  // room was reserved
        ++p.live;
        return pointer;
    }

    // Whether `pointer` is a graph block; if so it is freed on `stream` (key `key`, capture
    // `capture`, 0 outside any). No host memory or no event: the block is held until release.
    bool deallocate(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream, const stream_key& key,
                    std::uint64_t capture) noexcept {
        if (owners_.empty()) return false;
        part** found = owners_.find(pointer);
        if (found == nullptr) return false;
        part& p = **found;
        owners_.erase(pointer);
        --p.live;
        const free_block block{pointer, bytes, alignment};
        if (capture == 0 || (capture == p.capture && key == p.key)) {
            p.blocks->pool.deallocate(pointer, bytes, alignment);
        } else if (pool_of(capture) == p.pool && !p.released) {  // behind an edge from this stream
            try {
                p.joining.reserve(p.joining.size() + 1);
                p.joining.push_back({block, events_->record(stream), capture});
            } catch (...) {  // no room or no event: it waits for the release
                hold(p, block);
            }
        } else {
            hold(p, block);
        }
        if (p.released && p.live == 0) drop(p);
        return true;
    }

    // A block of the shared pool freed on a stream in capture `capture`: the graph uses it.
    void adopt(std::uint64_t capture, const free_block& block) { adopted_.emplace_back(pool_of(capture), block); }

    // The graphs of `pool` will not be launched again and their work is done: held memory goes
    // upstream, adopted blocks to `give_back(block)`, and each Pool of it returns its wholly free
    // chunks (one with live blocks stays until they are freed).
    template <class GiveBack>
    void release(std::uint64_t pool, GiveBack&& give_back) {
        for (auto it = adopted_.begin(); it != adopted_.end();) {
            if (it->first == pool) {
                give_back(it->second);
                it = adopted_.erase(it);
            } else {
                ++it;
            }
        }
        std::erase_if(shared_, [&](const auto& entry) { return entry.second == pool; });
        std::vector<part*> parts;
        for (auto& p : parts_) {
            if (p->pool == pool) parts.push_back(p.get());
        }
        for (part* p : parts) {
            settle(*p);
            p->released = true;
            p->blocks->give_back_held();
            if (p->live == 0) {
                drop(*p);
            } else {
                p->blocks->releasing = true;
                p->blocks->pool.release();
                p->blocks->releasing = false;
            }
        }
    }

    // release() of every pool: the owner waited for everything (its destruction).
    template <class GiveBack>
    void release_all(GiveBack&& give_back) {
        std::vector<std::uint64_t> pools;
        for (const auto& p : parts_) {
            if (!p->released) pools.push_back(p->pool);
        }
        for (const auto& [pool, block] : adopted_) pools.push_back(pool);
        for (const std::uint64_t pool : pools) release(pool, give_back);
    }

    // Capture `capture` may run: a call on its stream `key` was in it.
    void note_running(std::uint64_t capture, const stream_key& key) {
        for (const auto& [c, k] : running_) {
            if (c == capture && k == key) return;
        }
        running_.emplace_back(capture, key);
    }
    // A call on the stream `key` (nullptr: none) found it in no capture: a capture it was in has
    // ended. Returns whether any capture may still run.
    bool running_after(const stream_key* key) noexcept {
        if (key != nullptr) {
            std::uint64_t ended = 0;
            for (const auto& [c, k] : running_) {
                if (k == *key) ended = c;
            }
            if (ended != 0) std::erase_if(running_, [&](const auto& entry) { return entry.first == ended; });
        }
        return !running_.empty();
    }
    [[nodiscard]] bool running() const noexcept { return !running_.empty(); }
    // The host waited for the whole device, which no capture allows: none runs now.
    void none_running() noexcept { running_.clear(); }

    // Asks the Events to tell when the graph of capture `capture` (on `stream`) is gone, once per
    // capture; nothing where they cannot. A capture they will not tell of (one invalidated already)
    // stays watched, so that its pool waits for release(). Where asking fails (no host memory, the
    // driver), no pool is released by release_gone() any more: that capture's graph could share
    // one unseen.
    void watch(std::uint64_t capture, stream_ref stream) noexcept {
        if constexpr (tells_graph_gone) {
            if (watch_failed_ || std::find(watched_.begin(), watched_.end(), capture) != watched_.end()) return;
            try {
                watched_.reserve(watched_.size() + 1);
                static_cast<void>(events_->on_graph_gone(stream, [gone = gone_, capture]() noexcept { gone->note(capture); }));
                watched_.push_back(capture);
            } catch (...) {
                watch_failed_ = true;
            }
        } else {
            static_cast<void>(capture), static_cast<void>(stream);
        }
    }
    // Whether release_gone() has work: a watched graph told gone (any thread may tell), or gone
    // ones kept while other captures ran that have ended.
    [[nodiscard]] bool graphs_gone() const noexcept {
        return gone_->any.load(std::memory_order_acquire) || (!kept_gone_.empty() && running_.empty());
    }
    // Releases every pool whose watched captures' graphs are all gone (their launches are done);
    // pools of other captures, watched or not, stay. While another capture may run nothing goes
    // (a release gives memory upstream): the gone ones are kept for a later call. Returns how many
    // pools were released.
    template <class GiveBack>
    std::size_t release_gone(GiveBack&& give_back) {
        for (const std::uint64_t capture : gone_->take()) {
            kept_gone_.push_back(capture);
            std::erase_if(running_, [&](const auto& entry) { return entry.first == capture; });  // its capture ended
        }
        if (watch_failed_ || !running_.empty()) return 0;
        const std::vector<std::uint64_t> gone = std::exchange(kept_gone_, {});
        std::vector<std::uint64_t> pools;
        for (const std::uint64_t capture : gone) {
            std::erase(watched_, capture);
            pools.push_back(pool_of(capture));
        }
        std::sort(pools.begin(), pools.end());
        pools.erase(std::unique(pools.begin(), pools.end()), pools.end());
        std::size_t released = 0;
        for (const std::uint64_t pool : pools) {
            if (std::any_of(watched_.begin(), watched_.end(), [&](std::uint64_t c) { return pool_of(c) == pool; })) continue;
            release(pool, give_back);
            ++released;
        }
        for (const std::uint64_t capture : gone) std::erase_if(shared_, [&](const auto& entry) { return entry.first == capture; });
        return released;
    }

    [[nodiscard]] bool empty() const noexcept { return parts_.empty() && adopted_.empty(); }

    // Each Pool's own invariants, and the live counts agree with the blocks handed out.
    void check_invariants() const
        requires has_check_invariants<pool_type>
    {
        std::size_t live = 0;
        for (const auto& p : parts_) {
            p->blocks->pool.check_invariants();
            live += p->live;
        }
        POOLKIT_VERIFY(live == owners_.size(), "graph pools lost count of their blocks");
    }
    // Graph pools in use, and the blocks handed out from them.
    [[nodiscard]] std::size_t pools() const noexcept {
        std::vector<std::uint64_t> ids;
        for (const auto& p : parts_) {
            if (std::find(ids.begin(), ids.end(), p->pool) == ids.end()) ids.push_back(p->pool);
        }
        return ids.size();
    }
    [[nodiscard]] std::size_t live_blocks() const noexcept { return owners_.size(); }

    // The walk (walk.hpp) of every graph pool: each Pool's chunks with chunk_view::pool and the
    // stream key's handle set, a block freed into it but not in it yet (joining, held) pending_free;
    // then what the gates hold, a chunk of one free block each.
    template <class Visitor>
        requires walkable<pool_type>
    void for_each_block(Visitor&& visit) const {
        for (const auto& p : parts_) {
            const auto stream = static_cast<std::uintptr_t>(p->key.stream);  // the handle (capture_key_of)
            std::vector<pending_block> pending;
            pending.reserve(p->joining.size() + p->held.size());
            for (const joining_block& j : p->joining) pending.emplace_back(reinterpret_cast<std::uintptr_t>(j.block.pointer), stream);
            for (const free_block& b : p->held) pending.emplace_back(reinterpret_cast<std::uintptr_t>(b.pointer), stream);
            std::sort(pending.begin(), pending.end());
            walk_pending(p->blocks->pool, pending, visit, [&](const chunk_view& chunk) {
                chunk_view in_pool = chunk;
                in_pool.pool = p->pool;
                in_pool.stream = stream;
                return in_pool;
            });
            for (const free_block& b : p->blocks->held) {
                const auto address = reinterpret_cast<std::uintptr_t>(b.pointer);
                visit(chunk_view{address, b.bytes, 0, p->pool}, block_view{address, b.bytes});
            }
        }
    }
    // `visit(pool, block)` for each block of the shared pool a graph pool keeps (adopt()).
    template <class Visit>
    void for_each_adopted(Visit&& visit) const {
        for (const auto& [pool, block] : adopted_) visit(pool, block);
    }
    [[nodiscard]] bool owns(const void* pointer) const noexcept { return !owners_.empty() && owners_.find(pointer) != nullptr; }

private:
    // One Pool, and its gate: what the Pool gives back is held until its pool is released.
    struct holder final : return_gate {
        holder(Upstream& upstream_, const options_type& options)
            : upstream(&upstream_), pool(Lanes::make(gated_upstream<Upstream>(upstream_, *this), options)) {}
        holder(const holder&) = delete;
        holder& operator=(const holder&) = delete;
        ~holder() {
            give_back_held();
            releasing = true;  // the Pool's destructor returns the rest straight upstream
        }
        bool before_return() noexcept override { return releasing; }
        // A graph may use any granule until the release (graph pools over virtual memory are
        // not expandable ones, which unmap as they go: stream_ordered's graph_pool_type).
        bool may_unmap() noexcept override { return releasing; }
        void before_unmap() noexcept override {}
        void hold(void* pointer, std::size_t bytes, std::size_t alignment) noexcept override {
            try {
                held.push_back({pointer, bytes, alignment});
            } catch (...) {  // no room to note it: lost to this pool until the process ends
            }
        }
        void give_back_held() noexcept {
            if constexpr (resource<Upstream>) {
                for (const free_block& b : held) upstream->deallocate(b.pointer, b.bytes, b.alignment);
            }
            held.clear();
        }
        Upstream* upstream;
        std::vector<free_block> held;
        bool releasing = false;
        pool_type pool;  // last: destroyed first, while `releasing`
    };
    struct joining_block {
        free_block block;
        event_type event;  // recorded on the freeing stream, in `capture`
        std::uint64_t capture;
    };
    struct part {
        std::uint64_t pool = 0;
        stream_key key;
        std::uint64_t capture = 0;  // the last capture that took from it
        std::unique_ptr<holder> blocks;
        std::vector<joining_block> joining;  // freed on another stream in a capture into the pool
        std::vector<free_block> held;  // back into the Pool at the release only
        std::size_t live = 0;  // blocks handed out and not freed
        bool released = false;
    };

    part& part_for(std::uint64_t pool, const stream_key& key, std::uint64_t capture) {
        for (auto& p : parts_) {
            if (p->pool == pool && p->key == key && !p->released) {
                p->capture = capture;
                return *p;
            }
        }
        auto made = std::make_unique<part>();
        made->pool = pool;
        made->key = key;
        made->capture = capture;
        made->blocks = std::make_unique<holder>(*upstream_, options_);
        parts_.reserve(parts_.size() + 1);
        parts_.push_back(std::move(made));
        return *parts_.back();
    }

    // Blocks freed on other streams go into `p`'s Pool: behind a wait of `stream` on their event
    // where they were freed in `p`'s capture (an edge of the graph), at once where that capture
    // ended. May throw (from the wait): then nothing changed.
    void join(part& p, stream_ref stream) {
        for (const joining_block& j : p.joining) {
            if (j.capture == p.capture) events_->wait(stream, j.event);
        }
        for (const joining_block& j : p.joining) {
            events_->recycle(j.event);
            p.blocks->pool.deallocate(j.block.pointer, j.block.bytes, j.block.alignment);
        }
        p.joining.clear();
    }

    void hold(part& p, const free_block& block) noexcept {
        try {
            p.held.push_back(block);
        } catch (...) {  // no room to note it: lost to the pool until the process ends
        }
    }

    // Every block freed into `p` goes into its Pool: its graphs will not run again.
    void settle(part& p) noexcept {
        for (const joining_block& j : p.joining) {
            events_->recycle(j.event);
            p.blocks->pool.deallocate(j.block.pointer, j.block.bytes, j.block.alignment);
        }
        p.joining.clear();
        for (const free_block& b : p.held) p.blocks->pool.deallocate(b.pointer, b.bytes, b.alignment);
        p.held.clear();
    }

    void drop(part& p) noexcept {
        settle(p);
        std::erase_if(parts_, [&](const std::unique_ptr<part>& x) { return x.get() == &p; });
    }

    static constexpr bool tells_graph_gone = requires(Events& e, stream_ref s, std::function<void()> f) {
        { e.on_graph_gone(s, f) } -> std::convertible_to<bool>;
    };

    // Captures whose graphs are gone, as told from any thread.
    struct gone_list {
        std::mutex mutex;
        std::vector<std::uint64_t> captures;
        std::atomic<bool> any{false};
        void note(std::uint64_t capture) noexcept {
            const std::lock_guard lock(mutex);
            try {
                captures.push_back(capture);
            } catch (...) {  // no host memory: that pool waits for an explicit release
                return;
            }
            any.store(true, std::memory_order_release);
        }
        std::vector<std::uint64_t> take() {
            const std::lock_guard lock(mutex);
            any.store(false, std::memory_order_relaxed);
            return std::exchange(captures, {});
        }
    };

    Events* events_;
    Upstream* upstream_;
    options_type options_;
    std::vector<std::unique_ptr<part>> parts_;
    pointer_map<part*> owners_;  // live graph blocks
    std::vector<std::pair<std::uint64_t, std::uint64_t>> shared_;  // capture, pool
    std::vector<std::pair<std::uint64_t, free_block>> adopted_;  // pool, shared-pool block
    std::vector<std::pair<std::uint64_t, stream_key>> running_;  // captures that may run, by member stream
    std::vector<std::uint64_t> watched_;  // captures whose graph's end Events will tell
    std::vector<std::uint64_t> kept_gone_;  // told gone while other captures ran
    bool watch_failed_ = false;
    std::shared_ptr<gone_list> gone_ = std::make_shared<gone_list>();  // outlives this object in the telling
};

}  // namespace poolkit::detail
