// std_allocator<T, R>: a standard Allocator that takes its memory from a poolkit resource.
//
// `std::vector<float, poolkit::std_allocator<float, pool>> v{poolkit::std_allocator<float, pool>{my_pool}};`
// It refers to the resource (a pointer: cheap to copy); the resource must outlive every container
// and copy. Rebinds to any U over the same resource; two allocators are equal when their resources
// are, so memory from one may be freed through the other. It propagates on copy, move and swap:
// a container keeps its elements' resource with it. allocate(n) aligns to alignof(T) and throws
// std::bad_array_new_length when n * sizeof(T) does not fit in size_t, otherwise what R throws.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/properties.hpp>

#include <cstddef>
#include <limits>
#include <memory>
#include <new>
#include <type_traits>

namespace poolkit {

template <class T, resource R>
class std_allocator {
public:
    using value_type = T;
    using resource_type = R;
    using propagate_on_container_copy_assignment = std::true_type;
    using propagate_on_container_move_assignment = std::true_type;
    using propagate_on_container_swap = std::true_type;
    using is_always_equal = std::false_type;

    template <class U>
    struct rebind {
        using other = std_allocator<U, R>;
    };

    explicit std_allocator(R& resource) noexcept : resource_(std::addressof(resource)) {}
    template <class U>
    std_allocator(const std_allocator<U, R>& other) noexcept : resource_(other.resource_pointer()) {}  // NOLINT: implicit rebind

    [[nodiscard]] T* allocate(std::size_t count) {
        if (count > std::numeric_limits<std::size_t>::max() / sizeof(T)) throw std::bad_array_new_length();
        return static_cast<T*>(resource_->allocate(count == 0 ? 1 : count * sizeof(T), alignof(T)));
    }
    void deallocate(T* pointer, std::size_t count) noexcept {
        resource_->deallocate(pointer, count == 0 ? 1 : count * sizeof(T), alignof(T));
    }

    [[nodiscard]] R& resource() const noexcept { return *resource_; }
    [[nodiscard]] R* resource_pointer() const noexcept { return resource_; }

    template <class U>
    friend bool operator==(const std_allocator& a, const std_allocator<U, R>& b) {
        return a.resource_ == b.resource_pointer() || *a.resource_ == *b.resource_pointer();
    }

private:
    R* resource_;
};

}  // namespace poolkit
