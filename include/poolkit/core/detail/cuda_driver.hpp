// The CUDA driver entry points that virtual memory needs, taken through the runtime
// (cudaGetDriverEntryPointByVersion), so that programs link cudart alone and never libcuda;
// lookup() gives any other entry point, or nullptr, without throwing (cuda_events uses it).
// <cuda.h> and <cudaTypedefs.h> are included for the types only.
//
// Each entry point is asked for at the CUDA version in its PFN_ typedef's name, so the pointer's
// ABI is the typedef's by construction. The table is loaded once per process, on first use;
// a missing entry point throws cuda_error (and the next use tries again), except the three that
// share memory between processes, which only export_block and imported_block need
// (require_sharing()).
//
// device_scope, which every layer uses to make a device current, asks the driver first (below).
#pragma once

#include <poolkit/core/detail/cuda_runtime.hpp>

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <string>

namespace poolkit::detail {

struct cuda_driver {
    PFN_cuGetErrorName_v6000 get_error_name = nullptr;
    PFN_cuGetErrorString_v6000 get_error_string = nullptr;
    PFN_cuDeviceGet_v2000 device_get = nullptr;
    PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
    PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity = nullptr;
    PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
    PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
    PFN_cuMemCreate_v10020 mem_create = nullptr;
    PFN_cuMemRelease_v10020 mem_release = nullptr;
    PFN_cuMemMap_v10020 mem_map = nullptr;
    PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
    PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
    // Sharing between processes: nullptr where the driver lacks them.
    PFN_cuMemRetainAllocationHandle_v11000 mem_retain_allocation_handle = nullptr;
    PFN_cuMemExportToShareableHandle_v10020 mem_export_to_shareable_handle = nullptr;
    PFN_cuMemImportFromShareableHandle_v10020 mem_import_from_shareable_handle = nullptr;

    // The process's table. Throws cuda_error when the runtime cannot hand out an entry point.
    static const cuda_driver& get() {
        static const cuda_driver driver = load();
        return driver;
    }

    // "cuMemMap failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory", for messages.
    [[nodiscard]] std::string describe(CUresult status, const char* call) const {
        const char* error_name = nullptr;
        const char* error_text = nullptr;
        if (get_error_name(status, &error_name) != CUDA_SUCCESS || error_name == nullptr) error_name = "unknown CUresult";
        if (get_error_string(status, &error_text) != CUDA_SUCCESS || error_text == nullptr) error_text = "no description";
        return std::string(call) + " failed: " + error_name + " (" + std::to_string(static_cast<int>(status)) + "): " + error_text;
    }

    // Throws cuda_error whose code() is the CUresult.
    [[noreturn]] void throw_error(CUresult status, const char* call) const {
        throw cuda_error(static_cast<int>(status), "poolkit: " + describe(status, call));
    }

    void check(CUresult status, const char* call) const {
        if (status != CUDA_SUCCESS) throw_error(status, call);
    }

    // Throws cuda_error where the driver cannot share memory between processes.
    void require_sharing() const {
        if (mem_retain_allocation_handle == nullptr || mem_export_to_shareable_handle == nullptr ||
            mem_import_from_shareable_handle == nullptr) {
            throw cuda_error(static_cast<int>(cudaErrorSymbolNotFound),
                             "poolkit: the CUDA driver has no cuMemRetainAllocationHandle, cuMemExportToShareableHandle or "
                             "cuMemImportFromShareableHandle: it cannot share memory between processes");
        }
    }

    // A failure where nothing may throw (unmap, deallocate, destructors). Errors that only mean the
    // driver is already shutting down (a static resource destroyed after main) are ignored.
    static void check_in_deallocate(CUresult status, [[maybe_unused]] const char* call) noexcept {
        if (status == CUDA_SUCCESS || status == CUDA_ERROR_DEINITIALIZED || status == CUDA_ERROR_CONTEXT_IS_DESTROYED) return;
        POOLKIT_ASSERT(status == CUDA_SUCCESS, "a CUDA driver call failed where nothing may throw");
    }

private:
    static cuda_driver load() {
        cuda_driver driver;
        entry(driver.get_error_name, "cuGetErrorName", 6000);
        entry(driver.get_error_string, "cuGetErrorString", 6000);
        entry(driver.device_get, "cuDeviceGet", 2000);
        entry(driver.device_get_attribute, "cuDeviceGetAttribute", 2000);
        entry(driver.mem_get_allocation_granularity, "cuMemGetAllocationGranularity", 10020);
        entry(driver.mem_address_reserve, "cuMemAddressReserve", 10020);
        entry(driver.mem_address_free, "cuMemAddressFree", 10020);
        entry(driver.mem_create, "cuMemCreate", 10020);
        entry(driver.mem_release, "cuMemRelease", 10020);
        entry(driver.mem_map, "cuMemMap", 10020);
        entry(driver.mem_unmap, "cuMemUnmap", 10020);
        entry(driver.mem_set_access, "cuMemSetAccess", 10020);
        optional_entry(driver.mem_retain_allocation_handle, "cuMemRetainAllocationHandle", 11000);
        optional_entry(driver.mem_export_to_shareable_handle, "cuMemExportToShareableHandle", 10020);
        optional_entry(driver.mem_import_from_shareable_handle, "cuMemImportFromShareableHandle", 10020);
        return driver;
    }

public:
    // The runtime's answer for one entry point: the function (nullptr if none) and how the asking went.
    struct lookup_result {
        void* function = nullptr;
        cudaError_t status = cudaSuccess;
        cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    };
    static lookup_result lookup(const char* symbol, [[maybe_unused]] unsigned int version) noexcept {
        lookup_result result;
#if CUDART_VERSION >= 12050
        result.status = cudaGetDriverEntryPointByVersion(symbol, &result.function, version, cudaEnableDefault, &result.found);
#else
        result.status = cudaGetDriverEntryPoint(symbol, &result.function, cudaEnableDefault, &result.found);
#endif
        if (result.status != cudaSuccess || result.found != cudaDriverEntryPointSuccess) result.function = nullptr;
        return result;
    }

private:
    template <class Function>
    static void entry(Function& slot, const char* symbol, unsigned int version) {
        const auto [function, status, found] = lookup(symbol, version);
#if CUDART_VERSION >= 12050
        const char* call = "cudaGetDriverEntryPointByVersion";
#else
        const char* call = "cudaGetDriverEntryPoint";
#endif
        if (status != cudaSuccess) {
            throw cuda_error(static_cast<int>(status), std::string("poolkit: ") + call + "(\"" + symbol +
                                                           "\") failed: " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status));
        }
        if (function == nullptr || found != cudaDriverEntryPointSuccess) {
            throw cuda_error(static_cast<int>(cudaErrorSymbolNotFound), std::string("poolkit: the CUDA driver has no entry point ") +
                                                                            symbol + " (version " + std::to_string(version) +
                                                                            "); is the driver older than the toolkit?");
        }
        slot = reinterpret_cast<Function>(function);
    }
    template <class Function>
    static void optional_entry(Function& slot, const char* symbol, unsigned int version) noexcept {
        slot = reinterpret_cast<Function>(lookup(symbol, version).function);
    }
};

