// cuda_mr_upstream<R>: any CCCL cuda::mr resource (a ref, an any_resource, a resource of its
// own) as a poolkit upstream: `best_fit<cuda_mr_upstream<cuda::mr::resource_ref<device_accessible>>>`.
//
// It calls R in the spelling of the CCCL in use (core/cuda_mr_spelling.hpp): allocate is R's
// allocate_sync (CCCL 3.1 and later) or allocate (3.0); allocate_async, present where R is
// stream-ordered, is R's allocate(stream, ...) or allocate_async. Under CCCL 3.0 R already is a
// poolkit resource and this adds only the indirection. Holds R by value: a CCCL ref is a view,
// so what it refers to must outlive this. Complexity, thread safety, alignment, stream semantics
// and exhaustion are R's; poolkit's rules for 0 bytes and bad alignments hold as far as R keeps
// them. Properties: R's stateless ones. Equal when the R compare equal.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <concepts>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace poolkit {

template <class R>
    requires detail::cuda_mr_resource_with<R>
class cuda_mr_upstream : public forward_properties<cuda_mr_upstream<R>, R> {
public:
    using resource_type = R;

    cuda_mr_upstream()
        requires std::default_initializable<R>
    = default;
    // Implicit, so that a CCCL ref converts where an upstream is expected. Never a copy: CCCL 3.2's
    // refs ask whether this is copyable, which must not ask back whether it converts to them.
    template <class From>
        requires(!std::same_as<std::remove_cvref_t<From>, cuda_mr_upstream> && std::constructible_from<R, From>)
    cuda_mr_upstream(From&& resource) : resource_(std::forward<From>(resource)) {}  // NOLINT: implicit

#if POOLKIT_CUDA_MR_ALLOCATE_SYNC
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) { return resource_.allocate_sync(bytes, alignment); }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        resource_.deallocate_sync(pointer, bytes, alignment);
    }
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires detail::cuda_mr_stream_resource_with<R>
    {
        return resource_.allocate(stream, bytes, alignment);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires detail::cuda_mr_stream_resource_with<R>
    {
        resource_.deallocate(stream, pointer, bytes, alignment);
    }
#else
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) { return resource_.allocate(bytes, alignment); }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        resource_.deallocate(pointer, bytes, alignment);
    }
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires detail::cuda_mr_stream_resource_with<R>
    {
        return resource_.allocate_async(bytes, alignment, stream);
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires detail::cuda_mr_stream_resource_with<R>
    {
        resource_.deallocate_async(pointer, bytes, alignment, stream);
    }
#endif
    POOLKIT_CUDA_MR_MEMBERS(cuda_mr_upstream);

    // The CCCL resource itself.
    [[nodiscard]] R& get() noexcept { return resource_; }
    [[nodiscard]] const R& get() const noexcept { return resource_; }

    friend bool operator==(const cuda_mr_upstream& a, const cuda_mr_upstream& b) { return a.resource_ == b.resource_; }

private:
    R resource_;
};

template <class R>
cuda_mr_upstream(R) -> cuda_mr_upstream<R>;

static_assert(stream_resource_with<cuda_mr_upstream<detail::cuda_mr_stream_resource_ref<device_accessible>>, device_accessible>);
static_assert(resource_with<cuda_mr_upstream<detail::cuda_mr_resource_ref<host_accessible>>, host_accessible>);
static_assert(!stream_resource<cuda_mr_upstream<detail::cuda_mr_resource_ref<host_accessible>>>);
static_assert(
    detail::cuda_mr_stream_resource_with<cuda_mr_upstream<detail::cuda_mr_stream_resource_ref<device_accessible>>, device_accessible>);

}  // namespace poolkit
