// Fixture parts for GPU tests: device memory is written and read back through the runtime.
#pragma once

#include "../support/conformance.hpp"

#include <cuda_runtime_api.h>

#include <vector>

namespace poolkit::test {

struct device_touch {
    static constexpr bool touchable = true;
    static void fill(void* pointer, std::size_t bytes, unsigned char value) {
        REQUIRE(cudaMemset(pointer, value, bytes) == cudaSuccess);
    }
    static bool holds(const void* pointer, std::size_t bytes, unsigned char value) {
        std::vector<unsigned char> copy(bytes);
        REQUIRE(cudaMemcpy(copy.data(), pointer, bytes, cudaMemcpyDefault) == cudaSuccess);
        return host_touch::holds(copy.data(), bytes, value);
    }
};

}  // namespace poolkit::test
