// cuda_async_resource: stream-ordered device memory from a CUDA memory pool
// (cudaMallocFromPoolAsync / cudaFreeAsync).
//
// Owns a pool it creates (destroyed with it) or views one it is given, such as the device's
// default pool. Complexity: the driver's (under a microsecond for a warm allocate+free pair: docs/costs.md).
// Thread-safe. Alignment: 256 natively; larger powers of two are met by over-allocating.
// Stream semantics: allocate_async memory is usable by work on that stream issued afterwards;
// deallocate_async memory is reused by the pool only after the stream's earlier work. The plain
// allocate allocates on the default stream and waits for it, so the memory is usable on any
// stream; the plain deallocate frees on the default stream (the caller promises no work still
// uses the memory). Exhaustion: out_of_memory with the pool's used and reserved bytes; other CUDA
// failures: cuda_error. Equal when they use the same pool.
//
// Between processes (CUDA IPC, Linux): a pool made with `shareable` exports its handle as a POSIX
// file descriptor (export_handle(); pass it over a Unix socket with SCM_RIGHTS) and each
// allocation as 64 bytes of plain data (export_pointer()). The other process imports the pool
// (import_handle(fd): a pool that cannot allocate) and the allocation (import_pointer(data)), uses
// it, and frees it with deallocate / deallocate_async on the imported pool. CUDA's rules: the
// importer may touch the memory only after the exporter's allocation completed, and must have
// freed it (a cudaFreeAsync completed) before the exporter frees it; the exporter owns the memory.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/cuda_runtime.hpp>
#include <poolkit/upstream/detail/over_aligned.hpp>

#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

namespace poolkit {

struct cuda_async_options {
    // Device the pool lives on; negative means the current device.
    int device = -1;
    // Bytes the pool keeps reserved across synchronizations. Empty: keep everything (the driver's
    // default of 0 would return memory at every synchronization and make allocations slow).
    std::optional<std::size_t> release_threshold;
    // Another process may import the pool and its allocations (cudaMemHandleTypePosixFileDescriptor).
    bool shareable = false;
};

class cuda_async_resource {
public:
    static constexpr std::size_t native_alignment = 256;

    // Owns a new pool on the current device that keeps what it reserved.
    cuda_async_resource() : cuda_async_resource(cuda_async_options{}) {}

    // Owns a new pool configured by `options`.
    explicit cuda_async_resource(cuda_async_options options) : owned_(true) {
        int device = options.device;
        if (device < 0) detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
        cudaMemPoolProps properties{};
        properties.allocType = cudaMemAllocationTypePinned;
        properties.handleTypes = options.shareable ? cudaMemHandleTypePosixFileDescriptor : cudaMemHandleTypeNone;
        properties.location.type = cudaMemLocationTypeDevice;
        properties.location.id = device;
        detail::check_cuda(cudaMemPoolCreate(&pool_, &properties), "cudaMemPoolCreate");
        try {
            set_release_threshold(options.release_threshold.value_or(std::numeric_limits<std::size_t>::max()));
        } catch (...) {
            static_cast<void>(cudaMemPoolDestroy(pool_));
            throw;
        }
    }

    // Views `pool` without owning it; the pool must outlive this resource.
    [[nodiscard]] static cuda_async_resource view(cudaMemPool_t pool) noexcept { return cuda_async_resource(pool); }

    // Views the default pool of `device` (the current device when negative).
    [[nodiscard]] static cuda_async_resource device_default(int device = -1) {
        if (device < 0) detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
        cudaMemPool_t pool{};
        detail::check_cuda(cudaDeviceGetDefaultMemPool(&pool, device), "cudaDeviceGetDefaultMemPool");
        return cuda_async_resource(pool);
    }

    cuda_async_resource(cuda_async_resource&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)),
          owned_(std::exchange(other.owned_, false)),
          imported_(std::exchange(other.imported_, false)) {}
    cuda_async_resource& operator=(cuda_async_resource other) noexcept {
        std::swap(pool_, other.pool_);
        std::swap(owned_, other.owned_);
        std::swap(imported_, other.imported_);
        return *this;
    }
    cuda_async_resource(const cuda_async_resource&) = delete;

