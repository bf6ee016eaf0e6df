// cuda_vmm_resource: device memory through CUDA's virtual memory management — one reserved range
// of device addresses that never moves, whose granules are backed by physical memory on request
// (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap).
//
// It models virtual_memory (core/virtual_memory.hpp says what map and unmap mean): map(at, bytes)
// creates one physical allocation per granule (cuMemCreate of one granule, cuMemMap, cuMemRelease,
// so the mapping alone keeps the memory), then grants access to the whole run in one
// cuMemSetAccess — read-write for its device and options.peers. One granule per physical
// allocation is what lets unmap free any single granule: cuMemUnmap must cover whole mappings.
// map_whole(at, bytes) creates one physical allocation for the whole run instead: one cuMemCreate,
// cuMemMap and cuMemSetAccess however long the run, unmapped only whole.
// It is also a resource that can stand in for cudaMalloc: allocate takes the smallest hole of the
// range that fits (then the lowest address), rounds the size up to whole granules and maps them
// whole; deallocate unmaps them. Driver entry points come through the runtime (detail/cuda_driver.hpp):
// link cudart only.
//
// Complexity: map: two driver calls per granule and one cuMemSetAccess; map_whole and allocate:
// four driver calls; unmap: one cuMemUnmap per physical allocation; bookkeeping O(log n) in the
// unmapped holes and whole mappings. Thread-safe (one mutex, held across the driver
// calls). Alignment: blocks start on a granule (2 MiB on most GPUs); any larger power of two is met
// by placement in the range. Stream semantics: memory is usable on any stream as soon as map or
// allocate returns. unmap requires that no work still uses the range. deallocate waits for the
// whole device first (as cudaFree does); deallocate_async waits for its stream only.
// Exhaustion: a request past options.physical_limit (default: the device's memory; changed by
// set_physical_limit) throws out_of_memory before any driver call; CUDA_ERROR_OUT_OF_MEMORY from
// cuMemCreate or cuMemMap unmaps what the call had mapped and throws out_of_memory with the bytes
// asked, the bytes mapped (as reserved), the limit and what the device reports free; no hole of
// the range fitting throws out_of_memory naming the reserved range. Other driver failures:
// cuda_error with the CUresult as code(). A device without virtual memory support: cuda_error at
// construction.
// Equality is identity. Destruction unmaps and releases everything; in builds with assertions it
// reports blocks and mapped granules still live.
// Between processes (Linux): with options.shareable, export_block(block) gives a POSIX descriptor
// of a block's physical memory, which imported_block maps in the other process; the physical
// memory lives until no process maps it, so either side may free, or exit, first.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/leak_report.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/detail/cuda_driver.hpp>
#include <poolkit/core/detail/cuda_runtime.hpp>
#include <poolkit/upstream/detail/locked_granules.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace poolkit {

struct cuda_vmm_options {
    // The device whose memory is mapped; negative means the current device.
    int device = -1;
    // Bytes of device address space reserved, rounded up to the granularity. 0 means 32 times the
    // device's memory: address space costs nothing until mapped (reserving takes microseconds, up
    // to some tens of TiB: docs/costs.md), holes between blocks then never stop
    // the physical memory from being used, and each stream lane of the expandable preset claims
    // spans of its own (one as large as the device's memory, and an eighth of that for small
    // blocks), each at most a 32nd of what is left: the first lane's as large as the memory, the
    // twentieth's about half of it.
    std::size_t reserve_bytes = 0;
    // Bytes per granule: 0 means the device's recommended granularity (2 MiB on most GPUs); else a
    // power of two that is a multiple of the device's minimum (larger pages).
    std::size_t granularity = 0;
    // Most bytes mapped at once, rounded down to the granularity; 0 means the device's memory.
    std::size_t physical_limit = 0;
    // Other devices granted read-write access to every mapping (each must be able to access this
    // device's memory: cudaDeviceCanAccessPeer).
    std::vector<int> peers;
    // Physical memory another process may map (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR): blocks of
    // the resource face then export_block() to imported_block in that process.
    bool shareable = false;
};

class cuda_vmm_resource : public detail::locked_granules {
public:
    static constexpr const char* name = "cuda_vmm_resource";

    cuda_vmm_resource() : cuda_vmm_resource(cuda_vmm_options{}) {}

