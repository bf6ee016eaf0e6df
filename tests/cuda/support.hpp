// Fixture parts for GPU tests: device memory is written and read back through the runtime.
#pragma once

#include "../support/conformance.hpp"
#include "../support/sizes.hpp"

#include <cuda_runtime_api.h>

#include <vector>

namespace poolkit::test {

struct device_touch {
    static constexpr bool touchable = true;
    static void fill(void* pointer, std::size_t bytes, unsigned char value) { REQUIRE(cudaMemset(pointer, value, bytes) == cudaSuccess); }
    static bool holds(const void* pointer, std::size_t bytes, unsigned char value) {
        std::vector<unsigned char> copy(bytes);
        REQUIRE(cudaMemcpy(copy.data(), pointer, bytes, cudaMemcpyDefault) == cudaSuccess);
        return host_touch::holds(copy.data(), bytes, value);
    }
};

// A non-blocking stream destroyed with the test; converts to the stream_ref of its handle.
struct scoped_stream {
    cudaStream_t handle{};
    scoped_stream() { REQUIRE(cudaStreamCreateWithFlags(&handle, cudaStreamNonBlocking) == cudaSuccess); }
    scoped_stream(const scoped_stream&) = delete;
    scoped_stream& operator=(const scoped_stream&) = delete;
    ~scoped_stream() { cudaStreamDestroy(handle); }
    operator stream_ref() const { return stream_ref{handle}; }  // NOLINT: implicit, as a stream argument
};

}  // namespace poolkit::test
