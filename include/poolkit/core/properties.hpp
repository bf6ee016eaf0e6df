// Properties: empty tag types that say where memory can be touched.
//
// A resource claims a property with a hidden friend `get_property(const R&, P) noexcept`, found by
// argument-dependent lookup. With CUDA the tags are CCCL's (cuda::mr::device_accessible,
// cuda::mr::host_accessible) and has_property is cuda::has_property, so poolkit resources and CCCL
// resources understand each other's properties.
#pragma once

#include <poolkit/core/config.hpp>

#if POOLKIT_HAS_CUDA
#  include <cuda/memory_resource>
#endif

namespace poolkit {

#if POOLKIT_HAS_CUDA
using device_accessible = cuda::mr::device_accessible;
using host_accessible = cuda::mr::host_accessible;
#else
// Memory that device code may read and write.
struct device_accessible {};
// Memory that host code may read and write.
struct host_accessible {};
#endif

// R claims property P.
template <class R, class P>
concept has_property = requires(const R& resource, P property) { static_cast<void>(get_property(resource, property)); };

// Gives Derived every listed property. Used by type-erased wrappers that carry a fixed set.
template <class Derived, class... Properties>
struct with_properties;

template <class Derived>
struct with_properties<Derived> {};

template <class Derived, class Property, class... Rest>
struct with_properties<Derived, Property, Rest...> : with_properties<Derived, Rest...> {
    friend constexpr void get_property(const Derived&, Property) noexcept {}
};

// Gives Derived every stateless property that Upstream has. Adaptors that do not change where
// memory lives derive from it. A property with a value_type is not forwarded: CCCL 3.4's
// dynamic_accessibility_property has a default for every resource, which this would make ambiguous.
template <class Derived, class Upstream>
struct forward_properties {
    template <class Property>
        requires has_property<Upstream, Property> && (!requires { typename Property::value_type; })
    friend constexpr void get_property(const Derived&, Property) noexcept {}
};

}  // namespace poolkit
