// Forward declarations of poolkit's public types, for headers that only name them.
#pragma once

#include <poolkit/core/concepts.hpp>

namespace poolkit {

class out_of_memory;
class cuda_error;

template <resource R>
class ref;
template <class... Properties>
class resource_ref;
template <class... Properties>
class stream_resource_ref;
template <class... Properties>
class any_resource;
template <class... Properties>
class any_stream_resource;

class new_delete_resource;
struct simulated_options;
class simulated_resource;
class cuda_device_resource;
struct cuda_pinned_options;
class cuda_pinned_resource;
class cuda_managed_resource;
struct cuda_async_options;
class cuda_async_resource;

}  // namespace poolkit
