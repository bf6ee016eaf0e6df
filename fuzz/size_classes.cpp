// Fuzzes size_classes over simulated address space with small slabs and a reserve cap, so that
// new slabs, one-block fallbacks, release, the large path and exhaustion all happen often: the cap
// and the capacity are small enough for 96 steps to reach both kinds of exhaustion. An input runs
// at most 96 steps: building the class table (16K entries for 1 MiB classes) costs a third of a
// run, so fewer steps than the driver's default keep it above 1,000 inputs a second.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource addresses{{.capacity = std::size_t{32} << 20}};
    {
        poolkit::size_classes<poolkit::ref<poolkit::simulated_resource>> pool{
            addresses,
            {.classes_per_doubling = 1 + size % 4, .slab_size = std::size_t{16} << (10 + size % 5), .maximum_size = std::size_t{8} << 20}};
        poolkit::fuzz::run(pool, data, size, 64, poolkit::fuzz::default_check_every, 96);
        if (pool.reserved_bytes() != 0) std::abort();
    }
    if (addresses.live_bytes() != 0) std::abort();
    return 0;
}
