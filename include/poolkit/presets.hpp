// Ready compositions.
//
// caching_resource<Upstream, Events>: PyTorch's CUDA caching allocator made of blocks —
// stream_ordered over one caching_pool that every stream shares (512 B rounding; small requests
// from 2 MiB chunks; large ones from chunks grown as needed; split rules; optional power-of-two
// divisions and a maximum split size), reuse across streams behind events, record_use, release()
// as empty_cache.
//   caching_device_resource     over cudaMalloc
//   caching_pinned_resource     over cudaHostAlloc: pinned buffers (~1.2 ms each to get) are
//                               reused once every stream that used them (record_use) is done
// expandable_resource<VirtualMemory, Events>: stream_ordered over one expandable pool of one
// virtual memory (PyTorch's expandable_segments made of blocks): best fit over virtual address
// space whose granules are mapped as blocks need them and kept mapped for reuse, as PyTorch's are;
// record_use; release() as empty_cache unmaps every cached granule (options.peak_slack makes the
// mapped memory follow the live bytes instead: strategy/expandable_options.hpp).
//   expandable_device_resource  over cuda_vmm_resource (CUDA's virtual memory management)
// The synchronized_ forms lock one mutex around every call, for sharing between threads; the
// per_thread_ forms put a cache per thread in front of that (adaptor/per_thread.hpp), for many
// threads that each keep their streams.
// Construct with options: `poolkit::caching_device_resource pool{{}, {.power2_divisions = 4}};`,
// `poolkit::expandable_device_resource pool{std::in_place, {.peak_slack = 0.05}, poolkit::cuda_vmm_options{}};` (in place:
// the preset's own options first, then the upstream's arguments).
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
using caching_resource = stream_ordered<Upstream, lanes<caching_pool>, Events>;

template <class VirtualMemory, events_policy Events>
using expandable_resource = stream_ordered<VirtualMemory, lanes<expandable>, Events>;

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
template <resource Upstream, events_policy Events>
using caching_allocator [[deprecated("poolkit: caching_allocator is now caching_resource (docs/concepts.md, Names)")]] =
    caching_resource<Upstream, Events>;
template <class VirtualMemory, events_policy Events>
using expandable_allocator [[deprecated("poolkit: expandable_allocator is now expandable_resource (docs/concepts.md, Names)")]] =
    expandable_resource<VirtualMemory, Events>;

#if POOLKIT_HAS_CUDA
using caching_device_resource = caching_resource<cuda_device_resource, cuda_events>;
using caching_pinned_resource = caching_resource<cuda_pinned_resource, cuda_events>;
using synchronized_caching_device_resource = synchronized<caching_device_resource>;
using synchronized_caching_pinned_resource = synchronized<caching_pinned_resource>;
using expandable_device_resource = expandable_resource<cuda_vmm_resource, cuda_events>;
using synchronized_expandable_device_resource = synchronized<expandable_device_resource>;
using per_thread_caching_device_resource = per_thread<synchronized_caching_device_resource, cuda_events>;

// The names before the naming scheme of docs/concepts.md (Names), kept for one release.
using caching_device_allocator
    [[deprecated("poolkit: caching_device_allocator is now caching_device_resource (docs/concepts.md, Names)")]] = caching_device_resource;
using caching_pinned_host_allocator
    [[deprecated("poolkit: caching_pinned_host_allocator is now caching_pinned_resource (docs/concepts.md, Names)")]] =
        caching_pinned_resource;
using synchronized_caching_device_allocator
    [[deprecated("poolkit: synchronized_caching_device_allocator is now synchronized_caching_device_resource (docs/concepts.md, Names)")]] =
        synchronized_caching_device_resource;
using synchronized_caching_pinned_host_allocator [[deprecated(
    "poolkit: synchronized_caching_pinned_host_allocator is now synchronized_caching_pinned_resource (docs/concepts.md, Names)")]] =
    synchronized_caching_pinned_resource;
using expandable_device_allocator
    [[deprecated("poolkit: expandable_device_allocator is now expandable_device_resource (docs/concepts.md, Names)")]] =
        expandable_device_resource;
using synchronized_expandable_device_allocator [[deprecated(
    "poolkit: synchronized_expandable_device_allocator is now synchronized_expandable_device_resource (docs/concepts.md, Names)")]] =
    synchronized_expandable_device_resource;
using per_thread_caching_device_allocator
    [[deprecated("poolkit: per_thread_caching_device_allocator is now per_thread_caching_device_resource (docs/concepts.md, Names)")]] =
        per_thread_caching_device_resource;

static_assert(stream_resource_with<caching_device_resource, device_accessible>);
static_assert(stream_resource_with<caching_pinned_resource, device_accessible, host_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<synchronized_caching_device_resource, cuda::mr::device_accessible>);
static_assert(stream_resource_with<expandable_device_resource, device_accessible> && has_record_use<expandable_device_resource>);
static_assert(detail::cuda_mr_stream_resource_with<synchronized_expandable_device_resource, cuda::mr::device_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<per_thread_caching_device_resource, cuda::mr::device_accessible> &&
              has_record_use<per_thread_caching_device_resource>);
#endif

}  // namespace poolkit