    // Throws cuda_error when the device does not support virtual memory management or a driver
    // call fails, std::invalid_argument for options that make no sense (a granularity that is not
    // a power-of-two multiple of the device's minimum, a peer that cannot access the device).
    explicit cuda_vmm_resource(const cuda_vmm_options& options) : locked_granules(name), driver_(&detail::cuda_driver::get()) {
        device_ = options.device;
        if (device_ < 0) detail::check_cuda(cudaGetDevice(&device_), "cudaGetDevice");
        int devices = 0;
        detail::check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
        if (device_ >= devices) {
            throw std::invalid_argument("poolkit: cuda_vmm_resource: there is no device " + std::to_string(device_));
        }
        const detail::device_scope scope(device_);
        scope.check();

        CUdevice handle{};
        driver_->check(driver_->device_get(&handle, device_), "cuDeviceGet");
        int supported = 0;
        driver_->check(driver_->device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, handle),
                       "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
        if (supported == 0) {
            throw cuda_error(static_cast<int>(CUDA_ERROR_NOT_SUPPORTED),
                             "poolkit: cuda_vmm_resource: device " + std::to_string(device_) +
                                 " does not support CUDA virtual memory management "
                                 "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)");
        }

        properties_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
        properties_.requestedHandleTypes = options.shareable ? CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR : CU_MEM_HANDLE_TYPE_NONE;
        properties_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        properties_.location.id = device_;
        granularity_ = choose_granularity(options.granularity);

        access_.push_back(read_write(device_));
        for (int peer : options.peers) {
            if (peer == device_ ||
                std::any_of(access_.begin(), access_.end(), [peer](const CUmemAccessDesc& d) { return d.location.id == peer; })) {
                continue;
            }
            int can_access = 0;
            if (peer < 0 || peer >= devices) {
                throw std::invalid_argument("poolkit: cuda_vmm_resource: there is no peer device " + std::to_string(peer));
            }
            detail::check_cuda(cudaDeviceCanAccessPeer(&can_access, peer, device_), "cudaDeviceCanAccessPeer");
            if (can_access == 0) {
                throw std::invalid_argument("poolkit: cuda_vmm_resource: device " + std::to_string(peer) +
                                            " cannot access the memory of device " + std::to_string(device_));
            }
            access_.push_back(read_write(peer));
        }

        std::size_t free_bytes = 0;
        std::size_t device_bytes = 0;
        detail::check_cuda(cudaMemGetInfo(&free_bytes, &device_bytes), "cudaMemGetInfo");
        const std::size_t device_limit = align_down(device_bytes, granularity_);

        const auto wanted = options.reserve_bytes != 0 ? std::optional(options.reserve_bytes) : checked_mul(device_bytes, std::size_t{32});
        const auto reserve = wanted ? checked_align_up(*wanted, granularity_) : std::nullopt;
        if (!reserve) throw std::invalid_argument("poolkit: cuda_vmm_resource reserve_bytes is too large");
        CUdeviceptr base{};
        driver_->check(driver_->mem_address_reserve(&base, *reserve, granularity_, 0, 0), "cuMemAddressReserve");
        try {
            adopt(detail::granule_map(static_cast<std::uintptr_t>(base), *reserve, granularity_), device_limit,
                  options.physical_limit == 0 ? device_limit : align_down(options.physical_limit, granularity_));
        } catch (...) {
            detail::cuda_driver::check_in_deallocate(driver_->mem_address_free(base, *reserve), "cuMemAddressFree");
            throw;
        }
    }

    cuda_vmm_resource(const cuda_vmm_resource&) = delete;
    cuda_vmm_resource& operator=(const cuda_vmm_resource&) = delete;

