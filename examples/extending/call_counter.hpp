// An adaptor of your own: counts the allocating and freeing calls that pass through it. docs/
// extending.md walks through it.
//
// What makes it a poolkit adaptor: it derives from poolkit::forwarding<Self, Upstream>, which gives
// it every entry point and capability its upstream has (try_allocate_cached, release, the walk,
// record_use, properties ...), and defines only the hooks it needs: around_allocate sees every
// allocating entry point, around_deallocate every freeing one. It takes std::in_place plus its
// upstream's arguments, so that it can wrap an upstream that cannot move (a stream_ordered's pool
// is built so: lanes<> in adaptor/lanes.hpp). Deduction guides make it refer to an lvalue and own
// an rvalue.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/in_place.hpp>
#include <poolkit/core/ref.hpp>

#include <atomic>
#include <concepts>
#include <cstddef>
#include <type_traits>
#include <utility>

namespace example {

template <poolkit::resource Upstream>
class call_counter : public poolkit::forwarding<call_counter<Upstream>, Upstream> {
    friend poolkit::forwarding<call_counter, Upstream>;

public:
    using upstream_type = Upstream;

    explicit call_counter(Upstream upstream) : upstream_(std::move(upstream)) {}
    template <class... Args>
        requires poolkit::constructible_in_place<Upstream, Args...>
    explicit call_counter(std::in_place_t, Args&&... args) : upstream_(poolkit::build_from<Upstream>(std::forward<Args>(args)...)) {}

    [[nodiscard]] std::size_t allocations() const noexcept { return allocations_.load(); }
    [[nodiscard]] std::size_t deallocations() const noexcept { return deallocations_.load(); }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }
    friend bool operator==(const call_counter& a, const call_counter& b) { return a.upstream_ == b.upstream_; }

private:
    template <class Call>
    void* around_allocate(const poolkit::allocation_request&, Call&& call) {
        void* pointer = call();
        if (pointer != nullptr) ++allocations_;
        return pointer;
    }
    template <class Call>
    void around_deallocate(const poolkit::deallocation_request& request, Call&& call) noexcept {
        if (request.pointer != nullptr) ++deallocations_;
        call();
    }

    Upstream upstream_;
    std::atomic<std::size_t> allocations_{0};
    std::atomic<std::size_t> deallocations_{0};
};

template <poolkit::resource R>
call_counter(R&) -> call_counter<poolkit::ref<R>>;
template <poolkit::resource R>
    requires(!std::is_lvalue_reference_v<R>)
call_counter(R&&) -> call_counter<R>;

}  // namespace example
