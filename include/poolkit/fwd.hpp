// Forward declarations of poolkit's public types, for headers that only name them.
//
// Every public class and class template is declared here, with the template parameters and
// constraints of its definition and no default arguments (those stay in each block's own
// header). tests/core/fwd.cpp includes this header before poolkit.hpp, so a declaration that
// drifts from its definition fails to compile. Left out: stream_ordered and expandable, whose
// constraints (pool_lanes, events_policy; virtual_memory through a ref) are defined with them, and
// the aliases (stream_ref is cuda::stream_ref with CUDA), which come with core/concepts.hpp below.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>

#include <concepts>
#include <cstddef>
#include <type_traits>

namespace poolkit {

// core
struct assertion_failure;
struct memory_figures;
class out_of_memory;
class cuda_error;
struct chunk_view;
struct block_view;
enum class trace_action : unsigned char;
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
template <class Derived, class Upstream>
class forwarding;
struct allocation_request;
struct deallocation_request;

// upstream
class new_delete_resource;
struct simulated_options;
class simulated_resource;
struct simulated_vmm_options;
class simulated_vmm_resource;
class cuda_device_resource;
struct cuda_pinned_options;
class cuda_pinned_resource;
class cuda_managed_resource;
struct cuda_async_options;
class cuda_async_resource;
struct cuda_vmm_options;
class cuda_vmm_resource;

// strategy
struct growth_policy;
struct best_fit_options;
struct buddy_options;
struct size_classes_options;
struct large_to_upstream;
struct fixed_size_options;
struct monotonic_options;
struct caching_options;
struct expandable_options;
struct exact_cache_options;

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
template <resource Upstream>
class exact_cache;

// adaptor
struct no_options;
template <template <class...> class Lane, class Options>
struct lanes;
struct concurrent_counters;
struct single_thread_counters;
struct statistics_figures;
struct tracked_options;
struct tracked_allocation;
struct oom_event;
struct limited_options;
struct logged_options;
template <class Callback>
struct retry_options;
template <resource Upstream, class Counters>
class counted;
template <resource Upstream>
class tracked;
template <resource Upstream>
class logged;
class history;
struct history_event;
struct history_context;
template <resource Upstream>
class recorded;
template <resource Upstream>
class limited;
template <resource Upstream, class Mutex>
class synchronized;
template <resource Upstream, class Callback>
    requires std::invocable<Callback&, const oom_event&>
class retried_on_oom;
class completed_events;
class host_events;
class cuda_events;

// interop
template <resource R>
class pmr_adaptor;
template <resource R>
class pmr_device_adaptor;
template <class T, resource R>
class std_allocator;
template <class T, stream_resource R>
    requires has_property<R, device_accessible>
class thrust_allocator;
template <class Options>
struct text_option;
#if POOLKIT_HAS_CUDA
template <class R>
    requires detail::cuda_mr_resource_with<R>
class cuda_mr_upstream;
class device_buffer;
template <class T>
    requires std::is_trivially_copyable_v<T>
class device_uvector;
#endif

// observe
struct fragmentation_figures;
struct trace_event;
struct trace;
class trace_error;
class trace_reader;
struct replay_result;
struct ignore_events;

}  // namespace poolkit
