// The shape shared by the synchronous CUDA upstreams (cudaMalloc, cudaMallocHost, cudaMallocManaged).
//
// Derived supplies:
//   static constexpr const char* name;               // for messages
//   static constexpr std::size_t native_alignment;    // what the raw call guarantees
//   cudaError_t raw_allocate(void** pointer, std::size_t bytes) const;
//   cudaError_t raw_free(void* pointer) const;
//   static constexpr const char* allocate_call, *free_call;
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/cuda_runtime.hpp>
#include <poolkit/upstream/detail/over_aligned.hpp>

namespace poolkit::detail {

template <class Derived>
class cuda_malloc_resource {
public:
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const memory_figures figures = memory_figures::request(bytes, alignment);
        const auto padded = over_aligned_registry::padded_size(bytes, alignment, Derived::native_alignment);
        if (!padded) throw out_of_memory(Derived::name, figures);
        void* base = nullptr;
        const cudaError_t status = derived().raw_allocate(&base, *padded);
        if (status != cudaSuccess) throw_allocation_failure(status, Derived::allocate_call, Derived::name, figures);
        try {
            return registry().adopt(base, alignment, Derived::native_alignment);
        } catch (...) {
            check_cuda_in_deallocate(derived().raw_free(base), Derived::free_call);
            throw;
        }
    }

    void deallocate(void* pointer, std::size_t, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        void* base = registry().base_of(pointer, alignment, Derived::native_alignment);
        check_cuda_in_deallocate(derived().raw_free(base), Derived::free_call);
    }

    // The memory is usable by any stream as soon as the call returns.
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref) { return allocate(bytes, alignment); }

    // The raw free call is not stream-ordered: wait for `stream`'s work, then free.
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        if (pointer == nullptr) return;
        check_cuda_in_deallocate(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
        deallocate(pointer, bytes, alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(Derived);

private:
    const Derived& derived() const noexcept { return static_cast<const Derived&>(*this); }
    static over_aligned_registry& registry() { return over_aligned_registry::instance<Derived>(); }
};

}  // namespace poolkit::detail
