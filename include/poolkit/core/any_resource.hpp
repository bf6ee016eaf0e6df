// any_resource and any_stream_resource: owning, type-erased resources with value semantics.
//
// any_resource<Properties...> holds any copyable resource with all of Properties on the heap;
// copying copies the resource, moving moves the pointer (a moved-from wrapper may only be
// destroyed or assigned to). Each call costs one indirect call. Thread safety and every other
// guarantee are those of the held resource. Equal when they hold equal resources of one type.
#pragma once

#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/resource_ref.hpp>

#include <type_traits>
#include <utility>

namespace poolkit {

namespace detail {
// Ownership shared by any_resource and any_stream_resource.
class owning_handle : public erased_handle {
protected:
    owning_handle() noexcept = default;
    // The requires-clause keeps copies and moves off this constructor (clang-tidy 14 reads only
    // enable_if there).
    template <class R>
        requires(!std::is_base_of_v<owning_handle, std::remove_cvref_t<R>>)
    explicit owning_handle(R&& resource)  // NOLINT(bugprone-forwarding-reference-overload)
        : erased_handle(new std::remove_cvref_t<R>(std::forward<R>(resource)), &resource_table_for<std::remove_cvref_t<R>>) {}

    owning_handle(const owning_handle& other) : erased_handle(other.object_ ? other.table_->clone(other.object_) : nullptr, other.table_) {}
    owning_handle(owning_handle&& other) noexcept : erased_handle(std::exchange(other.object_, nullptr), other.table_) {}
    owning_handle& operator=(const owning_handle& other) {
        if (this != &other) *this = owning_handle(other);
        return *this;
    }
    owning_handle& operator=(owning_handle&& other) noexcept {
        if (this != &other) {
            if (object_) table_->destroy(object_);
            object_ = std::exchange(other.object_, nullptr);
            table_ = other.table_;
        }
        return *this;
    }
    ~owning_handle() {
        if (object_) table_->destroy(object_);
    }

    void* checked_object() const noexcept {
        POOLKIT_ASSERT(object_ != nullptr, "use of a moved-from any_resource");
        return object_;
    }
};

template <class R, class... Properties>
concept ownable = bindable<std::remove_cvref_t<R>, Properties...> && std::copy_constructible<std::remove_cvref_t<R>>;
}  // namespace detail

template <class... Properties>
class any_resource : public detail::owning_handle, public with_properties<any_resource<Properties...>, Properties...> {
public:
    template <class R>
        requires detail::ownable<R, Properties...>
    any_resource(R&& resource)  // NOLINT: implicit, like std::any
        : owning_handle(std::forward<R>(resource)) {}

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        return table_->allocate(checked_object(), bytes, alignment);
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        table_->deallocate(checked_object(), pointer, bytes, alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(any_resource);

    // A template, so that no argument converts implicitly (which would make the concepts recurse).
    template <std::same_as<any_resource> Other>
    friend bool operator==(const any_resource& a, const Other& b) {
        return detail::erased_equal(a.table_, a.object_, b.table_, b.object_);
    }
};

template <class... Properties>
class any_stream_resource : public detail::owning_handle, public with_properties<any_stream_resource<Properties...>, Properties...> {
public:
    template <class R>
        requires detail::ownable<R, Properties...> && stream_resource<std::remove_cvref_t<R>>
    any_stream_resource(R&& resource)  // NOLINT: implicit, like std::any
        : owning_handle(std::forward<R>(resource)) {}

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        return table_->allocate(checked_object(), bytes, alignment);
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        table_->deallocate(checked_object(), pointer, bytes, alignment);
    }
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
        return table_->allocate_async(checked_object(), bytes, alignment, stream);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        table_->deallocate_async(checked_object(), pointer, bytes, alignment, stream);
    }
    POOLKIT_CUDA_MR_MEMBERS(any_stream_resource);

    // A template, so that no argument converts implicitly (which would make the concepts recurse).
    template <std::same_as<any_stream_resource> Other>
    friend bool operator==(const any_stream_resource& a, const Other& b) {
        return detail::erased_equal(a.table_, a.object_, b.table_, b.object_);
    }
};

}  // namespace poolkit
