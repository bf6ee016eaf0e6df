// The walk a strategy offers so that snapshot() and fragmentation() can see inside it.
//
//     r.for_each_block(visitor)   calls visitor(const chunk_view&, const block_view&) for every
//                                 block, chunks in address order, blocks in address order within
//                                 their chunk; the blocks of a chunk tile it.
// A strategy that keeps chunks and blocks offers it as a const member; the visit must not
// allocate through the strategy. Nothing else is required: snapshot() and fragmentation() work
// with any type that has it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace poolkit {

// One range taken from the upstream.
struct chunk_view {
    std::uintptr_t address = 0;
    std::size_t bytes = 0;
    std::uintptr_t stream = 0;  // the stream the chunk serves, 0 when it is not tied to one
    std::uint64_t pool = 0;  // the private pool holding it (a CUDA graph's), 0 for the shared one
};

// One block of a chunk.
struct block_view {
    std::uintptr_t address = 0;
    std::size_t bytes = 0;  // the whole block
    std::size_t requested_bytes = 0;  // what the user asked for (0 when free or unknown)
    bool live = false;  // handed out and not freed
    bool pending_free = false;  // freed, waiting on a stream before it can be reused
    std::uintptr_t stream = 0;
};

namespace detail {
struct block_visitor_archetype {
    void operator()(const chunk_view&, const block_view&) const noexcept {}
};
}  // namespace detail

// R offers the walk.
template <class R>
concept walkable = requires(const R& r, detail::block_visitor_archetype visitor) { r.for_each_block(visitor); };

}  // namespace poolkit
