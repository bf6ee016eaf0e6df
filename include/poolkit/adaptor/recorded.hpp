// recorded<Upstream>: writes what passes through it into a history (adaptor/history.hpp), and
// recorded_memory<V>: the same for a virtual memory's map and unmap calls.
//
// Where it sits decides what it records, as for counted<>: around what users call
// (recording_layer::blocks) every allocate is an alloc event, every free a free_requested and then
// a free_completed, and every allocate refused an oom event; between a strategy and its upstream
// (recording_layer::segments) they are segment_alloc and segment_free. recorded_memory<V>, given
// to a strategy over virtual memory (strategy/expandable.hpp) in V's place, records segment_map and
// segment_unmap. A free_completed follows its free_requested at once, except for a block given to
// record_use while recording: where Upstream tells (pending_free(p): stream_ordered), it comes once
// the block no longer waits for the other streams' work, at the next allocate or settle().
//
//   history h;
//   recorded<ref<caching_resource<...>>> users{pool, h};  // records nothing until h.start()
//
// Built without a history (as a stream_ordered's lanes are), it records users' blocks into
// default_history(), which is off until started.
//
// Complexity: one relaxed atomic load per call while the history is not recording; otherwise one
// event (a lock), a label (history_context::gather) for alloc and free_requested, and O(blocks
// pending in Upstream) per block given to record_use. Thread safety: as Upstream; the history
// and the blocks awaiting completion have their own locks. Alignment, stream semantics and
// exhaustion: Upstream's; an exhaustion is recorded and rethrown.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/virtual_memory.hpp>
#include <poolkit/adaptor/history.hpp>

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <new>
#include <type_traits>
#include <unordered_set>
#include <set>
#include <utility>
#include <vector>

namespace poolkit {

enum class recording_layer { blocks, segments };

template <resource Upstream>
class recorded : public forwarding<recorded<Upstream>, Upstream> {
    friend forwarding<recorded, Upstream>;

public:
    using upstream_type = Upstream;

    // Records users' blocks into default_history().
    recorded()
        requires std::default_initializable<Upstream>
        : recorded(Upstream{}, default_history()) {}
    explicit recorded(Upstream upstream) : recorded(std::move(upstream), default_history()) {}
    // Records into `into`, which must outlive this adaptor.
    recorded(Upstream upstream, history& into, recording_layer layer = recording_layer::blocks)
        : upstream_(std::move(upstream)), history_(&into), layer_(layer) {}
    // Builds the upstream in place (as lanes do); records users' blocks into default_history().
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    explicit recorded(std::in_place_t, Args&&... args)
        : upstream_(build_from<Upstream>(std::forward<Args>(args)...)), history_(&default_history()), layer_(recording_layer::blocks) {}
    // Records into `into` (and at `layer`), the upstream built from `args`.
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    recorded(std::in_place_t, history& into, Args&&... args)
        : upstream_(build_from<Upstream>(std::forward<Args>(args)...)), history_(&into), layer_(recording_layer::blocks) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    recorded(std::in_place_t, history& into, recording_layer layer, Args&&... args)
        : upstream_(build_from<Upstream>(std::forward<Args>(args)...)), history_(&into), layer_(layer) {}

    recorded(const recorded&) = delete;
    recorded& operator=(const recorded&) = delete;

    [[nodiscard]] history& recorded_into() const noexcept { return *history_; }
    [[nodiscard]] recording_layer layer() const noexcept { return layer_; }

    // The block at `pointer` is also used on `stream` (Upstream's record_use); while recording,
    // its free_completed waits until Upstream no longer holds it pending.
    void record_use(void* pointer, stream_ref stream)
        requires has_record_use<Upstream>
    {
        upstream_.record_use(pointer, stream);
        if constexpr (has_pending_free<Upstream>) {
            if (!history_->recording()) return;
            std::lock_guard lock(mutex_);
            try {
                used_.insert(reinterpret_cast<std::uintptr_t>(pointer));
            } catch (...) {  // no host memory: its free_completed comes with its free_requested
            }
        }
    }