    // Allocations still live when an owned pool is destroyed stay valid until freed (driver rule).
    ~cuda_async_resource() {
        if (owned_ && pool_ != nullptr) detail::check_cuda_in_deallocate(cudaMemPoolDestroy(pool_), "cudaMemPoolDestroy");
    }

    // The pool another process exported (export_handle()), owned: allocations cannot be made
    // from it, only imported (import_pointer). The descriptor may be closed once this returns.
    // Throws cuda_error for a descriptor that is not such a pool.
    [[nodiscard]] static cuda_async_resource import_handle(int descriptor) {
        cudaMemPool_t pool{};
        detail::check_cuda(cudaMemPoolImportFromShareableHandle(&pool, reinterpret_cast<void*>(static_cast<std::intptr_t>(descriptor)),
                                                                cudaMemHandleTypePosixFileDescriptor, 0),
                           "cudaMemPoolImportFromShareableHandle (is the descriptor a pool exported by export_handle()?)");
        cuda_async_resource imported(pool);
        imported.owned_ = true;
        imported.imported_ = true;
        return imported;
    }

    // A new descriptor of this pool for another process; the caller closes it. Throws cuda_error
    // for a pool not made with cuda_async_options::shareable.
    [[nodiscard]] int export_handle() const {
        int descriptor = -1;
        detail::check_cuda(cudaMemPoolExportToShareableHandle(&descriptor, pool_, cudaMemHandleTypePosixFileDescriptor, 0),
                           "cudaMemPoolExportToShareableHandle (was the pool made with cuda_async_options::shareable?)");
        return descriptor;
    }

    // What another process needs to import `pointer`, an allocation of this shareable pool made with
    // an alignment of at most 256 (plain data: send it any way).
    [[nodiscard]] cudaMemPoolPtrExportData export_pointer(void* pointer) const {
        cudaMemPoolPtrExportData data{};
        detail::check_cuda(cudaMemPoolExportPointer(&data, pointer), "cudaMemPoolExportPointer");
        return data;
    }

    // The allocation `data` names, in this imported pool; free it with deallocate or
    // deallocate_async (with an alignment of at most 256) before the exporter frees it. Throws
    // std::logic_error on a pool that is not imported, cuda_error for data this pool did not export.
    [[nodiscard]] void* import_pointer(cudaMemPoolPtrExportData data) const {
        if (!imported_) throw std::logic_error("poolkit: import_pointer on a pool that was not imported (import_handle)");
        void* pointer = nullptr;
        detail::check_cuda(cudaMemPoolImportPointer(&pointer, pool_, &data), "cudaMemPoolImportPointer");
        return pointer;
    }

    [[nodiscard]] bool imported() const noexcept { return imported_; }

