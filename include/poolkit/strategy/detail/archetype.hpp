// resource_archetype<Properties...>: the least a resource can be, for the static_asserts at the
// end of each strategy header. Its members are declared and never defined: it exists only in
// unevaluated contexts.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/properties.hpp>

#include <cstddef>

namespace poolkit::detail {

template <class... Properties>
struct resource_archetype : with_properties<resource_archetype<Properties...>, Properties...> {
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment);
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept;
    friend bool operator==(const resource_archetype&, const resource_archetype&) noexcept { return true; }
};

}  // namespace poolkit::detail
