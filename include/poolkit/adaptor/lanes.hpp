// How stream_ordered makes its pool (and each CUDA graph's) over the upstream it shares: a lane
// policy names the pool type over a given upstream, its options, and makes one.
//
//   lanes<Lane>              Lane<U> over upstream U, with Lane<U>'s own options_type where it
//                            is built from (U, options) (lanes<best_fit>: best_fit_options), else
//                            from U alone (an adaptor over a strategy: both with defaults).
//   lanes<Lane, Options>     the same with `Options` (a stack's innermost strategy's, say).
//                            Lane<U> is built by core/in_place.hpp's build_from (in place: it
//                            need not move); Lane's other parameters take their defaults. A stack,
//                            or a template with a value parameter, is an alias template:
//                              template <class U> using counted_best_fit = counted<best_fit<U>>;
//                              stream_ordered<cuda_device_resource, lanes<counted_best_fit, best_fit_options>> pool;
//                            A combinator builds each part over the same upstream
//                            (segregator(std::in_place, upstream)).
//   lane_policy<L, U>        what stream_ordered asks of a policy: L::pool_type<U>,
//                            L::options_type<U> (default-constructible and copyable) and
//                            L::make(U, options) returning a pool_type<U> (a prvalue). A policy of
//                            one's own builds parts with other options, or over other upstreams.
#pragma once

#include <poolkit/core/in_place.hpp>

#include <concepts>
#include <type_traits>
#include <utility>

namespace poolkit {

// Options of a lane built from its upstream alone.
struct no_options {
    friend constexpr bool operator==(no_options, no_options) noexcept = default;
};

namespace detail {
struct own_options {};  // lanes<Lane>: Lane<U>::options_type, or no_options

// The options P is built with over U: P::options_type where P(U, options) is well-formed (in
// place), else none.
template <class P, class U>
struct options_of {
    using type = no_options;
};
template <class P, class U>
    requires requires { typename P::options_type; } && constructible_in_place<P, U, const typename P::options_type&>
struct options_of<P, U> {
    using type = typename P::options_type;
};
}  // namespace detail

template <template <class...> class Lane, class Options = detail::own_options>
struct lanes {
    template <class U>
    using pool_type = Lane<U>;
    template <class U>
    using options_type =
        std::conditional_t<std::same_as<Options, detail::own_options>, typename detail::options_of<Lane<U>, U>::type, Options>;

    template <class U>
        requires(std::same_as<options_type<U>, no_options> ? constructible_in_place<Lane<U>, U>
                                                           : constructible_in_place<Lane<U>, U, const options_type<U>&>)
    [[nodiscard]] static Lane<U> make(U upstream, const options_type<U>& options) {
        if constexpr (std::same_as<options_type<U>, no_options>) {
            static_cast<void>(options);
            return build_from<Lane<U>>(std::move(upstream));
        } else {
            return build_from<Lane<U>>(std::move(upstream), options);
        }
    }
};

template <class L, class U>
concept lane_policy =
    requires {
        typename L::template pool_type<U>;
        typename L::template options_type<U>;
    } && std::default_initializable<typename L::template options_type<U>> && std::copyable<typename L::template options_type<U>> &&
    requires(U upstream, const typename L::template options_type<U>& options) {
        { L::make(std::move(upstream), options) } -> std::same_as<typename L::template pool_type<U>>;
    };

}  // namespace poolkit