    // Lets kernels on `device` read and write the pool's memory (cudaMemPoolSetAccess): a peer of
    // the pool's device, or the importing process's device for a pool imported from another GPU.
    void grant_access(int device) {
        cudaMemAccessDesc access{};
        access.location.type = cudaMemLocationTypeDevice;
        access.location.id = device;
        access.flags = cudaMemAccessFlagsProtReadWrite;
        detail::check_cuda(cudaMemPoolSetAccess(pool_, &access, 1), "cudaMemPoolSetAccess");
    }

    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        if (imported_) throw std::logic_error("poolkit: an imported pool cannot allocate (import_pointer its allocations)");
        const auto padded = detail::over_aligned_registry::padded_size(bytes, alignment, native_alignment);
        if (!padded) throw out_of_memory("cuda_async_resource", memory_figures::request(bytes, alignment));
        void* base = nullptr;
        const cudaError_t status = cudaMallocFromPoolAsync(&base, *padded, pool_, stream.get());
        if (status != cudaSuccess) {
            detail::throw_allocation_failure(status, "cudaMallocFromPoolAsync", "cuda_async_resource", figures(bytes, alignment));
        }
        try {
            return registry().adopt(base, alignment, native_alignment);
        } catch (...) {
            detail::check_cuda_in_deallocate(cudaFreeAsync(base, stream.get()), "cudaFreeAsync");
            throw;
        }
    }

    void deallocate_async(void* pointer, std::size_t, std::size_t alignment, stream_ref stream) noexcept {
        if (pointer == nullptr) return;
        void* base = registry().base_of(pointer, alignment, native_alignment);
        detail::check_cuda_in_deallocate(cudaFreeAsync(base, stream.get()), "cudaFreeAsync");
    }

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        void* pointer = allocate_async(bytes, alignment, default_stream);
        if (pointer == nullptr) return nullptr;
        const cudaError_t status = cudaStreamSynchronize(nullptr);
        if (status != cudaSuccess) {
            deallocate_async(pointer, bytes, alignment, default_stream);
            detail::throw_cuda_error(status, "cudaStreamSynchronize");
        }
        return pointer;
    }

    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        deallocate_async(pointer, bytes, alignment, default_stream);
    }
    POOLKIT_CUDA_MR_MEMBERS(cuda_async_resource);

    // Returns the pool's free memory to the device (cudaMemPoolTrimTo 0). Frees still pending on
    // a stream are returned once that stream reaches them and the pool is trimmed again.
    void release() { detail::check_cuda(cudaMemPoolTrimTo(pool_, 0), "cudaMemPoolTrimTo"); }

    void set_release_threshold(std::size_t bytes) {
        auto threshold = static_cast<std::uint64_t>(bytes);
        detail::check_cuda(cudaMemPoolSetAttribute(pool_, cudaMemPoolAttrReleaseThreshold, &threshold),
                           "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
    }

    // Bytes the pool holds from the device, and bytes of it handed out and not freed.
    [[nodiscard]] std::size_t reserved_bytes() const { return attribute(cudaMemPoolAttrReservedMemCurrent); }
    [[nodiscard]] std::size_t live_bytes() const { return attribute(cudaMemPoolAttrUsedMemCurrent); }

    [[nodiscard]] cudaMemPool_t pool_handle() const noexcept { return pool_; }
    [[nodiscard]] bool owns_pool() const noexcept { return owned_; }

    friend bool operator==(const cuda_async_resource& a, const cuda_async_resource& b) noexcept { return a.pool_ == b.pool_; }
    friend constexpr void get_property(const cuda_async_resource&, device_accessible) noexcept {}

private:
    explicit cuda_async_resource(cudaMemPool_t pool) noexcept : pool_(pool), owned_(false) {}

    std::size_t attribute(cudaMemPoolAttr which) const {
        std::uint64_t value = 0;
        detail::check_cuda(cudaMemPoolGetAttribute(pool_, which, &value), "cudaMemPoolGetAttribute");
        return static_cast<std::size_t>(value);
    }

    memory_figures figures(std::size_t bytes, std::size_t alignment) const noexcept {
        std::uint64_t used = 0;
        std::uint64_t reserved = 0;
        if (cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrUsedMemCurrent, &used) == cudaSuccess &&
            cudaMemPoolGetAttribute(pool_, cudaMemPoolAttrReservedMemCurrent, &reserved) == cudaSuccess) {
            return memory_figures::held(bytes, alignment, used, reserved);
        }
        return memory_figures::request(bytes, alignment);
    }

    static detail::over_aligned_registry& registry() { return detail::over_aligned_registry::instance<cuda_async_resource>(); }

    cudaMemPool_t pool_ = nullptr;
    bool owned_ = false;
    bool imported_ = false;  // by import_handle: frees imported pointers, allocates nothing
};

static_assert(stream_resource_with<cuda_async_resource, device_accessible>);
static_assert(detail::cuda_mr_stream_resource_with<cuda_async_resource, cuda::mr::device_accessible>);

}  // namespace poolkit
