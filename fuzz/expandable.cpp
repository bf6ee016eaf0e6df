// Fuzzes expandable over simulated virtual memory with small granules, spans and a tight physical
// limit, so that claiming spans, mapping, mapping ahead, trimming the cache, raising the peak
// slack, coalescing across a span, alignment padding, physical exhaustion, small requests in old
// large holes (small_in_old_holes) and stitching (large requests served from free allocations
// aliased together, lent and taken back) all happen often, under both mapping policies.
// After the steps every block is freed, release() unmaps everything, and the virtual memory must
// hold no mapped granule.
// Mapping costs a bookkeeping step per piece (granule to 8 granules), so the sizes are kept to a few
// hundred granules — spans of 128 (two bitmap words), a limit of 256, requests up to 128 — and an
// input runs at most 64 steps: enough to claim, fill and exhaust, at over 1,000 inputs a second.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "driver.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <cstdlib>
#include <limits>

namespace {

// One input under one mapping policy: follow_live with options drawn from the input's size (an
// infinite peak_slack, the defaults, keeps what is mapped), or keep_mapped (PyTorch's
// expandable_segments), which unmaps only for the physical limit.
template <class Policy>
void run(const std::uint8_t* data, std::size_t size) {
    constexpr std::size_t granule = std::size_t{64} << 10;
    poolkit::simulated_vmm_resource memory{
        {.capacity = std::size_t{1} << 30, .granularity = granule, .physical_limit = std::size_t{16} << 20}};
    {
        poolkit::expandable<poolkit::ref<poolkit::simulated_vmm_resource>, Policy> pool{
            memory,
            {.span_bytes = std::size_t{8} << 20,
             .small_size = std::size_t{16} << 10,
             .small_span_bytes = std::size_t{1} << 20,
             .rounding = std::size_t{256} << (size % 3),
             .cache_fraction = (size % 4) * 0.05,
             .peak_slack = size % 11 == 0 ? std::numeric_limits<double>::infinity() : (size % 3) * 0.05,  // infinite: the defaults
             .max_peak_slack = (size % 7) * 0.05,  // below peak_slack at times: raised to it
             .allocations_per_remap = size % 50,  // 0 at times: treated as 1
             .mapping_bytes = size % 3 == 0 ? 0 : granule << (size % 4),
             .max_cached_bytes = size % 5 == 0 ? granule * 4 : ~std::size_t{0},
             .small_in_old_holes = (size / 4) % 2 == 0,
             .stitch = (size / 2) % 2 == 0,
             .min_stitch_bytes = size % 13 == 0 ? granule * 8 : 0,  // 0: from one allocation on
             .max_stitches = 1 + size % 3}};  // few: new stitches often give up old ones
        poolkit::fuzz::run(pool, data, size, 128, poolkit::fuzz::default_check_every, 64);
        if (pool.live_bytes() != 0 || pool.reserved_bytes() != 0) std::abort();
    }
    if (memory.mapped_bytes() != 0) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size % 11 == 0) {
        run<poolkit::keep_mapped>(data, size);
    } else {
        run<poolkit::follow_live>(data, size);
    }
    return 0;
}
