// fallback<Primary, Secondary>: serves every request from Primary, and from Secondary when
// Primary is out of memory; deallocate asks Primary whether it owns the block.
//
// Primary must offer owns(); a pointer it does not own goes to Secondary. Complexity: Primary's,
// plus Secondary's after a failure, plus Primary's owns() on every deallocate. Thread safety:
// that of the parts. Alignment: Primary's, else Secondary's. Stream semantics: allocate_async and
// deallocate_async exist when both parts have them. Exhaustion: Primary's std::bad_alloc (so
// out_of_memory) moves the request to Secondary; Secondary's is thrown. std::invalid_argument for
// a bad alignment is never retried. Each optional capability — try_allocate, release, owns,
// check_invariants, the for_each_block walk (chunks of both parts in address order) — and each
// property exists only when both parts have it. Equal when both parts are equal.
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
#include <new>
#include <utility>

namespace poolkit {

template <resource Primary, resource Secondary>
    requires has_owns<Primary>
class fallback {
public:
    fallback()
        requires std::default_initializable<Primary> && std::default_initializable<Secondary>
    = default;
    fallback(Primary primary, Secondary secondary) : primary_(std::move(primary)), secondary_(std::move(secondary)) {}
    // Both parts built in place over `upstream`, with their default options (as
    // lanes<fallback_over> makes a stream_ordered's pool).
    template <class N>
        requires constructible_in_place<Primary, const N&> && constructible_in_place<Secondary, const N&>
    fallback(std::in_place_t, const N& upstream) : primary_(build_from<Primary>(upstream)), secondary_(build_from<Secondary>(upstream)) {}

    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if constexpr (has_try_allocate<Primary>) {
            if (void* pointer = primary_.try_allocate(bytes, alignment)) return pointer;
        } else {
            try {
                return primary_.allocate(bytes, alignment);
            } catch (const std::bad_alloc&) {
            }
        }
        return secondary_.allocate(bytes, alignment);
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        if (primary_.owns(pointer)) {
            primary_.deallocate(pointer, bytes, alignment);
        } else {
            secondary_.deallocate(pointer, bytes, alignment);
        }
    }

    [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<Primary> && stream_resource<Secondary>
    {
        validate_alignment(alignment);
        try {
            return primary_.allocate_async(bytes, alignment, stream);
        } catch (const std::bad_alloc&) {
        }
        return secondary_.allocate_async(bytes, alignment, stream);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<Primary> && stream_resource<Secondary>
    {
        if (pointer == nullptr) return;
        if (primary_.owns(pointer)) {
            primary_.deallocate_async(pointer, bytes, alignment, stream);
        } else {
            secondary_.deallocate_async(pointer, bytes, alignment, stream);
        }
    }
    POOLKIT_CUDA_MR_MEMBERS(fallback);

    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate<Primary> && has_try_allocate<Secondary>
    {
        if (void* pointer = primary_.try_allocate(bytes, alignment)) return pointer;
        return secondary_.try_allocate(bytes, alignment);
    }
    // From what either part holds; never grows.
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate_cached<Primary> && has_try_allocate_cached<Secondary>
    {
        if (void* pointer = primary_.try_allocate_cached(bytes, alignment)) return pointer;
        return secondary_.try_allocate_cached(bytes, alignment);
    }
    void release()
        requires has_release<Primary> && has_release<Secondary>
    {
        primary_.release();
        secondary_.release();
    }
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<Secondary>
    {
        return primary_.owns(pointer) || secondary_.owns(pointer);
    }
    // The walk of walk.hpp over both parts, chunks of both in address order.
    template <class Visitor>
        requires walkable<Primary> && walkable<Secondary>
    void for_each_block(Visitor&& visit) const {
        detail::walk_parts(visit, primary_, secondary_);
    }
    void check_invariants() const
        requires has_check_invariants<Primary> && has_check_invariants<Secondary>
    {
        primary_.check_invariants();
        secondary_.check_invariants();
    }

    [[nodiscard]] Primary& primary_resource() noexcept { return primary_; }
    [[nodiscard]] const Primary& primary_resource() const noexcept { return primary_; }
    [[nodiscard]] Secondary& secondary_resource() noexcept { return secondary_; }
    [[nodiscard]] const Secondary& secondary_resource() const noexcept { return secondary_; }

    friend bool operator==(const fallback& a, const fallback& b) { return a.primary_ == b.primary_ && a.secondary_ == b.secondary_; }

    template <class Property>
        requires has_property<Primary, Property> && has_property<Secondary, Property>
    friend constexpr void get_property(const fallback&, Property) noexcept {}

private:
    Primary primary_;  // not [[no_unique_address]]: built in place from a prvalue (build_from)
    Secondary secondary_;
};

namespace detail {
template <class... Properties>
struct owning_archetype : resource_archetype<Properties...> {
    bool owns(const void* pointer) const;
};
}  // namespace detail

static_assert(
    resource_with<fallback<detail::owning_archetype<host_accessible>, detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(!has_owns<fallback<detail::owning_archetype<>, detail::resource_archetype<>>>);
static_assert(has_owns<fallback<detail::owning_archetype<>, detail::owning_archetype<>>>);

}  // namespace poolkit
