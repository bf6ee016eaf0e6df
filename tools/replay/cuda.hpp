// --upstream=cuda: the compositions over cudaMalloc, plus cuda_async (the driver's pool), with one
// real CUDA stream per stream of the trace (the default stream stays the default stream).
// Only built when POOLKIT_HAS_CUDA is 1.
#pragma once

#include "compositions.hpp"

#include <poolkit/adaptor/cuda_events.hpp>
#include <poolkit/upstream/cuda_async_resource.hpp>
#include <poolkit/upstream/cuda_device_resource.hpp>
#include <poolkit/upstream/cuda_vmm_resource.hpp>

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace poolkit::replay_tool {

// Throws std::runtime_error with the driver's words when no GPU can be used.
inline void require_gpu() {
    int devices = 0;
    const cudaError_t status = cudaGetDeviceCount(&devices);
    if (status != cudaSuccess || devices == 0) {
        throw std::runtime_error(std::string("--upstream=cuda needs a CUDA GPU, and none is usable: ") +
                                 (status != cudaSuccess ? cudaGetErrorString(status) : "no device found"));
    }
}

// One stream per trace stream: handle 0 is the default stream, every other a created stream.
// Lasting ones are the process's, made at their first need, kept to its end and declared lasting
// (cuda_events::declare_lasting), as PyTorch keeps its own; others are made for this trace and
// destroyed after it.
class cuda_streams {
public:
    cuda_streams(const trace& t, bool lasting) {
        std::size_t kept = 0;
        for (std::uint64_t handle : t.streams) {
            cudaStream_t stream = nullptr;
            if (handle != 0 && lasting) {
                stream = kept_stream(kept++);
            } else if (handle != 0) {
                detail::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
                created_.push_back(stream);
            }
            refs_.emplace_back(stream);
        }
    }
    cuda_streams(const cuda_streams&) = delete;
    ~cuda_streams() {
        static_cast<void>(cudaDeviceSynchronize());
        for (cudaStream_t stream : created_) static_cast<void>(cudaStreamDestroy(stream));
    }
    [[nodiscard]] std::span<const stream_ref> refs() const noexcept { return refs_; }

private:
    // The process's `index`-th lasting stream (made and declared at its first need).
    static cudaStream_t kept_stream(std::size_t index) {
        static std::vector<cudaStream_t> streams;
        while (streams.size() <= index) {
            cudaStream_t stream = nullptr;
            detail::check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
            streams.push_back(stream);
            static_cast<void>(cuda_events::declare_lasting(stream_ref{stream}));  // past its capacity: an ordinary stream
        }
        return streams[index];
    }

    std::vector<cudaStream_t> created_;
    std::vector<stream_ref> refs_;
};

inline std::vector<composition> cuda_compositions() {
    std::vector<composition> list = compositions_over<cuda_events>([] { return std::make_unique<cuda_device_resource>(); });
    for (auto& c : expandable_compositions<cuda_events>([] { return std::make_unique<cuda_vmm_resource>(cuda_vmm_options{}); })) {
        list.push_back(std::move(c));
    }
    list.push_back({"cuda_async", "cudaMallocAsync from a new pool that keeps what it reserved (reserved: the pool's high-water mark)",
                    [](const trace& t, const run_settings& s) {
                        cuda_async_resource pool;
                        std::uint64_t zero = 0;
                        detail::check_cuda(cudaMemPoolSetAttribute(pool.pool_handle(), cudaMemPoolAttrReservedMemHigh, &zero),
                                           "cudaMemPoolSetAttribute");
                        run_figures figures = measure_replay(t, s, pool, [&pool] { return pool.reserved_bytes(); });
                        detail::check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
                        std::uint64_t high = 0;
                        detail::check_cuda(cudaMemPoolGetAttribute(pool.pool_handle(), cudaMemPoolAttrReservedMemHigh, &high),
                                           "cudaMemPoolGetAttribute");
                        figures.peak_reserved_bytes = static_cast<std::size_t>(high);
                        return figures;
                    }});
    return list;
}

}  // namespace poolkit::replay_tool
