// Building a block in place: an adaptor or combinator takes std::in_place and the constructor
// arguments of what it wraps, and builds that in its own storage, so that it need not move (a
// cuda_vmm_resource, a synchronized<> cannot).
//   build_from<P>(args...)   P(std::in_place, args...) where P has it, else P(args...). It returns
//                            a prvalue, so P need not be movable.
#pragma once

#include <concepts>
#include <utility>

namespace poolkit {

// P(args...) or P(std::in_place, args...) is well-formed.
template <class P, class... Args>
concept constructible_in_place = std::constructible_from<P, Args...> || std::constructible_from<P, std::in_place_t, Args...>;

template <class P, class... Args>
    requires constructible_in_place<P, Args...>
[[nodiscard]] P build_from(Args&&... args) {
    if constexpr (std::constructible_from<P, std::in_place_t, Args...>) {
        return P(std::in_place, std::forward<Args>(args)...);
    } else {
        return P(std::forward<Args>(args)...);
    }
}

}  // namespace poolkit
