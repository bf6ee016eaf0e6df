// Fuzzes caching_pool (small, large and oversize pools over one simulated upstream) with small
// chunks, power-of-two rounding divisions, a max_split_size and a capacity near what the steps
// reach, so that rounding, splitting, whole blocks, release before growth and exhaustion happen.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource memory{{.capacity = std::size_t{64} << (20 + size % 3)}};
    {
        poolkit::caching_options options;
        options.power2_divisions = size % 2 == 0 ? 0 : std::size_t{1} << (1 + size % 3);
        options.small_size = std::size_t{16} << 10;
        options.small_chunk = std::size_t{64} << 10;
        options.large_growth = size % 3 == 0 ? poolkit::growth_policy::as_needed(std::size_t{64} << 10)
                                             : poolkit::growth_policy::fixed_step(std::size_t{4} << 20);
        options.max_split_size = size % 5 == 0 ? std::size_t{2} << 20 : ~std::size_t{0};
        options.release_before_growth = size % 7 != 0;
        poolkit::caching_pool<poolkit::ref<poolkit::simulated_resource>> pool{memory, options};
        poolkit::fuzz::run(pool, data, size, 256);
        if (pool.live_bytes() != 0 || pool.reserved_bytes() != 0) std::abort();
    }
    if (memory.live_bytes() != 0) std::abort();
    return 0;
}
