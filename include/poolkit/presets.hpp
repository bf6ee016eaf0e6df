// Ready compositions.
//
// caching_allocator<Upstream, Events>: PyTorch's CUDA caching allocator made of blocks —
// stream_ordered over one caching_pool that every stream shares (512 B rounding; small requests
// from 2 MiB chunks; large ones from chunks grown as needed; split rules; optional power-of-two
// divisions and a maximum split size), reuse across streams behind events, record_use, release()
// as empty_cache.
//   caching_device_allocator        over cudaMalloc
//   caching_pinned_host_allocator   over cudaHostAlloc: pinned buffers (~1.2 ms each to get) are
//                                   reused once every stream that used them (record_use) is done
// expandable_allocator<VirtualMemory, Events>: stream_ordered over one expandable pool of one
// virtual memory (PyTorch's expandable_segments made of blocks): best fit over virtual address
// space whose granules are mapped only while used, so the device memory it holds follows the live
// bytes; record_use; release() as empty_cache unmaps every cached granule.
//   expandable_device_allocator     over cuda_vmm_resource (CUDA's virtual memory management)
// The synchronized_ forms lock one mutex around every call, for sharing between threads; the
// per_thread_ forms put a cache per thread in front of that (adaptor/per_thread.hpp), for many
// threads that each keep their streams.
// Construct with options: `poolkit::caching_device_allocator pool{{}, {.power2_divisions = 4}};`,
// `poolkit::expandable_device_allocator pool{std::in_place, poolkit::cuda_vmm_options{}, {.cache_fraction = 0.05}};`.
#pragma once

#include <poolkit/adaptor/per_thread.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/expandable.hpp>

#if POOLKIT_HAS_CUDA
#  include <poolkit/adaptor/cuda_events.hpp>
#  include <poolkit/upstream/cuda_device_resource.hpp>
#  include <poolkit/upstream/cuda_pinned_resource.hpp>
#  include <poolkit/upstream/cuda_vmm_resource.hpp>
#endif

namespace poolkit {

template <resource Upstream, events_policy Events>
using caching_allocator = stream_ordered<Upstream, lanes<caching_pool>, Events>;

template <class VirtualMemory, events_policy Events>
using expandable_allocator = stream_ordered<VirtualMemory, lanes<expandable>, Events>;

#if POOLKIT_HAS_CUDA
using caching_device_allocator = caching_allocator<cuda_device_resource, cuda_events>;
using caching_pinned_host_allocator = caching_allocator<cuda_pinned_resource, cuda_events>;
using synchronized_caching_device_allocator = synchronized<caching_device_allocator>;
using synchronized_caching_pinned_host_allocator = synchronized<caching_pinned_host_allocator>;
using expandable_device_allocator = expandable_allocator<cuda_vmm_resource, cuda_events>;
using synchronized_expandable_device_allocator = synchronized<expandable_device_allocator>;
using per_thread_caching_device_allocator = per_thread<synchronized_caching_device_allocator, cuda_events>;

static_assert(stream_resource_with<caching_device_allocator, device_accessible>);
static_assert(stream_resource_with<caching_pinned_host_allocator, device_accessible, host_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<synchronized_caching_device_allocator, cuda::mr::device_accessible>);
static_assert(stream_resource_with<expandable_device_allocator, device_accessible> && has_record_use<expandable_device_allocator>);
static_assert(detail::cuda_mr_stream_resource_with<synchronized_expandable_device_allocator, cuda::mr::device_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<per_thread_caching_device_allocator, cuda::mr::device_accessible> &&
              has_record_use<per_thread_caching_device_allocator>);
#endif

}  // namespace poolkit
