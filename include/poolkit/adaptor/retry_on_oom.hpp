// retry_on_oom<Upstream, Callback>: on exhaustion, call back and try again, a bounded number of times.
//
// When Upstream's allocate throws std::bad_alloc (out_of_memory included), the callback is called
// with the request and the attempt number (1, 2, ...); if it returns true (it freed something:
// released caches elsewhere, dropped a buffer) the request is tried again, up to max_retries
// times; otherwise, or past the bound, the last error is rethrown unchanged. Complexity: the
// upstream's, plus the callback on failure. Thread safety: the upstream's; the callback may run on
// any allocating thread. Alignment and stream semantics: the upstream's. retries() counts the
// retries made.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/properties.hpp>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <functional>
#include <new>
#include <utility>

namespace poolkit {

// What the callback learns about the failed request.
struct oom_event {
    std::size_t bytes;
    std::size_t alignment;
    unsigned attempt;  // 1 for the first failure
};

template <resource Upstream, class Callback = std::function<bool(const oom_event&)>>
    requires std::invocable<Callback&, const oom_event&>
class retry_on_oom : public forward_properties<retry_on_oom<Upstream, Callback>, Upstream> {
public:
    using upstream_type = Upstream;

    explicit retry_on_oom(Upstream upstream, Callback callback, unsigned max_retries = 1)
        : upstream_(std::move(upstream)), callback_(std::move(callback)), max_retries_(max_retries) {}

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        return with_retries(bytes, alignment, [&] { return upstream_.allocate(bytes, alignment); });
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        upstream_.deallocate(pointer, bytes, alignment);
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<Upstream>
    {
        return with_retries(bytes, alignment, [&] { return upstream_.allocate_async(bytes, alignment, stream); });
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<Upstream>
    {
        upstream_.deallocate_async(pointer, bytes, alignment, stream);
    }

    void release()
        requires has_release<Upstream>
    {
        upstream_.release();
    }
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<Upstream>
    {
        return upstream_.owns(pointer);
    }
    void check_invariants() const
        requires has_check_invariants<Upstream>
    {
        upstream_.check_invariants();
    }

    [[nodiscard]] std::size_t retries() const noexcept { return retries_.load(std::memory_order_relaxed); }
    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const retry_on_oom& a, const retry_on_oom& b) { return a.upstream_ == b.upstream_; }

private:
    template <class Attempt>
    void* with_retries(std::size_t bytes, std::size_t alignment, Attempt&& attempt) {
        for (unsigned failures = 1;; ++failures) {
            try {
                return attempt();
            } catch (const std::bad_alloc&) {
                if (failures > max_retries_ || !std::invoke(callback_, oom_event{bytes, alignment, failures})) throw;
                retries_.fetch_add(1, std::memory_order_relaxed);
            }
        }
    }

    Upstream upstream_;
    Callback callback_;
    unsigned max_retries_;
    std::atomic<std::size_t> retries_{0};
};

static_assert(resource_with<retry_on_oom<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(!stream_resource<retry_on_oom<detail::resource_archetype<>>>);

}  // namespace poolkit
