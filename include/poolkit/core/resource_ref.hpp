// resource_ref and stream_resource_ref: non-owning, type-erased references to a resource, for
// compositions chosen at run time.
//
// resource_ref<Properties...> binds to any resource that has all of Properties and then has
// exactly those properties itself. Two pointers, trivially copyable; each call costs one
// indirect call. Thread safety and every guarantee are those of the referenced resource, which
// must outlive the reference. Equal when they reference equal resources of the same type.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/erasure.hpp>

#include <memory>
#include <type_traits>

namespace poolkit {

template <class... Properties>
class resource_ref;
template <class... Properties>
class stream_resource_ref;
template <class... Properties>
class any_resource;
template <class... Properties>
class any_stream_resource;

namespace detail {
template <class T>
inline constexpr bool is_erased = false;
template <class... P>
inline constexpr bool is_erased<resource_ref<P...>> = true;
template <class... P>
inline constexpr bool is_erased<stream_resource_ref<P...>> = true;
template <class... P>
inline constexpr bool is_erased<any_resource<P...>> = true;
template <class... P>
inline constexpr bool is_erased<any_stream_resource<P...>> = true;

// Storage shared by the erased wrappers: the object and its table. Conversions between wrappers
// copy these two pointers instead of wrapping a wrapper.
struct erased_access;

class erased_handle {
protected:
    constexpr erased_handle() noexcept = default;
    constexpr erased_handle(void* object, const resource_table* table) noexcept : object_(object), table_(table) {}

    void* object_ = nullptr;
    const resource_table* table_ = nullptr;

    friend struct erased_access;
};

struct erased_access {
    static void* object(const erased_handle& handle) noexcept { return handle.object_; }
    static const resource_table* table(const erased_handle& handle) noexcept { return handle.table_; }
};

template <class R, class... Properties>
concept bindable = !is_erased<std::remove_cv_t<R>> && resource_with<R, Properties...>;

template <class Erased, class... Properties>
concept erased_with = is_erased<std::remove_cv_t<Erased>> && resource_with<Erased, Properties...>;
}  // namespace detail

template <class... Properties>
class resource_ref : public detail::erased_handle, public with_properties<resource_ref<Properties...>, Properties...> {
public:
    template <class R>
        requires detail::bindable<R, Properties...>
    resource_ref(R& resource) noexcept  // NOLINT: implicit, like a reference
        : erased_handle(std::addressof(resource), &detail::resource_table_for<R>) {}

    // From another erased wrapper with at least these properties; refers to the same object.
    template <class Erased>
        requires detail::erased_with<Erased, Properties...>
    resource_ref(Erased& other) noexcept  // NOLINT: implicit
        : erased_handle(detail::erased_access::object(other), detail::erased_access::table(other)) {}

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) { return table_->allocate(object_, bytes, alignment); }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        table_->deallocate(object_, pointer, bytes, alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(resource_ref);

    // A template, so that no argument converts implicitly (which would make the concepts recurse).
    template <std::same_as<resource_ref> Other>
    friend bool operator==(const resource_ref& a, const Other& b) {
        return detail::erased_equal(a.table_, a.object_, b.table_, b.object_);
    }
};

template <class... Properties>
class stream_resource_ref : public detail::erased_handle, public with_properties<stream_resource_ref<Properties...>, Properties...> {
public:
    template <class R>
        requires detail::bindable<R, Properties...> && stream_resource<R>
    stream_resource_ref(R& resource) noexcept  // NOLINT: implicit, like a reference
        : erased_handle(std::addressof(resource), &detail::resource_table_for<R>) {}

    template <class Erased>
        requires detail::erased_with<Erased, Properties...> && stream_resource<Erased>
    stream_resource_ref(Erased& other) noexcept  // NOLINT: implicit
        : erased_handle(detail::erased_access::object(other), detail::erased_access::table(other)) {}

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) { return table_->allocate(object_, bytes, alignment); }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        table_->deallocate(object_, pointer, bytes, alignment);
    }
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
        return table_->allocate_async(object_, bytes, alignment, stream);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        table_->deallocate_async(object_, pointer, bytes, alignment, stream);
    }
    POOLKIT_CUDA_MR_MEMBERS(stream_resource_ref);

    // A template, so that no argument converts implicitly (which would make the concepts recurse).
    template <std::same_as<stream_resource_ref> Other>
    friend bool operator==(const stream_resource_ref& a, const Other& b) {
        return detail::erased_equal(a.table_, a.object_, b.table_, b.object_);
    }
};

}  // namespace poolkit
