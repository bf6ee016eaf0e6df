// CCCL's names for poolkit's two concepts in the CCCL the tests are built with, read from
// CCCL_VERSION here rather than from poolkit, so each build checks the spelling of its own CCCL:
//                                  CCCL 3.0                          CCCL 3.1 and later
//   cuda_mr_resource_with          cuda::mr::resource_with           cuda::mr::synchronous_resource_with
//   cuda_mr_stream_resource_with   cuda::mr::async_resource_with     cuda::mr::resource_with
//   cuda_mr_resource_ref           cuda::mr::resource_ref            cuda::mr::synchronous_resource_ref
//   cuda_mr_stream_resource_ref    cuda::mr::async_resource_ref      cuda::mr::resource_ref
//   cuda_mr_allocate(r, ...)       r.allocate(bytes, alignment)      r.allocate_sync(bytes, alignment)
//   cuda_mr_allocate_async(r, ...) r.allocate_async(bytes, alignment, stream)  r.allocate(stream, bytes, alignment)
// and the deallocate forms alike. CCCL 3.2 and later bind their refs only to copyable resources
// (their type erasure copies), so a pool is bound through a poolkit::ref to it from 3.2 on:
//   cuda_mr_referable<R>           R&                                poolkit::ref<R> (3.2 and later)
// Only with CUDA.
#pragma once

#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/ref.hpp>

#include <cuda/memory_resource>
#include <cuda/stream_ref>
#include <cuda/version>

#include <cstddef>

namespace poolkit::test {

#if CCCL_VERSION >= 3001000
inline constexpr bool cccl_allocate_sync = true;

template <class R, class... P>
concept cuda_mr_resource_with = cuda::mr::synchronous_resource_with<R, P...>;
template <class R, class... P>
concept cuda_mr_stream_resource_with = cuda::mr::resource_with<R, P...>;
template <class... P>
using cuda_mr_resource_ref = cuda::mr::synchronous_resource_ref<P...>;
template <class... P>
using cuda_mr_stream_resource_ref = cuda::mr::resource_ref<P...>;

template <class R>
void* cuda_mr_allocate(R& r, std::size_t bytes, std::size_t alignment) {
    return r.allocate_sync(bytes, alignment);
}
template <class R>
void cuda_mr_deallocate(R& r, void* pointer, std::size_t bytes, std::size_t alignment) {
    r.deallocate_sync(pointer, bytes, alignment);
}
template <class R>
void* cuda_mr_allocate_async(R& r, std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) {
    return r.allocate(stream, bytes, alignment);
}
template <class R>
void cuda_mr_deallocate_async(R& r, void* pointer, std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) {
    r.deallocate(stream, pointer, bytes, alignment);
}
#else
inline constexpr bool cccl_allocate_sync = false;

template <class R, class... P>
concept cuda_mr_resource_with = cuda::mr::resource_with<R, P...>;
template <class R, class... P>
concept cuda_mr_stream_resource_with = cuda::mr::async_resource_with<R, P...>;
template <class... P>
using cuda_mr_resource_ref = cuda::mr::resource_ref<P...>;
template <class... P>
using cuda_mr_stream_resource_ref = cuda::mr::async_resource_ref<P...>;

template <class R>
void* cuda_mr_allocate(R& r, std::size_t bytes, std::size_t alignment) {
    return r.allocate(bytes, alignment);
}
template <class R>
void cuda_mr_deallocate(R& r, void* pointer, std::size_t bytes, std::size_t alignment) {
    r.deallocate(pointer, bytes, alignment);
}
template <class R>
void* cuda_mr_allocate_async(R& r, std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) {
    return r.allocate_async(bytes, alignment, stream);
}
template <class R>
void cuda_mr_deallocate_async(R& r, void* pointer, std::size_t bytes, std::size_t alignment, cuda::stream_ref stream) {
    r.deallocate_async(pointer, bytes, alignment, stream);
}
#endif

#if CCCL_VERSION >= 3002000
template <class R>
using cuda_mr_referable = ref<R>;
#else
template <class R>
using cuda_mr_referable = R&;
#endif

// poolkit reads the same version.
static_assert(cccl_allocate_sync == static_cast<bool>(POOLKIT_CUDA_MR_ALLOCATE_SYNC));

}  // namespace poolkit::test
