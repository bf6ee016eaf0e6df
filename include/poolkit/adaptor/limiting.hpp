// limiting<Upstream>: a cap on the bytes live through it.
//
// Counts the bytes of every live allocation as asked; an allocate that would take the count past
// the cap throws out_of_memory naming the cap, the bytes asked and the bytes live, without calling
// Upstream (try_allocate and try_allocate_cached: nullptr). The cap can be changed at any time;
// lowering it below what is live only makes later requests fail. Complexity: O(1) on top of
// Upstream. Thread safety: the count is one atomic, so the cap holds under concurrent use as far
// as Upstream allows concurrency. Alignment and stream semantics: Upstream's. Exhaustion:
// out_of_memory("limiting", ...) at the cap; Upstream's own exhaustion passes through after the
// bytes are given back to the count. Every other capability of Upstream passes through
// (core/forwarding.hpp).
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/rebind.hpp>
#include <poolkit/core/ref.hpp>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <limits>
#include <type_traits>
#include <utility>

namespace poolkit {

struct limiting_options {
    std::size_t limit_bytes = std::numeric_limits<std::size_t>::max();  // no cap
};

template <resource Upstream>
class limiting : public forwarding<limiting<Upstream>, Upstream> {
    friend forwarding<limiting, Upstream>;

public:
    using upstream_type = Upstream;
    using options_type = limiting_options;
    template <class N>
    using rebind = limiting<rebind_t<Upstream, N>>;
    using lane_upstream_type = lane_upstream_t<Upstream>;
    using lane_options_type = lane_options_t<Upstream>;

    // No cap until set_limit().
    limiting()
        requires std::default_initializable<Upstream>
    = default;
    explicit limiting(Upstream upstream, limiting_options options = {})
        : upstream_(std::move(upstream)), limit_(options.limit_bytes) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    explicit limiting(std::in_place_t, Args&&... args) : upstream_(build_from<Upstream>(std::forward<Args>(args)...)) {}

    limiting(const limiting&) = delete;
    limiting& operator=(const limiting&) = delete;

    [[nodiscard]] std::size_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
    void set_limit(std::size_t limit_bytes) noexcept { limit_.store(limit_bytes, std::memory_order_relaxed); }
    // Bytes live through this resource, as asked.
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_.load(std::memory_order_relaxed); }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: each keeps its own count.
    friend bool operator==(const limiting& a, const limiting& b) noexcept { return &a == &b; }

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
            throw out_of_memory("limiting", figures);
        }
        try {
            void* pointer = call();
            if (pointer == nullptr) uncount(request.bytes);
            return pointer;
        } catch (...) {
            uncount(request.bytes);
            throw;
        }
    }
    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        if (request.pointer == nullptr) return;
        call();
        uncount(request.bytes);
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
    void uncount(std::size_t bytes) noexcept { live_.fetch_sub(bytes, std::memory_order_relaxed); }

    Upstream upstream_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    std::atomic<std::size_t> limit_{std::numeric_limits<std::size_t>::max()};
    std::atomic<std::size_t> live_{0};  // invariant: the bytes of every live allocation made here
};

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
limiting(R&, limiting_options = {}) -> limiting<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
limiting(R&&, limiting_options = {}) -> limiting<R>;

static_assert(resource_with<limiting<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_upstream<limiting<detail::resource_archetype<>>> && !has_try_allocate<limiting<detail::resource_archetype<>>>);

}  // namespace poolkit