// Makes `device` current for a scope and restores the previous device (the driver's calls run in
// the current context; events are made on the current device). Never throws; check() reports a
// failure to switch.
//
// Where the thread's current context is `device`'s primary context (every call a framework makes
// on its current device), one driver call settles it: cuCtxGetCurrent, compared with the primary
// context, retained once per device for the process so that its handle stays that device's.
// cudaGetDevice took 28-45 ns a call on H100 hosts, more than the layers around a pool;
// cuCtxGetCurrent 8-13 (docs/costs.md). Otherwise (another device, a context made through the
// driver, or none yet) the runtime is asked and switched as before. No call here fails on a
// thread with no context, so tools that report every failed API call stay quiet.
class device_scope {
public:
    explicit device_scope(int device) noexcept : device_(device), previous_(device) {
        if (primary_current(device)) return;
        status_ = cudaGetDevice(&previous_);
        if (status_ == cudaSuccess && previous_ != device_) status_ = cudaSetDevice(device_);
    }
    device_scope(const device_scope&) = delete;
    device_scope& operator=(const device_scope&) = delete;
    ~device_scope() {
        if (status_ == cudaSuccess && previous_ != device_) static_cast<void>(cudaSetDevice(previous_));
    }
    void check() const { check_cuda(status_, "cudaSetDevice"); }

    // Whether the thread's current context is `device`'s primary context (false where there is
    // none, or the driver cannot say).
    static bool primary_current(int device) noexcept {
        static const auto get_current = reinterpret_cast<PFN_cuCtxGetCurrent_v4000>(cuda_driver::lookup("cuCtxGetCurrent", 4000).function);
        CUcontext current = nullptr;
        if (get_current == nullptr || get_current(&current) != CUDA_SUCCESS || current == nullptr) return false;
        return current == primary_context(device);
    }

private:
    static constexpr int known_devices = 64;  // devices past these always ask the runtime

    // `device`'s primary context, retained once for the process, or nullptr where there is no
    // such device or the driver cannot say.
    static CUcontext primary_context(int device) noexcept {
        static std::array<std::atomic<CUcontext>, known_devices> contexts{};
        if (device < 0 || device >= std::min(known_devices, device_count())) return nullptr;
        std::atomic<CUcontext>& slot = contexts[static_cast<std::size_t>(device)];
        if (CUcontext known = slot.load(std::memory_order_acquire)) return known;
        static const auto get_device = reinterpret_cast<PFN_cuDeviceGet_v2000>(cuda_driver::lookup("cuDeviceGet", 2000).function);
        static const auto retain =
            reinterpret_cast<PFN_cuDevicePrimaryCtxRetain_v7000>(cuda_driver::lookup("cuDevicePrimaryCtxRetain", 7000).function);
        CUdevice handle = 0;
        CUcontext context = nullptr;
        if (get_device == nullptr || retain == nullptr || get_device(&handle, device) != CUDA_SUCCESS ||
            retain(&context, handle) != CUDA_SUCCESS) {
            return nullptr;
        }
        CUcontext expected = nullptr;
        if (!slot.compare_exchange_strong(expected, context, std::memory_order_acq_rel)) return expected;  // retained twice: harmless
        return context;
    }

    // The devices the driver has (0 where it cannot say), asked once.
    static int device_count() noexcept {
        static const int count = [] {
            const auto get_count = reinterpret_cast<PFN_cuDeviceGetCount_v2000>(cuda_driver::lookup("cuDeviceGetCount", 2000).function);
            int devices = 0;
            return get_count != nullptr && get_count(&devices) == CUDA_SUCCESS ? devices : 0;
        }();
        return count;
    }

    int device_;
    int previous_;
    cudaError_t status_ = cudaSuccess;
};

}  // namespace poolkit::detail
