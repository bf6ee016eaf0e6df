// The CUDA runtime as every layer uses it: errors translated into poolkit's exceptions.
// (The scope that makes a device current, device_scope, is in cuda_driver.hpp: it asks the driver.)
#pragma once

#include <poolkit/core/assert.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/core/errors.hpp>

#if !POOLKIT_HAS_CUDA
#  error "this poolkit header needs CUDA: build with POOLKIT_CUDA enabled (POOLKIT_HAS_CUDA=1)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>

namespace poolkit::detail {

[[noreturn]] inline void throw_cuda_error(cudaError_t status, const char* call) {
    throw cuda_error(static_cast<int>(status),
                     std::string("poolkit: ") + call + " failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
}

inline void check_cuda(cudaError_t status, const char* call) {
    if (status != cudaSuccess) throw_cuda_error(status, call);
}

// Turns a failed allocation call into the right exception: out_of_memory for exhaustion (with
// what the device reports as free), cuda_error for anything else.
[[noreturn]] inline void throw_allocation_failure(cudaError_t status, const char* call, const char* source, memory_figures figures) {
    static_cast<void>(cudaGetLastError());  // an allocation failure is not sticky: clear it
    if (status != cudaErrorMemoryAllocation) throw_cuda_error(status, call);
    std::size_t free_bytes = 0;
    std::size_t total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
        figures.available_bytes = free_bytes;
        if (!figures.limit_bytes) figures.limit_bytes = total_bytes;
    } else {
        static_cast<void>(cudaGetLastError());
    }
    throw out_of_memory(source, figures);
}

// A failure inside deallocate cannot throw. Errors that only mean the runtime is already torn
// down (a static pool destroyed after main) are expected and ignored; anything else is a bug.
inline void check_cuda_in_deallocate(cudaError_t status, [[maybe_unused]] const char* call) noexcept {
    if (status == cudaSuccess || status == cudaErrorCudartUnloading || status == cudaErrorContextIsDestroyed) return;
    POOLKIT_ASSERT(status == cudaSuccess, "a CUDA free call failed inside deallocate");
}

}  // namespace poolkit::detail
