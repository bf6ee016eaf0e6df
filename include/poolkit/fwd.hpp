// Forward declarations of poolkit's public types, for headers that only name them.
#pragma once

#include <poolkit/core/concepts.hpp>

#include <cstddef>

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

struct memory_figures;
struct growth_policy;
struct best_fit_options;
struct buddy_options;
struct size_classes_options;
struct large_to_upstream;
struct fixed_size_options;
struct monotonic_options;
struct caching_options;
struct cuda_pinned_options;
struct cuda_async_options;
struct simulated_vmm_options;
struct cuda_vmm_options;

// Defaults live in each block's own header; these declarations name none.
template <resource Upstream>
class best_fit;
template <resource Upstream>
class buddy;
template <resource Upstream, class Large>
class size_classes;
template <resource Upstream>
class fixed_size;
template <resource Upstream>
class monotonic;
template <std::size_t Threshold, resource Small, resource Large>
class segregator;
template <resource Primary, resource Secondary>
    requires has_owns<Primary>
class fallback;
template <resource Upstream>
class caching_pool;

template <resource Upstream, class Counters>
class statistics;
template <resource Upstream>
class tracking;
template <resource Upstream>
class logging;
template <resource Upstream>
class limiting;
template <resource Upstream, class Mutex>
class synchronized;

class host_events;
class cuda_events;

class new_delete_resource;
struct simulated_options;
class simulated_resource;
class simulated_vmm_resource;
class cuda_device_resource;
class cuda_pinned_resource;
class cuda_managed_resource;
class cuda_async_resource;
class cuda_vmm_resource;

}  // namespace poolkit
