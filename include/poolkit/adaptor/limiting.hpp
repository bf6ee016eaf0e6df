// limiting<Upstream>: a cap on the bytes live through it.
//
// Counts the bytes of every live allocation as asked; an allocate that would take the count past
// the cap throws out_of_memory naming the cap, the bytes asked and the bytes live, without calling
// Upstream. The cap can be changed at any time; lowering it below what is live only makes later
// requests fail. Complexity: O(1) on top of Upstream. Thread safety: the count is one atomic, so
// the cap holds under concurrent use as far as Upstream allows concurrency. Alignment and stream
// semantics: Upstream's. Exhaustion: out_of_memory("limiting", ...) at the cap; Upstream's own
// exhaustion passes through after the bytes are given back to the count.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <limits>
#include <utility>

namespace poolkit {

template <resource Upstream>
class limiting : public forward_properties<limiting<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;

    // No cap until set_limit().
    limiting()
        requires std::default_initializable<Upstream>
    = default;
    limiting(Upstream upstream, std::size_t limit_bytes) : upstream_(std::move(upstream)), limit_(limit_bytes) {}

    limiting(const limiting&) = delete;
    limiting& operator=(const limiting&) = delete;

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        if (bytes == 0) return upstream_.allocate(bytes, alignment);
        take(bytes, alignment);
        try {
            void* pointer = upstream_.allocate(bytes, alignment);
            if (pointer == nullptr) give_back(bytes);
            return pointer;
        } catch (...) {
            give_back(bytes);
            throw;
        }
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        upstream_.deallocate(pointer, bytes, alignment);
        give_back(bytes);
    }

    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate<Upstream>
    {
        if (bytes == 0 || !try_take(bytes)) return nullptr;
        void* pointer = upstream_.try_allocate(bytes, alignment);
        if (pointer == nullptr) give_back(bytes);
        return pointer;
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<Upstream>
    {
        if (bytes == 0) return upstream_.allocate_async(bytes, alignment, stream);
        take(bytes, alignment);
        try {
            void* pointer = upstream_.allocate_async(bytes, alignment, stream);
            if (pointer == nullptr) give_back(bytes);
            return pointer;
        } catch (...) {
            give_back(bytes);
            throw;
        }
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<Upstream>
    {
        if (pointer == nullptr) return;
        upstream_.deallocate_async(pointer, bytes, alignment, stream);
        give_back(bytes);
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

    [[nodiscard]] std::size_t limit() const noexcept { return limit_.load(std::memory_order_relaxed); }
    void set_limit(std::size_t limit_bytes) noexcept { limit_.store(limit_bytes, std::memory_order_relaxed); }
    // Bytes live through this resource, as asked.
    [[nodiscard]] std::size_t used_bytes() const noexcept { return used_.load(std::memory_order_relaxed); }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: each keeps its own count.
    friend bool operator==(const limiting& a, const limiting& b) noexcept { return &a == &b; }

private:
    // Adds `bytes` to the count if it stays within the cap.
    bool try_take(std::size_t bytes) noexcept {
        std::size_t used = used_.load(std::memory_order_relaxed);
        do {
            const std::size_t cap = limit_.load(std::memory_order_relaxed);
            if (used > cap || bytes > cap - used) return false;
        } while (!used_.compare_exchange_weak(used, used + bytes, std::memory_order_relaxed));
        return true;
    }
    void take(std::size_t bytes, std::size_t alignment) {
        validate_alignment(alignment);
        if (try_take(bytes)) return;
        memory_figures figures = memory_figures::request(bytes, alignment);
        figures.live_bytes = used_.load(std::memory_order_relaxed);
        figures.limit_bytes = limit_.load(std::memory_order_relaxed);
        throw out_of_memory("limiting", figures);
    }
    void give_back(std::size_t bytes) noexcept { used_.fetch_sub(bytes, std::memory_order_relaxed); }

    [[no_unique_address]] Upstream upstream_;
    std::atomic<std::size_t> limit_{std::numeric_limits<std::size_t>::max()};
    std::atomic<std::size_t> used_{0};  // invariant: the bytes of every live allocation made here
};

static_assert(resource_with<limiting<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_upstream<limiting<detail::resource_archetype<>>> && !has_try_allocate<limiting<detail::resource_archetype<>>>);

}  // namespace poolkit
