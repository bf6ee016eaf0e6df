// gated_upstream<U>: what a stream_ordered lane's pool sees as its upstream — a reference to the
// upstream all lanes share that calls the lane's gate before any memory leaves the lane.
//
// Memory leaves a lane pool by deallocate (a chunk or a block passed through goes back) and, over
// virtual memory, by unmap. A lane's free blocks may still be used by work queued on its stream
// (a block freed there is reusable there at once), so before such a call the gate makes sure
// that work is done (stream_ordered::secure). Whatever path a strategy takes — its own release
// before growth, a retry after the upstream ran out, a trim, release(), destruction — it goes
// through here. Every other call and capability is forwarded unchanged (core/forwarding.hpp),
// and, where U refers to virtual memory, the virtual_memory interface too (with may_unmap, and
// alias where U's memory has it).
// Complexity: one pointer call before each return of memory. Thread safety: as U's and the gate's.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/forwarding.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/virtual_memory.hpp>

#include <cstddef>
#include <memory>

namespace poolkit::detail {

// Called before memory leaves a lane. Must not call into the lane's pool (it is mid-call).
// before_return() false: the memory may not leave now (a CUDA graph may still use it, or a capture
// forbids cudaFree); the gate takes a block given back by deallocate with hold(), to return it
// later itself. Unmapping cannot wait (the pool may map the same addresses again at once), so a
// strategy over virtual memory asks may_unmap() first and keeps its granules mapped on false;
// before_unmap() then makes sure no work uses what is unmapped.
class return_gate {
public:
    virtual bool before_return() noexcept = 0;
    virtual void hold(void* pointer, std::size_t bytes, std::size_t alignment) noexcept = 0;
    virtual bool may_unmap() noexcept = 0;
    virtual void before_unmap() noexcept = 0;

protected:
    ~return_gate() = default;
};

template <class U>
class gated_upstream : public forwarding<gated_upstream<U>, U> {
    using memory_type = referent_t<U>;

public:
    gated_upstream(U& upstream, return_gate& gate) noexcept : upstream_(std::addressof(upstream)), gate_(&gate) {}

    [[nodiscard]] U& upstream_resource() const noexcept { return *upstream_; }

    friend bool operator==(const gated_upstream& a, const gated_upstream& b) { return *a.upstream_ == *b.upstream_; }

    // The virtual_memory interface, where U refers to virtual memory: unmap is gated.
    [[nodiscard]] std::byte* base() const noexcept
        requires virtual_memory<memory_type>
    {
        return memory().base();
    }
    [[nodiscard]] std::size_t capacity() const noexcept
        requires virtual_memory<memory_type>
    {
        return memory().capacity();
    }
    [[nodiscard]] std::size_t granularity() const noexcept
        requires virtual_memory<memory_type>
    {
        return memory().granularity();
    }
    [[nodiscard]] std::size_t physical_limit() const noexcept
        requires virtual_memory<memory_type> && requires(const memory_type& m) { m.physical_limit(); }
    {
        return memory().physical_limit();
    }
    void map(void* at, std::size_t bytes)
        requires virtual_memory<memory_type>
    {
        memory().map(at, bytes);
    }
    void map_whole(void* at, std::size_t bytes)
        requires virtual_memory<memory_type>
    {
        memory().map_whole(at, bytes);
    }
    void alias(void* at, const void* from, std::size_t bytes)
        requires aliasing_virtual_memory<memory_type>
    {
        memory().alias(at, from, bytes);
    }
    void unmap(void* at, std::size_t bytes) noexcept
        requires virtual_memory<memory_type>
    {
        gate_->before_unmap();
        memory().unmap(at, bytes);
    }
    // Whether granules may be unmapped now (expandable asks before it trims its cache).
    [[nodiscard]] bool may_unmap() noexcept
        requires virtual_memory<memory_type>
    {
        return gate_->may_unmap();
    }
    [[nodiscard]] bool is_mapped(const void* pointer) const
        requires virtual_memory<memory_type>
    {
        return memory().is_mapped(pointer);
    }
    [[nodiscard]] std::size_t mapped_bytes() const
        requires virtual_memory<memory_type>
    {
        return memory().mapped_bytes();
    }
    [[nodiscard]] std::size_t peak_mapped_bytes() const
        requires virtual_memory<memory_type>
    {
        return memory().peak_mapped_bytes();
    }
    [[nodiscard]] std::size_t map_calls() const
        requires virtual_memory<memory_type>
    {
        return memory().map_calls();
    }
    [[nodiscard]] std::size_t unmap_calls() const
        requires virtual_memory<memory_type>
    {
        return memory().unmap_calls();
    }
    [[nodiscard]] std::byte* claim(std::size_t bytes)
        requires virtual_memory<memory_type>
    {
        return memory().claim(bytes);
    }
    [[nodiscard]] std::size_t largest_claimable() const
        requires virtual_memory<memory_type> && requires(const memory_type& m) { m.largest_claimable(); }
    {
        return memory().largest_claimable();
    }
    // Address space only: every granule of the span was unmapped (through the gate) before.
    void unclaim(void* at, std::size_t bytes) noexcept
        requires virtual_memory<memory_type>
    {
        memory().unclaim(at, bytes);
    }
    // The wait before an unmap is the gate's, which knows what the lane's free blocks wait for:
    // not the whole device, which a CUDA capture running meanwhile forbids.
    void synchronize()
        requires virtual_memory<memory_type>
    {
        gate_->before_unmap();
    }

private:
    friend class forwarding<gated_upstream<U>, U>;

    template <class Call>
    void around_deallocate(const deallocation_request& request, Call&& call) noexcept {
        if (gate_->before_return()) {
            call();
        } else {
            gate_->hold(request.pointer, request.bytes, request.alignment);
        }
    }

    memory_type& memory() const noexcept { return referent<U>::get(*upstream_); }

    U* upstream_;
    return_gate* gate_;
};

}  // namespace poolkit::detail
