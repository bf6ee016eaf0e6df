// Bookkeeping of the CUDA upstreams' over-aligned allocations.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_map>

namespace poolkit::detail {

// Allocations aligned beyond what a CUDA allocator guarantees: ask for `alignment - native` more,
// hand out the aligned address, and remember the base so that deallocate can free it. The record
// is host memory (nothing is written into the allocation). One registry per resource type.
class over_aligned_registry {
public:
    // Bytes to ask the raw allocator for, or nothing on overflow.
    static std::optional<std::size_t> padded_size(std::size_t bytes, std::size_t alignment, std::size_t native) {
        return alignment <= native ? std::optional(bytes) : checked_add(bytes, alignment - native);
    }

    // Aligns `base` and, where that moved it, remembers the base.
    void* adopt(void* base, std::size_t alignment, std::size_t native) {
        if (alignment <= native) return base;
        void* aligned = reinterpret_cast<void*>(align_up(reinterpret_cast<std::uintptr_t>(base), alignment));
        std::lock_guard lock(mutex_);
        bases_.emplace(aligned, base);
        return aligned;
    }

    // The pointer the raw allocator handed out for `pointer`.
    void* base_of(void* pointer, std::size_t alignment, std::size_t native) noexcept {
        if (alignment <= native) return pointer;
        std::lock_guard lock(mutex_);
        const auto found = bases_.find(pointer);
        POOLKIT_ASSERT(found != bases_.end(), "deallocate with an alignment other than the one allocated");
        if (found == bases_.end()) return pointer;
        void* base = found->second;
        bases_.erase(found);
        return base;
    }

    // Never destroyed: resources may free memory from static destructors.
    template <class Tag>
    static over_aligned_registry& instance() {
        static auto* registry = new over_aligned_registry;
        return *registry;
    }

private:
    std::mutex mutex_;
    std::unordered_map<void*, void*> bases_;
};

}  // namespace poolkit::detail
