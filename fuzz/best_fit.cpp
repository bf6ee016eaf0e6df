// Fuzzes best_fit over simulated address space with small chunks, so that growth, splitting,
// padding for alignment, coalescing, release and exhaustion all happen often.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource addresses{{.capacity = std::size_t{256} << 20}};
    {
        const std::size_t granularity = std::size_t{256} << (size % 3);
        poolkit::best_fit<poolkit::ref<poolkit::simulated_resource>> pool{
            addresses,
            {.initial_size = std::size_t{64} << 10,
             .growth = size % 2 ? poolkit::growth_policy::geometric(2) : poolkit::growth_policy::as_needed(64 << 10),
             .maximum_size = std::size_t{128} << 20,
             .granularity = granularity,
             .minimum_split = granularity << (size % 4)}};
        poolkit::fuzz::run(pool, data, size, 1024);
        if (pool.reserved_bytes() != 0) std::abort();
    }
    if (addresses.live_bytes() != 0) std::abort();
    return 0;
}
