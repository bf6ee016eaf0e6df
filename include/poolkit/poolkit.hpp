// Everything poolkit offers. The CUDA upstreams come in when POOLKIT_HAS_CUDA is 1.
#pragma once

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
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#if POOLKIT_HAS_CUDA
#  include <poolkit/upstream/cuda_async_resource.hpp>
#  include <poolkit/upstream/cuda_device_resource.hpp>
#  include <poolkit/upstream/cuda_managed_resource.hpp>
#  include <poolkit/upstream/cuda_pinned_resource.hpp>
#endif
