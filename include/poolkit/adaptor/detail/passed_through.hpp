// passed_through<Upstream>: blocks handed out straight from the upstream, past the pool, while the
// pool could not yet serve a stream (the turn from one stream to several, detail/pool_tag.hpp).
//
// Contract:
// - take() asks the upstream for a block and remembers it; nullptr where the upstream has none,
//   or is no resource (virtual memory).
// - give_back() returns a remembered block to the upstream and forgets it. The owner calls it only
//   once no work may still use the block (after a host wait for its stream): such a block never
//   joins the waiting blocks, whose batches a miss may put into the pool early.
// Rarely holds any block: an empty() test keeps it off the hot paths. Complexity: O(1) expected
// (pointer_map). Not thread-safe.
#pragma once

#include <poolkit/adaptor/detail/front_cache.hpp>
#include <poolkit/adaptor/detail/pointer_map.hpp>
#include <poolkit/core/concepts.hpp>

#include <cstddef>
#include <new>

namespace poolkit::detail {

template <class Upstream>
class passed_through {
public:
    // nullptr where the upstream has no memory; its other errors (CUDA's, a bad alignment) go on.
    [[nodiscard]] void* take(Upstream& upstream, std::size_t bytes, std::size_t alignment) {
        if constexpr (resource<Upstream>) {
            try {
                blocks_.reserve(blocks_.size() + 1);
                void* pointer = upstream.allocate(bytes, alignment);
                blocks_.insert(pointer, true);  // room was reserved
                return pointer;
            } catch (const std::bad_alloc&) {
                return nullptr;
            }
        } else {
            return nullptr;
        }
    }

    [[nodiscard]] bool holds(const void* pointer) const noexcept { return !blocks_.empty() && blocks_.find(pointer) != nullptr; }

    // False: `block` was not passed through, and nothing happened.
    bool give_back(Upstream& upstream, const free_block& block) noexcept {
        if constexpr (resource<Upstream>) {
            if (blocks_.empty() || !blocks_.erase(block.pointer)) return false;
            upstream.deallocate(block.pointer, block.bytes, block.alignment);
            return true;
        } else {
            return false;
        }
    }

    [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }

private:
    pointer_map<bool> blocks_;
};

}  // namespace poolkit::detail
