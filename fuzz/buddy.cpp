// Fuzzes buddy over simulated address space with small chunks and a reserve cap, so that
// splitting, merging, chunks of their own, large alignments, release and exhaustion all happen
// (the cap is small enough for the driver's 128 steps to reach it).
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource addresses{{.capacity = std::size_t{256} << 20}};
    {
        poolkit::buddy<poolkit::ref<poolkit::simulated_resource>> pool{addresses,
                                                                       {.chunk_size = std::size_t{64} << (10 + size % 4),
                                                                        .minimum_block = std::size_t{256} << (size % 3),
                                                                        .chunk_alignment = std::size_t{4} << (10 + size % 5),
                                                                        .maximum_size = std::size_t{8} << 20}};
        poolkit::fuzz::run(pool, data, size, 16, 16);  // its check and tables walk every minimum block: sizes up to 1 MiB
        if (pool.reserved_bytes() != 0) std::abort();
    }
    if (addresses.live_bytes() != 0) std::abort();
    return 0;
}
