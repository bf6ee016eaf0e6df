// Which spelling of CCCL's cuda::mr concepts the CCCL in use has, and the members that give a
// poolkit resource the newer one.
//
// CCCL 3.0 spells the concepts as poolkit does: allocate(bytes, alignment) and
// allocate_async(bytes, alignment, stream). CCCL 3.1 renamed them: allocate_sync(bytes, alignment)
// for the first and allocate(stream, bytes, alignment) for the second (deallocate alike), and
// the refs with them (see docs/concepts.md). POOLKIT_CUDA_MR_ALLOCATE_SYNC says which applies:
// 1 when CCCL_VERSION (<cuda/version>) is 3.1.0 or later, else 0 (CCCL 3.0, or no CUDA).
//
// POOLKIT_CUDA_MR_MEMBERS(Self); written in a class body then adds
//   allocate_sync(bytes, alignment)                    -> Self's allocate(bytes, alignment)
//   deallocate_sync(p, bytes, alignment)               -> Self's deallocate(p, bytes, alignment)
//   allocate(stream, bytes, alignment)                 -> Self's allocate_async(bytes, alignment, stream)
//   deallocate(stream, p, bytes, alignment)            -> Self's deallocate_async(p, bytes, alignment, stream)
// the last two only where Self has allocate_async and deallocate_async; under CCCL 3.0 and
// without CUDA it adds nothing. Self is the class itself, or the derived class for a CRTP base. The stream forms are
// overloads of allocate and deallocate: a class that declares its own allocate or deallocate
// hides those of its bases, so it writes the macro itself. No call is ambiguous: the stream forms
// take one argument more than poolkit's, none of them defaulted.
#pragma once

#include <poolkit/core/config.hpp>
#include <poolkit/core/stream_ref.hpp>

#include <concepts>
#include <cstddef>

#if POOLKIT_HAS_CUDA
#  include <cuda/memory_resource>
#  include <cuda/version>
#endif

#if POOLKIT_HAS_CUDA && defined(CCCL_VERSION) && CCCL_VERSION >= 3001000
#  define POOLKIT_CUDA_MR_ALLOCATE_SYNC 1
#else
#  define POOLKIT_CUDA_MR_ALLOCATE_SYNC 0
#endif

namespace poolkit::detail {

// Only allocate_async, not stream_resource: that would ask for allocate(bytes, alignment) while
// the overload set of allocate is being formed.
template <class R>
concept has_allocate_async = requires(R& r, void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) {
    { r.allocate_async(bytes, alignment, stream) } -> std::same_as<void*>;
    { r.deallocate_async(p, bytes, alignment, stream) } -> std::same_as<void>;
};

#if POOLKIT_HAS_CUDA
// CCCL's concepts and refs for poolkit's resource and stream_resource, in the CCCL in use.
#  if POOLKIT_CUDA_MR_ALLOCATE_SYNC
template <class R, class... Properties>
concept cuda_mr_resource_with = cuda::mr::synchronous_resource_with<R, Properties...>;
template <class R, class... Properties>
concept cuda_mr_stream_resource_with = cuda::mr::resource_with<R, Properties...>;
template <class... Properties>
using cuda_mr_resource_ref = cuda::mr::synchronous_resource_ref<Properties...>;
template <class... Properties>
using cuda_mr_stream_resource_ref = cuda::mr::resource_ref<Properties...>;
#  else
template <class R, class... Properties>
concept cuda_mr_resource_with = cuda::mr::resource_with<R, Properties...>;
template <class R, class... Properties>
concept cuda_mr_stream_resource_with = cuda::mr::async_resource_with<R, Properties...>;
template <class... Properties>
using cuda_mr_resource_ref = cuda::mr::resource_ref<Properties...>;
template <class... Properties>
using cuda_mr_stream_resource_ref = cuda::mr::async_resource_ref<Properties...>;
#  endif
#endif

}  // namespace poolkit::detail

#if POOLKIT_CUDA_MR_ALLOCATE_SYNC
#  define POOLKIT_CUDA_MR_MEMBERS(...)                                                                                  \
      void* allocate_sync(std::size_t bytes, std::size_t alignment) {                                                   \
          return static_cast<__VA_ARGS__&>(*this).allocate(bytes, alignment);                                           \
      }                                                                                                                 \
      void deallocate_sync(void* pointer, std::size_t bytes, std::size_t alignment) noexcept {                          \
          static_cast<__VA_ARGS__&>(*this).deallocate(pointer, bytes, alignment);                                       \
      }                                                                                                                 \
      template <class PoolkitSelf = __VA_ARGS__>                                                                        \
          requires ::poolkit::detail::has_allocate_async<PoolkitSelf>                                                   \
      void* allocate(::poolkit::stream_ref stream, std::size_t bytes, std::size_t alignment) {                          \
          return static_cast<PoolkitSelf&>(*this).allocate_async(bytes, alignment, stream);                             \
      }                                                                                                                 \
      template <class PoolkitSelf = __VA_ARGS__>                                                                        \
          requires ::poolkit::detail::has_allocate_async<PoolkitSelf>                                                   \
      void deallocate(::poolkit::stream_ref stream, void* pointer, std::size_t bytes, std::size_t alignment) noexcept { \
          static_cast<PoolkitSelf&>(*this).deallocate_async(pointer, bytes, alignment, stream);                         \
      }                                                                                                                 \
      static_assert(true)
#else
#  define POOLKIT_CUDA_MR_MEMBERS(...) static_assert(true)
#endif
