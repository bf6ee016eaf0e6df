// Fuzzes fallback<best_fit capped small, buddy>, both on one simulated upstream, so that
// requests spill to the secondary and frees are routed by the primary's owns(), and both run out
// (the secondary's cap is small enough for 96 steps to reach it). An input runs at most 96 steps:
// every spill costs the primary's out_of_memory, its message formatted, thrown and caught.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using upstream = poolkit::ref<poolkit::simulated_resource>;
    poolkit::simulated_resource addresses{{.capacity = std::size_t{256} << 20}};
    {
        poolkit::fallback<poolkit::best_fit<upstream>, poolkit::buddy<upstream>> pools{
            poolkit::best_fit<upstream>{addresses,
                                        {.initial_size = std::size_t{1} << 20, .maximum_size = std::size_t{1} << (18 + size % 4)}},
            poolkit::buddy<upstream>{addresses, {.chunk_size = std::size_t{1} << 20, .maximum_size = std::size_t{8} << 20}}};
        poolkit::fuzz::run(pools, data, size, 16, 16, 96);  // buddy walks every minimum block (check, tables): sizes up to 1 MiB
        if (pools.primary_resource().reserved_bytes() != 0 || pools.secondary_resource().reserved_bytes() != 0) std::abort();
    }
    if (addresses.live_bytes() != 0) std::abort();
    return 0;
}
