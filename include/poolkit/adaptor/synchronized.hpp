// synchronized<Upstream, Mutex>: every call to Upstream under one lock.
//
// Makes any single-threaded block (a strategy, stream_ordered) safe to share between threads.
// Complexity: the upstream's plus one lock and unlock.
// Alignment, stream semantics and exhaustion: the upstream's. Forwards properties and every
// optional capability the upstream has (core/forwarding.hpp), each under the lock.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>

#include <concepts>
#include <mutex>
#include <type_traits>
#include <utility>

namespace poolkit {

template <resource Upstream, class Mutex = std::mutex>
class synchronized : public forwarding<synchronized<Upstream, Mutex>, Upstream> {
    friend forwarding<synchronized, Upstream>;

public:
    using upstream_type = Upstream;

    synchronized()
        requires std::default_initializable<Upstream>
    = default;
    explicit synchronized(Upstream upstream) : upstream_(std::move(upstream)) {}
    // Builds the upstream in place (for blocks that cannot move, or would rather not).
    template <class... Arguments>
        requires constructible_in_place<Upstream, Arguments...>
    explicit synchronized(std::in_place_t, Arguments&&... arguments)
        : upstream_(build_from<Upstream>(std::forward<Arguments>(arguments)...)) {}

    // Runs `action(upstream)` under the lock: for several calls that must not interleave, or for
    // reading figures consistently.
    template <class Action>
    decltype(auto) locked(Action&& action) {
        std::lock_guard lock(mutex_);
        return std::forward<Action>(action)(upstream_);
    }
    // The same for reading: `action(const upstream&)` under the lock (a walk for snapshot()).
    template <class Action>
    decltype(auto) locked(Action&& action) const {
        std::lock_guard lock(mutex_);
        return std::forward<Action>(action)(std::as_const(upstream_));
    }

    // Unsynchronized access: only where no other thread can be using the resource.
    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const synchronized& a, const synchronized& b) { return a.upstream_ == b.upstream_; }

private:
    template <class Call>
    void* around_allocate(const allocation_request&, Call&& call) {
        std::lock_guard lock(mutex_);
        return std::forward<Call>(call)();
    }
    template <class Call>
    void around_deallocate(const deallocation_request&, Call&& call) noexcept {
        std::lock_guard lock(mutex_);
        std::forward<Call>(call)();
    }
    template <class Call>
    decltype(auto) around_call(Call&& call) const {
        std::lock_guard lock(mutex_);
        return std::forward<Call>(call)(upstream_);
    }
    template <class Call>
    decltype(auto) around_call(Call&& call) {
        std::lock_guard lock(mutex_);
        return std::forward<Call>(call)(upstream_);
    }

    mutable Mutex mutex_;
    Upstream upstream_;
};

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
synchronized(R&) -> synchronized<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
synchronized(R&&) -> synchronized<R>;

static_assert(resource_with<synchronized<detail::resource_archetype<device_accessible>>, device_accessible>);
static_assert(!has_release<synchronized<detail::resource_archetype<>>>);

}  // namespace poolkit
