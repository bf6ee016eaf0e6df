// Walking down a composition: a resource, then what upstream_resource() gives, and so on (a ref
// gives what it refers to). Observation (statistics' reserved figures, memory_summary, snapshot)
// finds what it needs this way, through any stack of adaptors.
#pragma once

#include <poolkit/core/concepts.hpp>

#include <optional>
#include <type_traits>

namespace poolkit {

// The first non-empty find(layer), from `r` itself downwards; empty when no layer has it. `find`
// takes each layer (of whatever type; const when `r` is) and returns one std::optional type for
// all of them. A find that changes the layer it stops at takes a non-const `r`.
template <class R, class Find>
[[nodiscard]] auto find_in_stack(R& r, Find&& find) -> std::remove_cvref_t<decltype(find(r))> {
    if (auto found = find(r)) return found;
    if constexpr (has_upstream<R>) {
        return find_in_stack(r.upstream_resource(), find);
    } else {
        return {};
    }
}

}  // namespace poolkit
