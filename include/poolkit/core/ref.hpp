// poolkit::ref<R>: a non-owning, trivially copyable reference to a resource.
//
// Lets several blocks share one upstream: `best_fit<ref<cuda_device_resource>>`. It forwards
// every call and every capability of R, adds no state but a pointer, and is only as thread-safe
// as R. The referenced resource must outlive every ref to it and all memory taken through them.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>

#include <memory>

namespace poolkit {

template <resource R>
class ref {
public:
    using resource_type = R;

    constexpr ref(R& resource) noexcept : resource_(std::addressof(resource)) {}  // NOLINT: implicit by design
    ref(R&&) = delete;  // a temporary would dangle

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        return resource_->allocate(bytes, alignment);
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        resource_->deallocate(pointer, bytes, alignment);
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<R>
    {
        return resource_->allocate_async(bytes, alignment, stream);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<R>
    {
        resource_->deallocate_async(pointer, bytes, alignment, stream);
    }

    void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate<R>
    {
        return resource_->try_allocate(bytes, alignment);
    }
    void release()
        requires has_release<R>
    {
        resource_->release();
    }
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<R>
    {
        return resource_->owns(pointer);
    }
    void check_invariants() const
        requires has_check_invariants<R>
    {
        resource_->check_invariants();
    }

    // The referenced resource itself: a ref is a view, so "upstream" is what it views.
    [[nodiscard]] R& get() const noexcept { return *resource_; }

    friend bool operator==(const ref& a, const ref& b) { return *a.resource_ == *b.resource_; }

    template <class Property>
        requires has_property<R, Property>
    friend constexpr void get_property(const ref&, Property) noexcept {}

private:
    R* resource_;
};

// Whether R is a ref<>: what walks down a composition step through (memory_summary, statistics).
template <class R>
inline constexpr bool is_ref_v = false;
template <class R>
inline constexpr bool is_ref_v<ref<R>> = true;

}  // namespace poolkit
