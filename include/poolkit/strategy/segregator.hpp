// segregator<Threshold, Small, Large>: requests of at most Threshold bytes go to Small, larger
// ones to Large; deallocate routes by the same size, so each part frees only its own blocks.
//
// Complexity, alignment and exhaustion are those of the part that serves the request (one size
// comparison added). Thread safety: that of the parts; the segregator adds no state. Stream
// semantics: allocate_async and deallocate_async exist when both parts have them. Each optional
// capability — try_allocate, release, owns, check_invariants, the for_each_block walk (chunks of
// both parts in address order) — and each property exists only when both parts have it. Equal
// when both parts are equal.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/detail/walk_merge.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/walk.hpp>

#include <concepts>
#include <cstddef>
#include <utility>

namespace poolkit {

template <std::size_t Threshold, resource Small, resource Large>
class segregator {
public:
    static constexpr std::size_t threshold = Threshold;
    segregator()
        requires std::default_initializable<Small> && std::default_initializable<Large>
    = default;
    segregator(Small small, Large large) : small_(std::move(small)), large_(std::move(large)) {}
    // Both parts built in place over `upstream`, with their default options (as
    // lanes<segregator_over> makes a stream_ordered's pool).
    template <class N>
        requires constructible_in_place<Small, const N&> && constructible_in_place<Large, const N&>
    segregator(std::in_place_t, const N& upstream) : small_(build_from<Small>(upstream)), large_(build_from<Large>(upstream)) {}

    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        return bytes <= Threshold ? small_.allocate(bytes, alignment) : large_.allocate(bytes, alignment);
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes <= Threshold) {
            small_.deallocate(pointer, bytes, alignment);
        } else {
            large_.deallocate(pointer, bytes, alignment);
        }
    }

    [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<Small> && stream_resource<Large>
    {
        return bytes <= Threshold ? small_.allocate_async(bytes, alignment, stream) : large_.allocate_async(bytes, alignment, stream);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<Small> && stream_resource<Large>
    {
        if (bytes <= Threshold) {
            small_.deallocate_async(pointer, bytes, alignment, stream);
        } else {
            large_.deallocate_async(pointer, bytes, alignment, stream);
        }
    }
    POOLKIT_CUDA_MR_MEMBERS(segregator);

    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate<Small> && has_try_allocate<Large>
    {
        return bytes <= Threshold ? small_.try_allocate(bytes, alignment) : large_.try_allocate(bytes, alignment);
    }
    // From what the part holds; never grows.
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate_cached<Small> && has_try_allocate_cached<Large>
    {
        return bytes <= Threshold ? small_.try_allocate_cached(bytes, alignment) : large_.try_allocate_cached(bytes, alignment);
    }
    void release()
        requires has_release<Small> && has_release<Large>
    {
        small_.release();
        large_.release();
    }
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<Small> && has_owns<Large>
    {
        return small_.owns(pointer) || large_.owns(pointer);
    }
    // The walk of walk.hpp over both parts, chunks of both in address order.
    template <class Visitor>
        requires walkable<Small> && walkable<Large>
    void for_each_block(Visitor&& visit) const {
        detail::walk_parts(visit, small_, large_);
    }
    void check_invariants() const
        requires has_check_invariants<Small> && has_check_invariants<Large>
    {
        small_.check_invariants();
        large_.check_invariants();
    }

    [[nodiscard]] Small& small_resource() noexcept { return small_; }
    [[nodiscard]] const Small& small_resource() const noexcept { return small_; }
    [[nodiscard]] Large& large_resource() noexcept { return large_; }
    [[nodiscard]] const Large& large_resource() const noexcept { return large_; }

    friend bool operator==(const segregator& a, const segregator& b) { return a.small_ == b.small_ && a.large_ == b.large_; }

    template <class Property>
        requires has_property<Small, Property> && has_property<Large, Property>
    friend constexpr void get_property(const segregator&, Property) noexcept {}

private:
    Small small_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    Large large_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
};

static_assert(resource_with<
              segregator<256, detail::resource_archetype<host_accessible>, detail::resource_archetype<host_accessible, device_accessible>>,
              host_accessible>);
static_assert(!has_property<
              segregator<256, detail::resource_archetype<host_accessible>, detail::resource_archetype<host_accessible, device_accessible>>,
              device_accessible>);
static_assert(!has_release<segregator<256, detail::resource_archetype<>, detail::resource_archetype<>>>);

}  // namespace poolkit
