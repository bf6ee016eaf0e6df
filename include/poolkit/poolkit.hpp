// Everything poolkit offers. The CUDA parts come in when POOLKIT_HAS_CUDA is 1; Thrust's
// (interop/thrust_allocator.hpp) need nvcc and are included on their own.
#pragma once

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/logged.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/per_thread.hpp>
#include <poolkit/adaptor/recorded.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/alignment.hpp>
#include <poolkit/core/any_resource.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/resource_ref.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/interop/option_text.hpp>
#include <poolkit/interop/per_device.hpp>
#include <poolkit/interop/pmr_adaptor.hpp>
#include <poolkit/interop/std_allocator.hpp>
#include <poolkit/observe/fragmentation.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/observe/replay.hpp>
#include <poolkit/observe/snapshot.hpp>
#include <poolkit/observe/trace.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/exact_cache.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/growth.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#if POOLKIT_HAS_CUDA
#  include <poolkit/adaptor/cuda_events.hpp>
#  include <poolkit/interop/cuda_mr_upstream.hpp>
#  include <poolkit/interop/device_buffer.hpp>
#  include <poolkit/interop/device_registry.hpp>
#  include <poolkit/interop/device_uvector.hpp>
#  include <poolkit/upstream/cuda_async_resource.hpp>
#  include <poolkit/upstream/cuda_device_resource.hpp>
#  include <poolkit/upstream/cuda_managed_resource.hpp>
#  include <poolkit/upstream/cuda_pinned_resource.hpp>
#  include <poolkit/upstream/cuda_vmm_resource.hpp>
#endif
