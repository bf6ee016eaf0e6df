// cuda_managed_resource: unified memory from cudaMallocManaged(cudaMemAttachGlobal) / cudaFree.
//
// Complexity: a driver call each time; cudaFree synchronizes. Thread-safe. Alignment: 256
// natively; larger powers of two are met by over-allocating. Stream semantics: usable on any
// stream at once; deallocate_async waits for the stream, then frees. Exhaustion: out_of_memory;
// other CUDA failures: cuda_error. Host and device accessible. Stateless: all instances are equal.
#pragma once

#include <poolkit/upstream/detail/cuda_malloc_resource.hpp>

namespace poolkit {

class cuda_managed_resource : public detail::cuda_malloc_resource<cuda_managed_resource> {
public:
    static constexpr const char* name = "cuda_managed_resource";
    static constexpr const char* allocate_call = "cudaMallocManaged";
    static constexpr const char* free_call = "cudaFree";
    static constexpr std::size_t native_alignment = 256;

    friend constexpr bool operator==(const cuda_managed_resource&, const cuda_managed_resource&) noexcept { return true; }
    friend constexpr void get_property(const cuda_managed_resource&, device_accessible) noexcept {}
    friend constexpr void get_property(const cuda_managed_resource&, host_accessible) noexcept {}

private:
    friend class detail::cuda_malloc_resource<cuda_managed_resource>;
    cudaError_t raw_allocate(void** pointer, std::size_t bytes) const noexcept {
        return cudaMallocManaged(pointer, bytes, cudaMemAttachGlobal);
    }
    cudaError_t raw_free(void* pointer) const noexcept { return cudaFree(pointer); }
};

static_assert(stream_resource_with<cuda_managed_resource, device_accessible, host_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<cuda_managed_resource, cuda::mr::device_accessible, cuda::mr::host_accessible>);

}  // namespace poolkit
