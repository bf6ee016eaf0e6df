// Rebuilding a block over another upstream: how stream_ordered makes one pool per lane, each over
// a poolkit::ref to one shared upstream.
//
//   rebind_t<P, N>        P with the resource its memory comes from replaced by N, through every
//                         layer: P::rebind<N> where P names it (adaptors rebind their upstream,
//                         combinators each part); else, for a block T<U> over upstream U, T<N>; a
//                         resource with no upstream (the shared one itself, or a ref to it) is N.
//   lane_upstream_t<P>    that resource: P::lane_upstream_type where named (adaptors and
//                         combinators name their parts'), else P::upstream_type.
//   lane_options_t<P>     what one lane is built with: P::lane_options_type where named (an
//                         adaptor passes its upstream's on; a combinator has one per part), else
//                         P::options_type, else no_options.
//   build_over<P>(n, o)   a P over upstream n with lane options o: build_from<P>(n, o), or
//                         build_from<P>(n) when there are no options. It returns a prvalue, so P
//                         need not be movable.
//   build_from<P>(args)   P(std::in_place, args...) where P has it (adaptors build their upstream
//                         in place, so it need not move), else P(args...).
// An adaptor's own settings (a limit, a log sink) take their defaults in lanes: to configure one,
// wrap the stream_ordered instead.
#pragma once

#include <concepts>
#include <type_traits>
#include <utility>

namespace poolkit {

// Lane options of a block built from its upstream alone.
struct no_options {
    friend constexpr bool operator==(no_options, no_options) noexcept = default;
};

namespace detail {

template <class P>
concept names_rebind = requires { typename P::template rebind<P>; };

template <class P, class N>
struct rebind_of {
    using type = N;  // no upstream: P is the shared resource (or a ref to it)
};
template <class P, class N>
    requires names_rebind<P>
struct rebind_of<P, N> {
    using type = typename P::template rebind<N>;
};
template <template <class...> class T, class U, class... Rest, class N>
    requires(!names_rebind<T<U, Rest...>>) && requires { typename T<U, Rest...>::upstream_type; }
struct rebind_of<T<U, Rest...>, N> {
    using type = T<N, Rest...>;
};

template <class P>
struct lane_upstream_of {
    using type = P;  // a resource with no upstream is what lanes share
};
template <class P>
    requires requires { typename P::upstream_type; } && (!requires { typename P::lane_upstream_type; })
struct lane_upstream_of<P> {
    using type = typename P::upstream_type;
};
template <class P>
    requires requires { typename P::lane_upstream_type; }
struct lane_upstream_of<P> {
    using type = typename P::lane_upstream_type;
};

template <class P>
struct lane_options_of {
    using type = no_options;
};
template <class P>
    requires requires { typename P::options_type; } && (!requires { typename P::lane_options_type; })
struct lane_options_of<P> {
    using type = typename P::options_type;
};
template <class P>
    requires requires { typename P::lane_options_type; }
struct lane_options_of<P> {
    using type = typename P::lane_options_type;
};

}  // namespace detail

template <class P, class N>
using rebind_t = typename detail::rebind_of<P, N>::type;

template <class P>
using lane_upstream_t = typename detail::lane_upstream_of<P>::type;

template <class P>
using lane_options_t = typename detail::lane_options_of<P>::type;

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

// P can be built over upstream N with lane options O.
template <class P, class N, class O = lane_options_t<P>>
concept buildable_over = (std::same_as<O, no_options> && constructible_in_place<P, N>) ||
                         (!std::same_as<O, no_options> && constructible_in_place<P, N, const O&>);

template <class P, class N, class Options>
    requires buildable_over<P, N, Options>
[[nodiscard]] P build_over(N upstream, const Options& options) {
    if constexpr (std::same_as<Options, no_options>) {
        return build_from<P>(std::move(upstream));
    } else {
        return build_from<P>(std::move(upstream), options);
    }
}

// Lane options of a block of two parts: one per part.
template <class First, class Second>
struct parts_options {
    First first{};
    Second second{};
};

namespace detail {
// Names a combinator whose parts draw on different upstreams: no resource, so no lane pool.
template <class A, class B>
struct mismatched_lane_upstreams {};

// The upstream both parts of a combinator share.
template <class A, class B>
using common_lane_upstream_t = std::conditional_t<std::same_as<lane_upstream_t<A>, lane_upstream_t<B>>, lane_upstream_t<A>,
                                                  mismatched_lane_upstreams<A, B>>;
}  // namespace detail

}  // namespace poolkit