    ~cuda_vmm_resource() {
        detail::report_leaks(name, granules_.block_count(), granules_.block_bytes());
        detail::report_leaks("cuda_vmm_resource (granules mapped by map())",
                             (granules_.mapped_bytes() - granules_.block_bytes()) / granularity_,
                             granules_.mapped_bytes() - granules_.block_bytes());
        const detail::device_scope scope(device_);
        if (granules_.mapped_bytes() != 0 || granules_.aliased_bytes() != 0) {
            detail::check_cuda_in_deallocate(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
            std::vector<std::pair<std::uintptr_t, std::size_t>> aliases;
            try {
                granules_.for_each_alias([&](std::uintptr_t at, std::size_t bytes) { aliases.emplace_back(at, bytes); });
            } catch (...) {  // no host memory: the aliases go with the reservation
            }
            for (const auto& [at, bytes] : aliases) {
                unmap_alias(at, *granules_.alias_source(at), bytes);
                granules_.mark_unmapped(at, bytes);
            }
            granules_.for_each_mapped_run([this](std::uintptr_t at, std::size_t bytes) { unmap_mappings(at, bytes); });
        }
        detail::cuda_driver::check_in_deallocate(
            driver_->mem_address_free(static_cast<CUdeviceptr>(granules_.base()), granules_.capacity()), "cuMemAddressFree");
    }

    [[nodiscard]] int device() const noexcept { return device_; }

    // Backs [at, at + bytes) (whole granules, inside the range, none mapped; 0 bytes does nothing)
    // and makes it readable and writable by the device and its peers. Throws std::invalid_argument
    // for a range that breaks those rules, out_of_memory or cuda_error as the header says; nothing
    // stays mapped then.
    void map(void* at, std::size_t bytes) { map_checked(at, bytes, mapping::per_granule); }

    // As map, with one physical allocation for the whole run: unmap must then cover it whole.
    void map_whole(void* at, std::size_t bytes) { map_checked(at, bytes, mapping::whole); }

    // Maps [at, at + bytes) (whole granules, inside the range, none mapped) to the physical memory
    // mapped at [from, from + bytes) (mapped, whole physical allocations, not an alias), readable
    // and writable as map's: per physical allocation, cuMemRetainAllocationHandle, cuMemMap and
    // cuMemRelease, then one cuMemSetAccess. No memory is added; until unmap(at, bytes) takes the
    // alias back, whole, [from, from + bytes) may not be unmapped. 0 bytes does nothing. Throws
    // std::invalid_argument for ranges that break those rules, cuda_error when the driver
    // refuses; nothing stays mapped then.
    void alias(void* at, const void* from, std::size_t bytes) {
        if (bytes == 0) return;
        const auto address = reinterpret_cast<std::uintptr_t>(at), source = reinterpret_cast<std::uintptr_t>(from);
        std::lock_guard lock(mutex_);
        granules_.check_alias(address, source, bytes, name);
        const detail::device_scope scope(device_);
        scope.check();
        std::size_t done = 0;
        const auto fail = [&](CUresult status, const char* call) {
            unmap_alias(address, source, done);
            driver_->throw_error(status, call);
        };
        CUresult status = CUDA_SUCCESS;
        const char* call = nullptr;
        granules_.for_each_allocation(source, bytes, [&](std::uintptr_t start, std::size_t length) {
            if (status != CUDA_SUCCESS) return;
            CUmemGenericAllocationHandle handle{};
            status = driver_->mem_retain_allocation_handle(&handle, reinterpret_cast<void*>(start));
            call = "cuMemRetainAllocationHandle";
            if (status != CUDA_SUCCESS) return;
            status = driver_->mem_map(static_cast<CUdeviceptr>(address) + (start - source), length, 0, handle, 0);
            call = "cuMemMap";
            const CUresult released = driver_->mem_release(handle);  // drops the retain; the mappings keep the memory
            if (status == CUDA_SUCCESS) done += length;
            if (status == CUDA_SUCCESS && released != CUDA_SUCCESS) {
                status = released;
                call = "cuMemRelease";
            }
        });
        if (status != CUDA_SUCCESS) fail(status, call);
        status = driver_->mem_set_access(static_cast<CUdeviceptr>(address), bytes, access_.data(), access_.size());
        if (status != CUDA_SUCCESS) fail(status, "cuMemSetAccess");
        try {
            granules_.mark_aliased(address, source, bytes);
        } catch (...) {
            unmap_alias(address, source, bytes);
            throw;
        }
    }

    // Gives [at, at + bytes) back to the device: whole granules, all mapped, none in a live block
    // from allocate, no physical allocation an alias still maps, an alias only whole
    // (POOLKIT_ASSERT; with assertions off such a call does nothing); no work may still use them.
    // 0 bytes does nothing.
    void unmap(void* at, std::size_t bytes) noexcept {
        if (bytes == 0) return;
        const auto address = reinterpret_cast<std::uintptr_t>(at);
        std::lock_guard lock(mutex_);
        if (!may_unmap_locked(address, bytes)) return;
        const detail::device_scope scope(device_);
        if (const auto source = granules_.alias_source(address)) {
            unmap_alias(address, *source, bytes);
        } else {
            unmap_mappings(address, bytes);
        }
        granules_.mark_unmapped(address, bytes);
    }

    // Waits for all work of the device, so that memory unmapped afterwards is used by none.
    void synchronize() {
        const detail::device_scope scope(device_);
        detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    }

    // The resource face: a block of whole granules, mapped, in the smallest hole that fits.
    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const auto rounded = checked_round_up(bytes, granularity_);
        std::lock_guard lock(mutex_);
        if (!rounded || !granules_.room_for(*rounded, physical_limit())) {
            throw out_of_memory(name, figures(bytes, alignment, false));
        }
        return place_block_locked(bytes, *rounded, alignment,
                                  [&](std::uintptr_t at) { map_locked(at, *rounded, mapping::whole, alignment, bytes); });
    }