    // Records free_completed for each block given to record_use that Upstream no longer holds.
    void settle() noexcept {
        if constexpr (has_pending_free<Upstream>) {
            if (awaiting_count_.load(std::memory_order_relaxed) == 0) return;
            std::vector<awaiting> done;
            {
                std::lock_guard lock(mutex_);
                const auto still = std::stable_partition(awaiting_.begin(), awaiting_.end(), [&](const awaiting& a) {
                    return upstream_.pending_free(reinterpret_cast<const void*>(a.address));
                });
                try {
                    done.assign(still, awaiting_.end());
                } catch (...) {
                    return;  // no host memory: they complete at a later settle()
                }
                awaiting_.erase(still, awaiting_.end());
                awaiting_count_.store(awaiting_.size(), std::memory_order_relaxed);
            }
            for (const awaiting& a : done) history_->record_at(history_action::free_completed, a.address, a.bytes, a.stream);
        }
    }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const recorded& a, const recorded& b) { return a.upstream_ == b.upstream_; }

private:
    // Addresses of freed blocks are kept as numbers: the memory is no longer the caller's.
    struct awaiting {
        std::uintptr_t address;
        std::size_t bytes;
        std::uintptr_t stream;
    };

    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        if (!history_->recording()) return call();
        const bool blocks = layer_ == recording_layer::blocks;
        const std::uintptr_t stream = request.kind == allocation_kind::allocate_async ? stream_id(request.stream) : 0;
        if (blocks) settle();  // a completed block may be what this request gets
        const std::uint64_t label = blocks ? history_->label(history_action::alloc) : 0;
        void* pointer = nullptr;
        try {
            pointer = call();
        } catch (const std::bad_alloc& error) {
            // A refusal below a strategy is one it may recover from (by releasing and retrying):
            // only users' requests are oom events.
            if (blocks) history_->record(history_action::oom, nullptr, request.bytes, stream, label, free_bytes(error));
            throw;
        }
        if (pointer != nullptr) {
            history_->record(blocks ? history_action::alloc : history_action::segment_alloc, pointer, request.bytes, stream, label);
        } else if (blocks && request.kind == allocation_kind::try_allocate && request.bytes != 0) {
            history_->record(history_action::oom, nullptr, request.bytes, stream, label);
        } else {
            history_->discard(label);  // a cache miss (try_allocate_cached) is no event
        }
        return pointer;
    }

    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        if (request.pointer == nullptr || !history_->recording()) {
            call();
            return;
        }
        const std::uintptr_t stream = request.on_stream ? stream_id(request.stream) : 0;
        const auto address = reinterpret_cast<std::uintptr_t>(request.pointer);
        if (layer_ == recording_layer::segments) {
            call();
            history_->record_at(history_action::segment_free, address, request.bytes, stream);
            return;
        }
        // Before the free: the address may be handed out again at once.
        history_->record_at(history_action::free_requested, address, request.bytes, stream,
                            history_->label(history_action::free_requested));
        call();
        if (!waits_for_uses(address, request.bytes, stream)) {
            history_->record_at(history_action::free_completed, address, request.bytes, stream);
        }
    }

    // Whether the block just freed was given to record_use and still waits in Upstream (its
    // free_completed then comes from settle()).
    bool waits_for_uses(std::uintptr_t address, std::size_t bytes, std::uintptr_t stream) noexcept {
        if constexpr (has_pending_free<Upstream>) {
            std::lock_guard lock(mutex_);
            if (used_.erase(address) == 0 || !upstream_.pending_free(reinterpret_cast<const void*>(address))) return false;
            try {
                awaiting_.push_back({address, bytes, stream});
            } catch (...) {
                return false;
            }
            awaiting_count_.store(awaiting_.size(), std::memory_order_relaxed);
            return true;
        } else {
            return false;
        }
    }

    // What a refusal says the device (or the limit) still had, 0 where it does not say.
    static std::size_t free_bytes(const std::bad_alloc& error) noexcept {
        const auto* refusal = dynamic_cast<const out_of_memory*>(&error);
        if (refusal == nullptr) return 0;
        const memory_figures& f = refusal->figures();
        if (f.available_bytes) return *f.available_bytes;
        if (f.limit_bytes && f.reserved_bytes && *f.limit_bytes > *f.reserved_bytes) return *f.limit_bytes - *f.reserved_bytes;
        return 0;
    }

    Upstream upstream_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    history* history_;
    recording_layer layer_;
    std::mutex mutex_;  // used_ and awaiting_
    std::unordered_set<std::uintptr_t> used_;  // given to record_use while recording, still live
    std::vector<awaiting> awaiting_;  // freed, still pending in Upstream
    std::atomic<std::size_t> awaiting_count_{0};
};

