// forwarding<Derived, Upstream>: the one mechanism by which an adaptor passes on what it does not
// change.
//
// An adaptor derives from forwarding<Self, Upstream> and exposes upstream_resource(). It then has
// every entry point and optional capability that Upstream has, each only where Upstream has it:
//   allocate, deallocate                          always
//   allocate_async, deallocate_async              stream_resource<Upstream>
//   try_allocate, try_allocate_cached             has_try_allocate<Upstream>, has_try_allocate_cached<Upstream>
//   release, owns, check_invariants               has_release / has_owns / has_check_invariants
//   for_each_block (the walk of core/walk.hpp)    walkable<Upstream>
//   record_use(p, stream), pending_free(p)        has_record_use<Upstream>, has_pending_free<Upstream>
//   reserved_bytes, live_bytes, block_size        where Upstream has them
//   every property                                has_property<Upstream, P>
// The adaptor changes behaviour through three hooks, which it may define (as members the base can
// reach: public, or private with `friend forwarding`):
//   around_allocate(const allocation_request&, call)      every allocating entry point goes through
//                                                          it; call() asks Upstream and returns its
//                                                          pointer (nullptr from the try_ forms on
//                                                          failure). May throw: the try_ forms then
//                                                          return nullptr.
//   around_deallocate(const deallocation_request&, call)  every freeing entry point; noexcept.
//   around_call(call)                                     every other forwarded capability: call(upstream).
// So an adaptor that counts, limits, logs or locks cannot be bypassed by an entry point it forgot,
// and one that adds nothing to a capability writes nothing for it. undo_allocate(request, pointer)
// returns a block to Upstream the way the request took it (for an adaptor whose own step failed
// after Upstream succeeded). Defining a member of the same name in the adaptor replaces the
// forwarded one (C++ name hiding), as counted<> does for check_invariants().
// An adaptor also takes std::in_place plus its upstream's constructor arguments and builds the
// upstream in place (core/in_place.hpp), so that it can wrap one that cannot move.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/stream_ref.hpp>
#include <poolkit/core/walk.hpp>

#include <cstddef>
#include <utility>

namespace poolkit {

// Which entry point a request came through.
enum class allocation_kind { allocate, allocate_async, try_allocate, try_allocate_cached };

struct allocation_request {
    std::size_t bytes;
    std::size_t alignment;
    allocation_kind kind;
    stream_ref stream = default_stream;  // for allocate_async

    // A failure of the try_ forms is nullptr, not an exception.
    [[nodiscard]] constexpr bool may_fail_quietly() const noexcept {
        return kind == allocation_kind::try_allocate || kind == allocation_kind::try_allocate_cached;
    }
};

struct deallocation_request {
    void* pointer;
    std::size_t bytes;
    std::size_t alignment;
    bool on_stream = false;  // deallocate_async
    stream_ref stream = default_stream;
};

template <class Derived, class Upstream>
class forwarding : public forward_properties<Derived, Upstream> {
public:
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        return self().around_allocate(allocation_request{bytes, alignment, allocation_kind::allocate},
                                      [&] { return up().allocate(bytes, alignment); });
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        self().around_deallocate(deallocation_request{pointer, bytes, alignment},
                                 [&]() noexcept { up().deallocate(pointer, bytes, alignment); });
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream)
        requires stream_resource<Upstream>
    {
        return self().around_allocate(allocation_request{bytes, alignment, allocation_kind::allocate_async, stream},
                                      [&] { return up().allocate_async(bytes, alignment, stream); });
    }
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept
        requires stream_resource<Upstream>
    {
        self().around_deallocate(deallocation_request{pointer, bytes, alignment, true, stream},
                                 [&]() noexcept { up().deallocate_async(pointer, bytes, alignment, stream); });
    }
    POOLKIT_CUDA_MR_MEMBERS(Derived);

    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate<Upstream>
    {
        try {
            return self().around_allocate(allocation_request{bytes, alignment, allocation_kind::try_allocate},
                                          [&]() noexcept { return up().try_allocate(bytes, alignment); });
        } catch (...) {
            return nullptr;
        }
    }
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept
        requires has_try_allocate_cached<Upstream>
    {
        try {
            return self().around_allocate(allocation_request{bytes, alignment, allocation_kind::try_allocate_cached},
                                          [&]() noexcept { return up().try_allocate_cached(bytes, alignment); });
        } catch (...) {
            return nullptr;
        }
    }

