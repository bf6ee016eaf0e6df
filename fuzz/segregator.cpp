// Fuzzes segregator<4096, size_classes, best_fit> with both parts on one simulated upstream.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdlib>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    using upstream = poolkit::ref<poolkit::simulated_resource>;
    poolkit::simulated_resource addresses{{.capacity = std::size_t{256} << 20}};
    {
        poolkit::segregator<4096, poolkit::size_classes<upstream>, poolkit::best_fit<upstream>> pools{
            poolkit::size_classes<upstream>{addresses,
                                            {.largest = 4096,  // the threshold: no larger request reaches it
                                             .slab_size = std::size_t{32} << 10,
                                             .maximum_size = std::size_t{32} << 20}},
            poolkit::best_fit<upstream>{addresses, {.initial_size = std::size_t{256} << 10, .maximum_size = std::size_t{96} << 20}}};
        poolkit::fuzz::run(pools, data, size, 128);
        if (pools.small_resource().reserved_bytes() != 0 || pools.large_resource().reserved_bytes() != 0) std::abort();
    }
    if (addresses.live_bytes() != 0) std::abort();
    return 0;
}