    // Waits for the device (as cudaFree does), then unmaps the block.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        const detail::device_scope scope(device_);
        detail::check_cuda_in_deallocate(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
        release_block(pointer, bytes, alignment);
    }

    // Memory is usable on any stream once mapped.
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref) { return allocate(bytes, alignment); }

    // Unmapping is not stream-ordered: waits for `stream`'s work, then unmaps the block.
    void deallocate_async(void* pointer, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        if (pointer == nullptr) return;
        detail::check_cuda_in_deallocate(cudaStreamSynchronize(stream.get()), "cudaStreamSynchronize");
        const detail::device_scope scope(device_);
        release_block(pointer, bytes, alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(cuda_vmm_resource);

    // A new POSIX descriptor of the physical memory of `block`, a block of the resource face
    // (allocate) of a shareable resource, for another process to map with imported_block; send
    // it with the block's size rounded up to granularity() (SCM_RIGHTS over a Unix socket), then
    // close it. Throws std::invalid_argument for a pointer that does not start a block,
    // cuda_error for a resource not made shareable.
    [[nodiscard]] int export_block(const void* block) const {
        {
            std::lock_guard lock(mutex_);
            const auto at = reinterpret_cast<std::uintptr_t>(block);
            if (!granules_.in_block(at) || !granules_.whole_at(at)) {
                throw std::invalid_argument("poolkit: cuda_vmm_resource::export_block: not the start of a block from allocate()");
            }
        }
        driver_->require_sharing();
        const detail::device_scope scope(device_);
        scope.check();
        CUmemGenericAllocationHandle handle{};
        driver_->check(driver_->mem_retain_allocation_handle(&handle, const_cast<void*>(block)), "cuMemRetainAllocationHandle");
        int descriptor = -1;
        const CUresult exported = driver_->mem_export_to_shareable_handle(&descriptor, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
        detail::cuda_driver::check_in_deallocate(driver_->mem_release(handle), "cuMemRelease");
        driver_->check(exported, "cuMemExportToShareableHandle (was the resource made with cuda_vmm_options::shareable?)");
        return descriptor;
    }

    friend bool operator==(const cuda_vmm_resource& a, const cuda_vmm_resource& b) noexcept { return &a == &b; }
    friend constexpr void get_property(const cuda_vmm_resource&, device_accessible) noexcept {}

private:
    static CUmemAccessDesc read_write(int device) noexcept {
        CUmemAccessDesc access{};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        return access;
    }

    std::size_t choose_granularity(std::size_t asked) const {
        std::size_t minimum = 0;
        std::size_t recommended = 0;
        driver_->check(driver_->mem_get_allocation_granularity(&minimum, &properties_, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
                       "cuMemGetAllocationGranularity(CU_MEM_ALLOC_GRANULARITY_MINIMUM)");
        driver_->check(driver_->mem_get_allocation_granularity(&recommended, &properties_, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                       "cuMemGetAllocationGranularity(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)");
        if (asked == 0) asked = std::max(minimum, recommended);
        if (minimum == 0 || !is_power_of_two(asked) || asked % minimum != 0) {
            throw std::invalid_argument("poolkit: cuda_vmm_resource granularity " + std::to_string(asked) +
                                        " is not a power-of-two multiple of the device's minimum, " + std::to_string(minimum));
        }
        return asked;
    }

    enum class mapping { per_granule, whole };

    void map_checked(void* at, std::size_t bytes, mapping kind) {
        if (bytes == 0) return;
        const auto address = reinterpret_cast<std::uintptr_t>(at);
        std::lock_guard lock(mutex_);
        granules_.check_map(address, bytes, name);
        map_locked(address, bytes, kind, granularity_);
    }

    // Maps [at, at + bytes) (check_map passed), a physical allocation per granule or one for the
    // whole, and records it; on failure nothing stays mapped. `asked` is the caller's size, for
    // the figures of out_of_memory.
    void map_locked(std::uintptr_t at, std::size_t bytes, mapping kind, std::size_t alignment, std::size_t asked = 0) {
        if (asked == 0) asked = bytes;
        if (!granules_.room_for(bytes, physical_limit())) throw out_of_memory(name, figures(asked, alignment, false));
        const detail::device_scope scope(device_);
        scope.check();
        const std::size_t piece = kind == mapping::whole ? bytes : granularity_;
        std::size_t done = 0;
        const auto fail = [&](CUresult status, const char* call, std::size_t mapped) {
            unmap_pieces(at, mapped, piece);
            if (status == CUDA_ERROR_OUT_OF_MEMORY) throw out_of_memory(name, figures(asked, alignment, true));
            driver_->throw_error(status, call);
        };
        for (; done < bytes; done += piece) {
            CUmemGenericAllocationHandle handle{};
            const CUresult created = driver_->mem_create(&handle, piece, &properties_, 0);
            if (created != CUDA_SUCCESS) fail(created, "cuMemCreate", done);
            const CUresult mapped = driver_->mem_map(static_cast<CUdeviceptr>(at) + done, piece, 0, handle, 0);
            const CUresult released = driver_->mem_release(handle);  // the mapping, if any, keeps the memory
            if (mapped != CUDA_SUCCESS) fail(mapped, "cuMemMap", done);
            if (released != CUDA_SUCCESS) fail(released, "cuMemRelease", done + piece);
        }
        const CUresult accessible = driver_->mem_set_access(static_cast<CUdeviceptr>(at), bytes, access_.data(), access_.size());
        if (accessible != CUDA_SUCCESS) fail(accessible, "cuMemSetAccess", bytes);
        try {
            if (kind == mapping::whole) {
                granules_.mark_mapped_whole(at, bytes);
            } else {
                granules_.mark_mapped(at, bytes);
            }
        } catch (...) {
            unmap_pieces(at, bytes, piece);
            throw;
        }
    }

    // Unmaps the physical allocations of [at, at + bytes), `piece` bytes each; the physical
    // memory goes back to the device.
    void unmap_pieces(std::uintptr_t at, std::size_t bytes, std::size_t piece) const noexcept {
        for (std::size_t done = 0; done < bytes; done += piece) {
            detail::cuda_driver::check_in_deallocate(driver_->mem_unmap(static_cast<CUdeviceptr>(at) + done, piece), "cuMemUnmap");
        }
    }

    // Unmaps the recorded mappings of [at, at + bytes), which covers each whole: one call per
    // physical allocation, as granules_ says where each starts and ends.
    void unmap_mappings(std::uintptr_t at, std::size_t bytes) const noexcept {
        for (std::size_t done = 0; done < bytes;) {
            const std::size_t piece = granules_.whole_at(at + done).value_or(granularity_);
            unmap_pieces(at + done, piece, piece);
            done += piece;
        }
    }

    // Unmaps the first `bytes` of the alias at `at` of the memory at `from`: one call per physical
    // allocation it maps (its layout is the source's).
    void unmap_alias(std::uintptr_t at, std::uintptr_t from, std::size_t bytes) const noexcept {
        granules_.for_each_allocation(from, bytes, [&](std::uintptr_t start, std::size_t length) {
            if (start - from >= bytes) return;
            unmap_pieces(at + (start - from), length, length);
        });
    }

    void release_block(void* pointer, std::size_t bytes, [[maybe_unused]] std::size_t alignment) noexcept {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        std::lock_guard lock(mutex_);
        const auto block = granules_.block_at(address);
        POOLKIT_ASSERT(block.has_value(), "deallocate of a pointer cuda_vmm_resource did not hand out");
        if (!block) return;
        POOLKIT_ASSERT(checked_round_up(bytes, granularity_) == *block, "deallocate with a size other than the one allocated");
        granules_.forget_block(address);
        unmap_mappings(address, *block);
        granules_.mark_unmapped(address, *block);
    }

    // What out_of_memory reports: the bytes asked, mapped (as reserved) and the limit, and where
    // the device was asked, what it reports free.
    memory_figures figures(std::size_t bytes, std::size_t alignment, bool device_refused) const noexcept {
        memory_figures result = memory_figures::request(bytes, alignment);
        result.reserved_bytes = granules_.mapped_bytes();
        result.limit_bytes = physical_limit();
        std::size_t free_bytes = 0;
        std::size_t total_bytes = 0;
        if (device_refused && cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) result.available_bytes = free_bytes;
        static_cast<void>(cudaGetLastError());
        return result;
    }

    const detail::cuda_driver* driver_;
    int device_ = 0;
    std::size_t granularity_ = 0;
    CUmemAllocationProp properties_{};  // of every granule: pinned device memory on device_
    std::vector<CUmemAccessDesc> access_;  // read-write for device_, then each peer
};

static_assert(aliasing_virtual_memory<cuda_vmm_resource>);
// Physical memory another process exported (cuda_vmm_resource::export_block), mapped into this
// one at an address of its own for as long as this object lives, readable and writable by
// `device` (the current one when negative). The physical memory lives until every process that
// maps it has unmapped it: the exporter may free its block, or exit, while an import is mapped.
// The descriptor may be closed once the constructor returns. Throws cuda_error for a descriptor
// that is not exported physical memory or a size that is not the block's; move-only.
class imported_block {
public:
    imported_block(int descriptor, std::size_t bytes, int device = -1) : driver_(&detail::cuda_driver::get()), bytes_(bytes) {
        driver_->require_sharing();
        if (device < 0) detail::check_cuda(cudaGetDevice(&device), "cudaGetDevice");
        const detail::device_scope scope(device);
        scope.check();
        CUmemGenericAllocationHandle handle{};
        driver_->check(driver_->mem_import_from_shareable_handle(&handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(descriptor)),
                                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                       "cuMemImportFromShareableHandle (is the descriptor from cuda_vmm_resource::export_block?)");
        CUdeviceptr at = 0;
        CUresult status = driver_->mem_address_reserve(&at, bytes_, 0, 0, 0);
        if (status == CUDA_SUCCESS) {
            status = driver_->mem_map(at, bytes_, 0, handle, 0);
            if (status != CUDA_SUCCESS) detail::cuda_driver::check_in_deallocate(driver_->mem_address_free(at, bytes_), "cuMemAddressFree");
        }
        detail::cuda_driver::check_in_deallocate(driver_->mem_release(handle), "cuMemRelease");  // the mapping keeps it
        driver_->check(status, "cuMemAddressReserve / cuMemMap of the imported block (is bytes the exported block's size?)");
        address_ = at;
        CUmemAccessDesc access{};
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        status = driver_->mem_set_access(address_, bytes_, &access, 1);
        if (status != CUDA_SUCCESS) {
            unmap();
            driver_->throw_error(status, "cuMemSetAccess");
        }
    }
    imported_block(imported_block&& other) noexcept
        : driver_(other.driver_), address_(std::exchange(other.address_, 0)), bytes_(std::exchange(other.bytes_, 0)) {}
    imported_block& operator=(imported_block other) noexcept {
        std::swap(driver_, other.driver_);
        std::swap(address_, other.address_);
        std::swap(bytes_, other.bytes_);
        return *this;
    }
    imported_block(const imported_block&) = delete;
    // Unmaps: no work may still use the memory.
    ~imported_block() { unmap(); }

    [[nodiscard]] void* data() const noexcept { return reinterpret_cast<void*>(address_); }
    [[nodiscard]] std::size_t size() const noexcept { return bytes_; }

private:
    void unmap() noexcept {
        if (address_ == 0) return;
        detail::cuda_driver::check_in_deallocate(driver_->mem_unmap(address_, bytes_), "cuMemUnmap");
        detail::cuda_driver::check_in_deallocate(driver_->mem_address_free(address_, bytes_), "cuMemAddressFree");
        address_ = 0;
    }

    const detail::cuda_driver* driver_;
    CUdeviceptr address_ = 0;
    std::size_t bytes_ = 0;
};

static_assert(stream_resource_with<cuda_vmm_resource, device_accessible>);
static_assert(!has_property<cuda_vmm_resource, host_accessible>);
static_assert(has_owns<cuda_vmm_resource> && has_check_invariants<cuda_vmm_resource>);
static_assert(detail::cuda_mr_stream_resource_with<cuda_vmm_resource, cuda::mr::device_accessible>);

}  // namespace poolkit
