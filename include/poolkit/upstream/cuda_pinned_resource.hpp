// cuda_pinned_resource: page-locked host memory from cudaHostAlloc / cudaFreeHost.
//
// Complexity: a driver call each time (cudaMallocHost costs about a millisecond per MiB, and
// cudaFreeHost synchronizes: docs/costs.md): cache it. Thread-safe. Alignment: 256 natively (pages in practice);
// larger powers of two are met by over-allocating. Stream semantics: usable on any stream at once;
// deallocate_async waits for the stream, then frees. Exhaustion: out_of_memory; other CUDA
// failures: cuda_error. Host and device accessible. All instances are equal: cudaFreeHost frees
// memory allocated with any flags.
#pragma once

#include <poolkit/upstream/detail/cuda_malloc_resource.hpp>

namespace poolkit {

struct cuda_pinned_options {
    // Flags for cudaHostAlloc: cudaHostAllocDefault, Portable, Mapped, WriteCombined.
    unsigned flags = cudaHostAllocDefault;
};

class cuda_pinned_resource : public detail::cuda_malloc_resource<cuda_pinned_resource> {
public:
    static constexpr const char* name = "cuda_pinned_resource";
    static constexpr const char* allocate_call = "cudaHostAlloc";
    static constexpr const char* free_call = "cudaFreeHost";
    static constexpr std::size_t native_alignment = 256;

    cuda_pinned_resource() = default;
    explicit cuda_pinned_resource(cuda_pinned_options options) noexcept : options_(options) {}

    [[nodiscard]] const cuda_pinned_options& options() const noexcept { return options_; }

    friend constexpr bool operator==(const cuda_pinned_resource&, const cuda_pinned_resource&) noexcept { return true; }
    friend constexpr void get_property(const cuda_pinned_resource&, device_accessible) noexcept {}
    friend constexpr void get_property(const cuda_pinned_resource&, host_accessible) noexcept {}

private:
    friend class detail::cuda_malloc_resource<cuda_pinned_resource>;
    cudaError_t raw_allocate(void** pointer, std::size_t bytes) const noexcept { return cudaHostAlloc(pointer, bytes, options_.flags); }
    cudaError_t raw_free(void* pointer) const noexcept { return cudaFreeHost(pointer); }
    cuda_pinned_options options_;
};

static_assert(stream_resource_with<cuda_pinned_resource, device_accessible, host_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<cuda_pinned_resource, cuda::mr::device_accessible, cuda::mr::host_accessible>);

}  // namespace poolkit
