// retried_on_oom<Upstream, Callback>: on exhaustion, call back and try again, a bounded number of times.
//
// When Upstream's allocate throws std::bad_alloc (out_of_memory included), or its try_allocate
// returns nullptr, the callback is called with the request and the attempt number (1, 2, ...); if
// it returns true (it freed something: released caches elsewhere, dropped a buffer) the request is
// tried again, up to options.max_retries times; otherwise, or past the bound, the last error is
// rethrown unchanged (try_allocate: nullptr). A try_allocate_cached miss is not exhaustion and is
// never retried. With no callback (an empty std::function) nothing is retried. Complexity: the
// upstream's, plus the callback on failure. Thread safety: the upstream's; the callback may run on
// any allocating thread. Alignment and stream semantics: the upstream's. retries() counts the
// retries made. Every other capability of Upstream passes through (core/forwarding.hpp).
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <functional>
#include <new>
#include <type_traits>
#include <utility>

namespace poolkit {

// What the callback learns about the failed request.
struct oom_event {
    std::size_t bytes;
    std::size_t alignment;
    unsigned attempt;  // 1 for the first failure
};

template <class Callback = std::function<bool(const oom_event&)>>
struct retry_options {
    Callback callback{};  // returns true when it freed something worth another try
    unsigned max_retries = 1;  // tries after the first
};

template <resource Upstream, class Callback = std::function<bool(const oom_event&)>>
    requires std::invocable<Callback&, const oom_event&>
class retried_on_oom : public forwarding<retried_on_oom<Upstream, Callback>, Upstream> {
    friend forwarding<retried_on_oom, Upstream>;

public:
    using upstream_type = Upstream;
    using options_type = retry_options<Callback>;

    retried_on_oom()
        requires std::default_initializable<Upstream> && std::default_initializable<Callback>
    = default;
    explicit retried_on_oom(Upstream upstream, options_type options = {}) : upstream_(std::move(upstream)), options_(std::move(options)) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    explicit retried_on_oom(std::in_place_t, Args&&... args) : upstream_(build_from<Upstream>(std::forward<Args>(args)...)) {}
    template <class... Args>
        requires constructible_in_place<Upstream, Args...>
    retried_on_oom(std::in_place_t, options_type options, Args&&... args)
        : upstream_(build_from<Upstream>(std::forward<Args>(args)...)), options_(std::move(options)) {}

    retried_on_oom(const retried_on_oom&) = delete;
    retried_on_oom& operator=(const retried_on_oom&) = delete;

    [[nodiscard]] std::size_t retries() const noexcept { return retries_.load(std::memory_order_relaxed); }
    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const retried_on_oom& a, const retried_on_oom& b) { return a.upstream_ == b.upstream_; }

private:
    template <class Call>
    void* around_allocate(const allocation_request& request, Call&& call) {
        if (request.kind == allocation_kind::try_allocate_cached) return call();
        for (unsigned failures = 1;; ++failures) {
            if (request.may_fail_quietly()) {
                if (void* pointer = call()) return pointer;
                if (request.bytes == 0 || !retry(request, failures)) return nullptr;
            } else {
                try {
                    return call();
                } catch (const std::bad_alloc&) {
                    if (!retry(request, failures)) throw;
                }
            }
        }
    }

    bool retry(const allocation_request& request, unsigned failures) {
        if (failures > options_.max_retries) return false;
        if constexpr (std::is_constructible_v<bool, Callback&>) {
            if (!static_cast<bool>(options_.callback)) return false;
        }
        if (!std::invoke(options_.callback, oom_event{request.bytes, request.alignment, failures})) return false;
        retries_.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

    Upstream upstream_;
    options_type options_{};
    std::atomic<std::size_t> retries_{0};
};

// An lvalue is referred to, an rvalue owned (docs/concepts.md).
template <resource R>
retried_on_oom(R&) -> retried_on_oom<ref<R>>;
template <resource R>
    requires(!std::is_lvalue_reference_v<R>)
retried_on_oom(R&&) -> retried_on_oom<R>;
template <resource R, class Callback>
retried_on_oom(R&, retry_options<Callback>) -> retried_on_oom<ref<R>, Callback>;
template <resource R, class Callback>
    requires(!std::is_lvalue_reference_v<R>)
retried_on_oom(R&&, retry_options<Callback>) -> retried_on_oom<R, Callback>;

static_assert(resource_with<retried_on_oom<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(!stream_resource<retried_on_oom<detail::resource_archetype<>>>);

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
template <resource Upstream, class Callback = std::function<bool(const oom_event&)>>
using retry_on_oom [[deprecated("poolkit: retry_on_oom<> is now retried_on_oom<> (docs/concepts.md, Names)")]] =
    retried_on_oom<Upstream, Callback>;

}  // namespace poolkit
