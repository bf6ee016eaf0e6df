// poolkit::stream_ref: a non-owning handle to a stream of work.
//
// With CUDA it is cuda::stream_ref, so CCCL and poolkit pass streams to each other at no cost.
// Without CUDA it is a plain handle with the same shape; the simulated streams of the CPU tests
// use it. Its default value is the default stream (handle 0), also named default_stream.
#pragma once

#include <poolkit/core/config.hpp>

#include <compare>
#include <cstdint>
#include <functional>

#if POOLKIT_HAS_CUDA
#  include <cuda/stream_ref>
#endif

namespace poolkit {

#if POOLKIT_HAS_CUDA
using stream_handle = cudaStream_t;
using stream_ref = cuda::stream_ref;
#else
// An opaque stream handle; what it points to is up to whoever issued it.
using stream_handle = struct opaque_stream*;

class stream_ref {
public:
    using value_type = stream_handle;

    constexpr stream_ref() noexcept = default;
    constexpr stream_ref(value_type handle) noexcept : handle_(handle) {}  // NOLINT: implicit, as in CCCL
    stream_ref(int) = delete;
    stream_ref(std::nullptr_t) = delete;

    [[nodiscard]] constexpr value_type get() const noexcept { return handle_; }
    friend constexpr bool operator==(stream_ref, stream_ref) noexcept = default;

private:
    value_type handle_ = nullptr;
};
#endif

// The default stream (handle 0). Name it so rather than with stream_ref{}: CCCL 3.1 deprecates
// cuda::stream_ref's default constructor.
inline constexpr stream_ref default_stream{stream_handle{}};

// The handle's bits as an integer: for hashing, printing and trace files.
[[nodiscard]] inline std::uintptr_t stream_id(stream_ref stream) noexcept { return reinterpret_cast<std::uintptr_t>(stream.get()); }

}  // namespace poolkit
