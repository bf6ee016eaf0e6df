// The function tables behind resource_ref and any_resource.
#pragma once

#include <poolkit/core/concepts.hpp>

#include <cstddef>
#include <new>
#include <type_traits>

namespace poolkit::detail {

// Calls shared by every erased resource. `same_type` tells whether two erased objects hold the
// same dynamic type (tables are unique per type), so equality can compare the objects themselves.
struct resource_table {
    void* (*allocate)(void* object, std::size_t bytes, std::size_t alignment);
    void (*deallocate)(void* object, void* pointer, std::size_t bytes, std::size_t alignment) noexcept;
    bool (*equal)(const void* object, const void* other);
    // Only for stream resources; null otherwise.
    void* (*allocate_async)(void* object, std::size_t bytes, std::size_t alignment, stream_ref stream);
    void (*deallocate_async)(void* object, void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept;
    // Only for owning wrappers.
    void* (*clone)(const void* object);
    void (*destroy)(void* object) noexcept;
};

// A copy of the resource at `object`, on the heap; std::bad_alloc (or R's copy's error) reaches the
// copy of the handle.
template <class R>
void* clone_resource(const void* object) {
    return new R(*static_cast<const R*>(object));
}

template <class R>
constexpr resource_table make_resource_table() noexcept {
    resource_table table{
        [](void* object, std::size_t bytes, std::size_t alignment) -> void* { return static_cast<R*>(object)->allocate(bytes, alignment); },
        [](void* object, void* pointer, std::size_t bytes, std::size_t alignment) noexcept {
            static_cast<R*>(object)->deallocate(pointer, bytes, alignment);
        },
        [](const void* object, const void* other) -> bool { return *static_cast<const R*>(object) == *static_cast<const R*>(other); },
        nullptr,
        nullptr,
        nullptr,
        [](void* object) noexcept { delete static_cast<R*>(object); },
    };
    if constexpr (stream_resource<R>) {
        table.allocate_async = [](void* object, std::size_t bytes, std::size_t alignment, stream_ref stream) -> void* {
            return static_cast<R*>(object)->allocate_async(bytes, alignment, stream);
        };
        table.deallocate_async = [](void* object, void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
            static_cast<R*>(object)->deallocate_async(pointer, bytes, alignment, stream);
        };
    }
    if constexpr (std::is_copy_constructible_v<R>) {
        table.clone = &clone_resource<R>;
    }
    return table;
}

// One table per type, shared by every translation unit (inline variable).
template <class R>
inline constexpr resource_table resource_table_for = make_resource_table<R>();

inline bool erased_equal(const resource_table* table, const void* object, const resource_table* other_table, const void* other) {
    if (object == other) return true;
    return table == other_table && table->equal(object, other);
}

}  // namespace poolkit::detail
