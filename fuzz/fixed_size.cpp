// Fuzzes fixed_size over simulated address space: blocks from slabs, other requests passed to
// the upstream, release, and exhaustion under a reserve cap.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource addresses{{.capacity = std::size_t{256} << 20}};
    {
        poolkit::fixed_size<poolkit::ref<poolkit::simulated_resource>> pool{
            addresses,
            {.block_size = std::size_t{64} << (size % 8), .slab_size = std::size_t{4} << 10, .maximum_size = std::size_t{8} << 20}};
        poolkit::fuzz::run(pool, data, size, 8);
        if (pool.reserved_bytes() != 0) std::abort();
    }
    if (addresses.live_bytes() != 0) std::abort();
    return 0;
}
