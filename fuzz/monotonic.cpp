// Fuzzes monotonic over simulated address space with small chunks and a reserve cap: bumping,
// stack-order give-back, starting over, reuse of wholly free chunks, release and exhaustion.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource addresses{{.capacity = std::size_t{256} << 20}};
    {
        poolkit::monotonic<poolkit::ref<poolkit::simulated_resource>> arena{
            addresses,
            {.initial_size = std::size_t{16} << (10 + size % 4),
             .growth = size % 2 ? poolkit::growth_policy::geometric(2) : poolkit::growth_policy::fixed_step(64 << 10),
             .maximum_size = std::size_t{64} << 20}};
        poolkit::fuzz::run(arena, data, size, 256);
        if (arena.reserved_bytes() != 0) std::abort();
    }
    if (addresses.live_bytes() != 0) std::abort();
    return 0;
}