static_assert(resource_with<recorded<detail::resource_archetype<host_accessible>>, host_accessible>);

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
recorded(R&) -> recorded<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
recorded(R&&) -> recorded<R>;
template <resource R>
recorded(R&, history&, recording_layer = recording_layer::blocks) -> recorded<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
recorded(R&&, history&, recording_layer = recording_layer::blocks) -> recorded<R>;

// A view of the virtual memory `memory` (which must outlive it) that records each map call as
// segment_map and each unmap as segment_unmap, and the blocks of its resource face (allocate,
// deallocate: a graph pool's memory, mapped and unmapped with them) likewise. Everything else is V's.
template <virtual_memory V>
class recorded_memory : public forwarding<recorded_memory<V>, V> {
    friend forwarding<recorded_memory, V>;

public:
    recorded_memory(V& memory, history& into) noexcept : memory_(&memory), history_(&into) {}

    [[nodiscard]] V& upstream_resource() const noexcept { return *memory_; }

    [[nodiscard]] std::byte* base() const noexcept { return memory_->base(); }
    [[nodiscard]] std::size_t capacity() const noexcept { return memory_->capacity(); }
    [[nodiscard]] std::size_t granularity() const noexcept { return memory_->granularity(); }
    void map(void* at, std::size_t bytes) {
        memory_->map(at, bytes);
        history_->record(history_action::segment_map, at, bytes, 0);
    }
    void map_whole(void* at, std::size_t bytes) {
        memory_->map_whole(at, bytes);
        history_->record(history_action::segment_map, at, bytes, 0);
    }
    // An alias adds no memory, so neither it nor its unmap is a segment event.
    void alias(void* at, const void* from, std::size_t bytes)
        requires aliasing_virtual_memory<V>
    {
        aliases_.insert(reinterpret_cast<std::uintptr_t>(at));
        try {
            memory_->alias(at, from, bytes);
        } catch (...) {
            aliases_.erase(reinterpret_cast<std::uintptr_t>(at));
            throw;
        }
    }
    void unmap(void* at, std::size_t bytes) noexcept {
        const auto address = reinterpret_cast<std::uintptr_t>(at);
        memory_->unmap(at, bytes);
        if (aliases_.erase(address) == 0) history_->record_at(history_action::segment_unmap, address, bytes, 0);
    }
    [[nodiscard]] bool is_mapped(const void* pointer) const { return memory_->is_mapped(pointer); }
    [[nodiscard]] std::size_t mapped_bytes() const { return memory_->mapped_bytes(); }
    [[nodiscard]] std::size_t peak_mapped_bytes() const { return memory_->peak_mapped_bytes(); }
    [[nodiscard]] std::size_t map_calls() const { return memory_->map_calls(); }
    [[nodiscard]] std::size_t unmap_calls() const { return memory_->unmap_calls(); }
    [[nodiscard]] std::byte* claim(std::size_t bytes) { return memory_->claim(bytes); }
    void unclaim(void* at, std::size_t bytes) noexcept { memory_->unclaim(at, bytes); }
    void synchronize() { memory_->synchronize(); }

    // V's optional members, where it has them.
    [[nodiscard]] bool may_unmap() const
        requires requires(const V& v) { v.may_unmap(); }
    {
        return memory_->may_unmap();
    }
    [[nodiscard]] std::size_t largest_claimable() const
        requires requires(const V& v) { v.largest_claimable(); }
    {
        return memory_->largest_claimable();
    }
    [[nodiscard]] std::size_t physical_limit() const
        requires requires(const V& v) { v.physical_limit(); }
    {
        return memory_->physical_limit();
    }

    friend bool operator==(const recorded_memory& a, const recorded_memory& b) { return a.memory_ == b.memory_; }

private:
    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        void* pointer = call();
        if (pointer != nullptr) history_->record(history_action::segment_map, pointer, request.bytes, 0);
        return pointer;
    }
    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        const auto address = reinterpret_cast<std::uintptr_t>(request.pointer);
        call();
        if (address != 0) history_->record_at(history_action::segment_unmap, address, request.bytes, 0);
    }

    V* memory_;
    history* history_;
    std::set<std::uintptr_t> aliases_;  // starts of the aliases mapped through this
};

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
template <resource Upstream>
using recording [[deprecated("poolkit: recording<> is now recorded<> (docs/concepts.md, Names)")]] = recorded<Upstream>;
template <virtual_memory V>
using recording_memory [[deprecated("poolkit: recording_memory<> is now recorded_memory<> (docs/concepts.md, Names)")]] =
    recorded_memory<V>;

}  // namespace poolkit
