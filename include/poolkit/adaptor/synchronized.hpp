// synchronized<Upstream, Mutex>: every call to Upstream under one lock.
//
// Makes any single-threaded block (a strategy, stream_ordered) safe to share between threads.
// Complexity: the upstream's plus one lock and unlock (~20 ns uncontended with std::mutex).
// Alignment, stream semantics and exhaustion: the upstream's. Forwards properties and every
// optional capability the upstream has, each under the lock.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/properties.hpp>

#include <concepts>
#include <cstddef>
#include <mutex>
#include <utility>

namespace poolkit {

template <resource Upstream, class Mutex = std::mutex>
class synchronized : public forward_properties<synchronized<Upstream, Mutex>, Upstream> {
public:
    using upstream_type = Upstream;

    synchronized()
        requires std::default_initializable<Upstream>
    = default;
    explicit synchronized(Upstream upstream) : upstream_(std::move(upstream)) {}
    // Builds the upstream in place (for blocks that cannot move, or would rather not).
    template <class... Arguments>
        requires std::constructible_from<Upstream, Arguments...>
    explicit synchronized(std::in_place_t, Arguments&&... arguments)
        : upstream_(std::forward<Arguments>(arguments)...) {}

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        std::lock_guard lock(mutex_);
        return upstream_.allocate(bytes, alignment);
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        std::lock_guard lock(mutex_);
        upstream_.deallocate(pointer, bytes, alignment);
    }
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<Upstream>
    {
        std::lock_guard lock(mutex_);
        return upstream_.allocate_async(bytes, alignment, stream);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<Upstream>
    {
        std::lock_guard lock(mutex_);
        upstream_.deallocate_async(pointer, bytes, alignment, stream);
    }
    void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate<Upstream>
    {
        std::lock_guard lock(mutex_);
        return upstream_.try_allocate(bytes, alignment);
    }
    void release()
        requires has_release<Upstream>
    {
        std::lock_guard lock(mutex_);
        upstream_.release();
    }
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<Upstream>
    {
        std::lock_guard lock(mutex_);
        return upstream_.owns(pointer);
    }
    void check_invariants() const
        requires has_check_invariants<Upstream>
    {
        std::lock_guard lock(mutex_);
        upstream_.check_invariants();
    }
    void record_use(void* pointer, stream_ref stream)
        requires requires(Upstream& u, void* p, stream_ref s) { u.record_use(p, s); }
    {
        std::lock_guard lock(mutex_);
        upstream_.record_use(pointer, stream);
    }

    // Runs `action(upstream)` under the lock: for several calls that must not interleave, or for
    // reading figures consistently.
    template <class Action>
    decltype(auto) locked(Action&& action) {
        std::lock_guard lock(mutex_);
        return std::forward<Action>(action)(upstream_);
    }

    // Unsynchronized access: only where no other thread can be using the resource.
    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const synchronized& a, const synchronized& b) { return a.upstream_ == b.upstream_; }

private:
    mutable Mutex mutex_;
    Upstream upstream_;
};

static_assert(resource_with<synchronized<detail::resource_archetype<device_accessible>>, device_accessible>);
static_assert(!has_release<synchronized<detail::resource_archetype<>>>);

}  // namespace poolkit
