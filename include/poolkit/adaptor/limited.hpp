// limited<Upstream>: a cap on the bytes live through it.
//
// Counts the bytes of every live allocation as asked; an allocate that would take the count past
// the cap throws out_of_memory naming the cap, the bytes asked and the bytes live, without calling
// Upstream (try_allocate and try_allocate_cached: nullptr). The cap can be changed at any time;
// lowering it below what is live only makes later requests fail. Complexity: O(1) on top of
// Upstream. Thread safety: the count is one atomic, so the cap holds under concurrent use as far
// as Upstream allows concurrency. Alignment and stream semantics: Upstream's. Exhaustion:
// out_of_memory("limited", ...) at the cap; Upstream's own exhaustion passes through after the
// bytes are given back to the count. Every other capability of Upstream passes through
// (core/forwarding.hpp).
// Bad frees: the count only gives back what Upstream really took back. With POOLKIT_ENABLE_ASSERTS
// every live block is remembered (one host record each, under a mutex), and a deallocate of a
// pointer not live through this resource (foreign, or freed twice) or with another size is a
// failed POOLKIT_ASSERT before Upstream sees it. Without assertions, where Upstream has owns(), a
// pointer it does not own is passed on but not subtracted (one owns() per deallocate); and a free
// that would take the count below zero takes it to zero instead, so it never wraps.
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>

#include <algorithm>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>
#if POOLKIT_ENABLE_ASSERTS
#  include <cstdint>
#  include <mutex>
#  include <unordered_map>
#endif

namespace poolkit {

struct limited_options {
    std::size_t limit_bytes = std::numeric_limits<std::size_t>::max();  // no cap
};

template <resource Upstream>
class limited : public forwarding<limited<Upstream>, Upstream> {
    friend forwarding<limited, Upstream>;

public:
    using upstream_type = Upstream;
    using options_type = limited_options;

    // No cap until set_limit().
    limited()
        requires std::default_initializable<Upstream>
    = default;
    explicit limited(Upstream upstream, limited_options options = {}) : upstream_(std::move(upstream)), limit_(options.limit_bytes) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    explicit limited(std::in_place_t, Args&&... args) : upstream_(build_from<Upstream>(std::forward<Args>(args)...)) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    limited(std::in_place_t, limited_options options, Args&&... args)
        : upstream_(build_from<Upstream>(std::forward<Args>(args)...)), limit_(options.limit_bytes) {}

    limited(const limited&) = delete;
    limited& operator=(const limited&) = delete;

    [[nodiscard]] std::size_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
    void set_limit(std::size_t limit_bytes) noexcept { limit_.store(limit_bytes, std::memory_order_relaxed); }
    // Bytes live through this resource, as asked.
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_.load(std::memory_order_relaxed); }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: each keeps its own count.
    friend bool operator==(const limited& a, const limited& b) noexcept { return &a == &b; }

private:
    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        if (request.bytes == 0) return call();
        validate_alignment(request.alignment);
        if (!try_take(request.bytes)) {
            if (request.may_fail_quietly()) return nullptr;
            memory_figures figures = memory_figures::request(request.bytes, request.alignment);
            figures.live_bytes = live_.load(std::memory_order_relaxed);
            figures.limit_bytes = limit_.load(std::memory_order_relaxed);
            throw out_of_memory("limited", figures);
        }
        void* pointer = nullptr;
        try {
            pointer = call();
        } catch (...) {
            uncount(request.bytes);
            throw;
        }
        if (pointer == nullptr) {
            uncount(request.bytes);
            return nullptr;
        }
#if POOLKIT_ENABLE_ASSERTS
        try {
            remember(pointer, request.bytes);
        } catch (...) {  // no host memory for the record: the block goes back, and its bytes
            this->undo_allocate(request, pointer);
            uncount(request.bytes);
            throw;
        }
#endif
        return pointer;
    }
    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        if (request.pointer == nullptr) return;
#if POOLKIT_ENABLE_ASSERTS
        if (!forget(request.pointer, request.bytes)) return;
        call();
        uncount(request.bytes);
#else
        bool taken_back = true;
        if constexpr (has_owns<Upstream>) taken_back = upstream_.owns(request.pointer);
        call();
        if (taken_back) uncount(request.bytes);
#endif
    }

    // Adds `bytes` to the count if it stays within the cap.
    bool try_take(std::size_t bytes) noexcept {
        std::size_t live = live_.load(std::memory_order_relaxed);
        do {
            const std::size_t cap = limit_.load(std::memory_order_relaxed);
            if (live > cap || bytes > cap - live) return false;
        } while (!live_.compare_exchange_weak(live, live + bytes, std::memory_order_relaxed));
        return true;
    }
    // Takes `bytes` off the count, never below zero.
    void uncount(std::size_t bytes) noexcept {
        std::size_t live = live_.load(std::memory_order_relaxed);
        while (!live_.compare_exchange_weak(live, live - std::min(live, bytes), std::memory_order_relaxed)) {
        }
    }

#if POOLKIT_ENABLE_ASSERTS
    void remember(void* pointer, std::size_t bytes) {
        std::lock_guard lock(blocks_mutex_);
        const bool fresh = blocks_.emplace(reinterpret_cast<std::uintptr_t>(pointer), bytes).second;
        POOLKIT_ASSERT(fresh, "limited: Upstream handed out a block that is still live");
    }
    // Whether `pointer` is live here with `bytes`; a failed POOLKIT_ASSERT naming the rule if not.
    bool forget(void* pointer, std::size_t bytes) noexcept {
        std::lock_guard lock(blocks_mutex_);
        const auto found = blocks_.find(reinterpret_cast<std::uintptr_t>(pointer));
        POOLKIT_ASSERT(found != blocks_.end(),
                       "limited: deallocate of a pointer not live through it (never allocated here, or freed twice)");
        if (found == blocks_.end()) return false;
        POOLKIT_ASSERT(found->second == bytes, "limited: deallocate with a size other than the one allocated");
        if (found->second != bytes) return false;
        blocks_.erase(found);
        return true;
    }
#endif

    Upstream upstream_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    std::atomic<std::size_t> limit_{std::numeric_limits<std::size_t>::max()};
    std::atomic<std::size_t> live_{0};  // invariant: the bytes of every live allocation made here
#if POOLKIT_ENABLE_ASSERTS
    std::mutex blocks_mutex_;
    std::unordered_map<std::uintptr_t, std::size_t> blocks_;  // each live block -> its bytes
#endif
};

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
limited(R&, limited_options = {}) -> limited<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
limited(R&&, limited_options = {}) -> limited<R>;

static_assert(resource_with<limited<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_upstream<limited<detail::resource_archetype<>>> && !has_try_allocate<limited<detail::resource_archetype<>>>);

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
template <resource Upstream>
using limiting [[deprecated("poolkit: limiting<> is now limited<> (docs/concepts.md, Names)")]] = limited<Upstream>;
using limiting_options [[deprecated("poolkit: limiting_options is now limited_options (docs/concepts.md, Names)")]] = limited_options;

}  // namespace poolkit
