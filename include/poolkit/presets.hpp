// Ready compositions.
//
// caching_allocator<Upstream, Events>: PyTorch's CUDA caching allocator made of blocks —
// stream_ordered lanes of caching_pool (512 B rounding; small requests from 2 MiB chunks; large
// ones from chunks grown as needed; split rules; optional power-of-two divisions and a maximum
// split size), reuse across streams behind events, record_use, release() as empty_cache.
//   caching_device_allocator        over cudaMalloc
//   caching_pinned_host_allocator   over cudaHostAlloc: pinned buffers (~1.2 ms each to get) are
//                                   reused once every stream that used them (record_use) is done
// The synchronized_ forms lock one mutex around every call, for sharing between threads.
// Construct with options: `poolkit::caching_device_allocator pool{{}, {.power2_divisions = 4}};`.
#pragma once

#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/strategy/caching_pool.hpp>

#if POOLKIT_HAS_CUDA
#  include <poolkit/adaptor/cuda_events.hpp>
#  include <poolkit/upstream/cuda_device_resource.hpp>
#  include <poolkit/upstream/cuda_pinned_resource.hpp>
#endif

namespace poolkit {

template <resource Upstream, events_policy Events>
using caching_allocator = stream_ordered<caching_pool<Upstream>, Events>;

#if POOLKIT_HAS_CUDA
using caching_device_allocator = caching_allocator<cuda_device_resource, cuda_events>;
using caching_pinned_host_allocator = caching_allocator<cuda_pinned_resource, cuda_events>;
using synchronized_caching_device_allocator = synchronized<caching_device_allocator>;
using synchronized_caching_pinned_host_allocator = synchronized<caching_pinned_host_allocator>;

static_assert(stream_resource_with<caching_device_allocator, device_accessible>);
static_assert(stream_resource_with<caching_pinned_host_allocator, device_accessible, host_accessible>);
static_assert(cuda::mr::async_resource_with<synchronized_caching_device_allocator, cuda::mr::device_accessible>);
#endif

}  // namespace poolkit
