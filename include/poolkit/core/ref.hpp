// poolkit::ref<R>: a non-owning, trivially copyable reference to a resource.
//
// Lets several blocks share one upstream: `best_fit<ref<cuda_device_resource>>`. It forwards
// every call and every capability of R (core/forwarding.hpp), adds no state but a pointer, and is
// only as thread-safe as R. upstream_resource() is R itself, so observation walks through a ref.
// The referenced resource must outlive every ref to it and all memory taken through them.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/forwarding.hpp>

#include <memory>

namespace poolkit {

template <resource R>
class ref : public forwarding<ref<R>, R> {
public:
    using resource_type = R;

    constexpr ref(R& resource) noexcept : resource_(std::addressof(resource)) {}  // NOLINT: implicit by design
    ref(R&&) = delete;  // a temporary would dangle

    // The referenced resource itself: a ref is a view, so "upstream" is what it views.
    [[nodiscard]] R& get() const noexcept { return *resource_; }
    [[nodiscard]] R& upstream_resource() const noexcept { return *resource_; }

    friend bool operator==(const ref& a, const ref& b) { return *a.resource_ == *b.resource_; }

private:
    R* resource_;
};

// Whether R is a ref<>: what walks down a composition step through (memory_summary, statistics).
template <class R>
inline constexpr bool is_ref_v = false;
template <class R>
inline constexpr bool is_ref_v<ref<R>> = true;

namespace detail {
// What a chain of refs refers to in the end, or the resource itself.
template <class U>
struct referent {
    using type = U;
    static U& get(U& u) noexcept { return u; }
};
template <class U>
    requires requires(const U& u) {
        typename U::resource_type;
        u.get();
    }
struct referent<U> {
    using type = typename referent<typename U::resource_type>::type;
    static type& get(const U& u) noexcept { return referent<typename U::resource_type>::get(u.get()); }
};
}  // namespace detail

template <class U>
using referent_t = typename detail::referent<U>::type;

}  // namespace poolkit
