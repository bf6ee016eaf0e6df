// cuda_device_resource: device memory from cudaMalloc / cudaFree on the current device.
//
// Complexity: a driver call each time (tens to hundreds of microseconds for the pair, and
// cudaFree synchronizes the device: docs/costs.md): put a pool in front of it. Thread-safe. Alignment: 256 natively; larger powers of
// two are met by over-allocating and recording the base on the host. Stream semantics: memory is
// usable on any stream at once; deallocate_async waits for the stream, then frees. Exhaustion:
// out_of_memory with the bytes asked and what the device reports as free; other CUDA failures:
// cuda_error. Stateless: all instances are equal (cudaFree frees memory of any device).
#pragma once

#include <poolkit/upstream/detail/cuda_malloc_resource.hpp>

namespace poolkit {

class cuda_device_resource : public detail::cuda_malloc_resource<cuda_device_resource> {
public:
    static constexpr const char* name = "cuda_device_resource";
    static constexpr const char* allocate_call = "cudaMalloc";
    static constexpr const char* free_call = "cudaFree";
    static constexpr std::size_t native_alignment = 256;

    friend constexpr bool operator==(const cuda_device_resource&, const cuda_device_resource&) noexcept { return true; }
    friend constexpr void get_property(const cuda_device_resource&, device_accessible) noexcept {}

private:
    friend class detail::cuda_malloc_resource<cuda_device_resource>;
    cudaError_t raw_allocate(void** pointer, std::size_t bytes) const noexcept { return cudaMalloc(pointer, bytes); }
    cudaError_t raw_free(void* pointer) const noexcept { return cudaFree(pointer); }
};

static_assert(stream_resource_with<cuda_device_resource, device_accessible>);
static_assert(!has_property<cuda_device_resource, host_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<cuda_device_resource, cuda::mr::device_accessible>);

}  // namespace poolkit