    void release()
        requires has_release<Upstream>
    {
        self().around_call([](Upstream& u) { u.release(); });
    }
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<Upstream>
    {
        return self().around_call([pointer](const Upstream& u) -> bool { return u.owns(pointer); });
    }
    void check_invariants() const
        requires has_check_invariants<Upstream>
    {
        self().around_call([](const Upstream& u) { u.check_invariants(); });
    }
    template <class Visitor>
        requires walkable<Upstream>
    void for_each_block(Visitor&& visit) const {
        self().around_call([&visit](const Upstream& u) { u.for_each_block(visit); });
    }
    void record_use(void* pointer, stream_ref stream)
        requires has_record_use<Upstream>
    {
        self().around_call([pointer, stream](Upstream& u) { u.record_use(pointer, stream); });
    }
    [[nodiscard]] bool pending_free(const void* pointer) const
        requires has_pending_free<Upstream>
    {
        return self().around_call([pointer](const Upstream& u) -> bool { return u.pending_free(pointer); });
    }
    [[nodiscard]] std::size_t reserved_bytes() const
        requires requires(const Upstream& u) {
            { u.reserved_bytes() } -> std::convertible_to<std::size_t>;
        }
    {
        return self().around_call([](const Upstream& u) -> std::size_t { return u.reserved_bytes(); });
    }
    [[nodiscard]] std::size_t live_bytes() const
        requires requires(const Upstream& u) {
            { u.live_bytes() } -> std::convertible_to<std::size_t>;
        }
    {
        return self().around_call([](const Upstream& u) -> std::size_t { return u.live_bytes(); });
    }
    // The block Upstream hands out for a request (counted<> counts it as allocated bytes).
    [[nodiscard]] std::size_t block_size(std::size_t bytes, std::size_t alignment) const noexcept
        requires has_block_size<Upstream>
    {
        return self().upstream_resource().block_size(bytes, alignment);
    }

protected:
    // The default hooks add nothing.
    template <class Call>
    void* around_allocate(const allocation_request&, Call&& call) {
        return std::forward<Call>(call)();
    }
    template <class Call>
    void around_deallocate(const deallocation_request&, Call&& call) noexcept {
        std::forward<Call>(call)();
    }
    template <class Call>
    decltype(auto) around_call(Call&& call) {
        return std::forward<Call>(call)(up());
    }
    template <class Call>
    decltype(auto) around_call(Call&& call) const {
        return std::forward<Call>(call)(up());
    }

    // Returns `pointer`, which Upstream just handed out for `request`, the way it was taken.
    void undo_allocate(const allocation_request& request, void* pointer) noexcept {
        if (request.kind == allocation_kind::allocate_async) {
            if constexpr (stream_resource<Upstream>) up().deallocate_async(pointer, request.bytes, request.alignment, request.stream);
        } else {
            up().deallocate(pointer, request.bytes, request.alignment);
        }
    }
    [[deprecated("poolkit: forwarding<>::give_back is now undo_allocate")]] void give_back(const allocation_request& request,
                                                                                           void* pointer) noexcept {
        undo_allocate(request, pointer);
    }

private:
    Derived& self() noexcept { return static_cast<Derived&>(*this); }
    const Derived& self() const noexcept { return static_cast<const Derived&>(*this); }
    decltype(auto) up() noexcept { return self().upstream_resource(); }
    decltype(auto) up() const noexcept { return self().upstream_resource(); }
};

}  // namespace poolkit
