// What the CUDA upstreams share: error translation and over-aligned allocations.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/config.hpp>
#include <poolkit/core/errors.hpp>

#if !POOLKIT_HAS_CUDA
#  error "this poolkit header needs CUDA: build with POOLKIT_CUDA enabled (POOLKIT_HAS_CUDA=1)"
#endif

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

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

// Makes `device` current for a scope and restores the previous device (the driver's calls run in
// the current device's primary context; events are made on the current device). Never throws;
// check() reports a failure to switch.
class device_scope {
public:
    explicit device_scope(int device) noexcept : device_(device) {
        status_ = cudaGetDevice(&previous_);
        if (status_ == cudaSuccess && previous_ != device_) status_ = cudaSetDevice(device_);
    }
    device_scope(const device_scope&) = delete;
    device_scope& operator=(const device_scope&) = delete;
    ~device_scope() {
        if (status_ == cudaSuccess && previous_ != device_) static_cast<void>(cudaSetDevice(previous_));
    }
    void check() const { check_cuda(status_, "cudaSetDevice"); }

private:
    int device_;
    int previous_ = -1;
    cudaError_t status_;
};

}  // namespace poolkit::detail
