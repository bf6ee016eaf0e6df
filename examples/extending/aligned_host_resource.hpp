// An upstream of your own: host memory from std::aligned_alloc. docs/extending.md walks through it.
//
// What makes it a poolkit upstream: allocate/deallocate with the rules of docs/concepts.md (a
// power-of-two alignment or std::invalid_argument, nullptr for 0 bytes, out_of_memory on
// exhaustion, a deallocate that never throws), equality (stateless: every instance frees every
// other's memory), and the property that says where the memory may be touched. With CUDA,
// POOLKIT_CUDA_MR_MEMBERS makes it a CCCL cuda::mr resource whichever CCCL spelling is in use.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>

#include <cstddef>
#include <cstdlib>

namespace example {

class aligned_host_resource {
public:
    void* allocate(std::size_t bytes, std::size_t alignment = poolkit::default_alignment) {
        poolkit::validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        // aligned_alloc wants a size that is a multiple of the alignment, at least sizeof(void*).
        const std::size_t step = alignment < sizeof(void*) ? sizeof(void*) : alignment;
        const auto rounded = poolkit::checked_align_up(bytes, step);
        void* pointer = rounded ? std::aligned_alloc(step, *rounded) : nullptr;
        if (pointer == nullptr) throw poolkit::out_of_memory("aligned_host_resource", poolkit::memory_figures::request(bytes, alignment));
        return pointer;
    }
    void deallocate(void* pointer, std::size_t, std::size_t = poolkit::default_alignment) noexcept { std::free(pointer); }
    POOLKIT_CUDA_MR_MEMBERS(aligned_host_resource);  // the same in CCCL 3.1's cuda::mr spelling (none under 3.0)

    friend bool operator==(const aligned_host_resource&, const aligned_host_resource&) noexcept { return true; }
    friend void get_property(const aligned_host_resource&, poolkit::host_accessible) noexcept {}
};

static_assert(poolkit::resource_with<aligned_host_resource, poolkit::host_accessible>);

}  // namespace example
