// expandable_options: what expandable<Upstream, Policy> (strategy/expandable.hpp) is built with —
// its address space and placement, and the figures its mapping policy reads.
#pragma once

#include <poolkit/core/alignment.hpp>

#include <cmath>
#include <cstddef>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace poolkit {

struct expandable_options {
    // Address space claimed at a time, rounded up to whole granules; a larger request claims a
    // span of its own size. 0: the physical limit, at least 1 GiB: one span holds all the memory
    // there is, so a pool's large blocks never split across spans (as PyTorch's
    // expandable_segments keeps one segment per stream).
    std::size_t span_bytes = 0;
    // Requests up to this many bytes are placed in small spans, apart from the large blocks.
    std::size_t small_size = std::size_t{1} << 20;
    // Address space of each small span; 0: an eighth of span_bytes.
    std::size_t small_span_bytes = 0;
    // Block sizes round up to this power of two.
    std::size_t rounding = 512;
    // The rest are read by the mapping policies (strategy/mapping_policy.hpp): follow_live reads them
    // all, keep_mapped none.
    // How far mapped memory may exceed live memory while it grows past its peak (mapped ahead, in
    // large spans only).
    double cache_fraction = 0.02;
    // How far mapped memory may stay above the peak of live memory before the cache is unmapped
    // for new mappings, at first: more slack, fewer remaps when shapes vary, a larger footprint.
    // Infinite (the default): nothing is unmapped for new mappings and nothing mapped ahead —
    // PyTorch expandable_segments' policy (keep_mapped). Over six passes of every trace measured it
    // reserves no more than following live memory does on all but two, and never remaps once
    // settled; following it (0) remapped on BERT in every pass, to 1.28 of live, where keeping
    // settles at 1.235 (docs/virtual_memory.md, "How the defaults were chosen").
    double peak_slack = std::numeric_limits<double>::infinity();
    // The most the pool raises peak_slack to while following live memory costs many remaps: each
    // time it has unmapped a quarter of its peak live bytes' worth of granules for new mappings in
    // fewer than allocations_per_remap allocations per granule, the slack grows a quarter of the
    // way from peak_slack to this. Never below peak_slack; equal to it, mapped memory follows
    // live memory whatever that costs (exact_follow()). Where shapes vary widely, following that
    // closely remaps on most calls, each tens of microseconds (docs/virtual_memory.md).
    double max_peak_slack = 0.2;
    std::size_t allocations_per_remap = 100;
    // Bytes of each physical allocation of a large span, aligned to it within the span: 0 or a
    // power of two; at most a granule means a granule. The driver charges per allocation mapped
    // and unmapped, whatever its size, so larger ones cut the cost of remapping many times over
    // (docs/costs.md), but an allocation is unmapped, or stitched, only when all of it is free: a
    // live block pins every allocation it touches. 16 MiB: a hole between live blocks holds more
    // whole allocations for stitches than at 32 MiB (30 traces of 77 lower, 5 higher,
    // docs/virtual_memory.md, "Stitching"), for half again as many physical allocations created
    // while the pool grows. Small spans map a granule per allocation whatever this says.
    std::size_t mapping_bytes = std::size_t{16} << 20;
    // Most bytes of cached granules at any time; past it a free unmaps the oldest cache.
    std::size_t max_cached_bytes = std::numeric_limits<std::size_t>::max();
    // Free blocks for small requests (best fit first, at most 64) compared for a placement that
    // needs no mapping; large requests compare every free block that fits.
    int candidates = 8;
    // A small request under half a granule that its small spans would map a granule for goes
    // instead into the large spans' free block that has kept mapped granules longest, where it
    // fits with nothing to map: the two regions then share one peak, and an old hole is one that
    // growing requests have not come back to, and no small span creeps a granule a pass. On an
    // H100, 66 of 125 traces lower (generation draws 1.022-1.025 -> 1.004-1.008 of the live peak)
    // and 4 higher, two of them half a point above PyTorch ES (kv_serving_s5 1.064 -> 1.071); a
    // live small block there pins its large allocation at release(). Off by default for those
    // (docs/virtual_memory.md, "Measured against the peers").
    bool small_in_old_holes = false;
    // Serve a large request that would map new memory from free physical allocations scattered
    // through the pool, aliased into an address range of its own (GMLake's stitching). Keeps the
    // footprint near the peak of live memory where large blocks come and go in varying sizes
    // (docs/virtual_memory.md, "Stitching"). Only over a virtual memory with alias(), as both
    // models have; over one without, the pool never stitches.
    bool stitch = true;
    // Requests of fewer bytes (or of less than one physical allocation) never stitch: a stitch
    // lends pieces of holes that smaller, growing requests would otherwise fill (generation and
    // KV-cache traces rose above the best peer's footprint with stitches from 8 or 16 MiB).
    std::size_t min_stitch_bytes = std::size_t{32} << 20;
    // The most stitches a pool keeps, live and free; each holds address space and its aliases
    // until release(). At this many, a new stitch first gives up the free ones whose pieces other
    // blocks took since, after one wait (docs/virtual_memory.md, "Stitching"). At least 1.
    std::size_t max_stitches = 64;

    // Mapped memory following live memory as closely as the placement allows, whatever it costs
    // in driver calls: no slack, none raised, a physical allocation per granule
    // (docs/virtual_memory.md, "Choosing a preset").
    [[nodiscard]] static constexpr expandable_options exact_follow() noexcept {
        expandable_options options;
        options.peak_slack = 0;
        options.max_peak_slack = 0;
        options.mapping_bytes = 0;
        return options;
    }

    // Throws std::invalid_argument naming the option and its rule, for the memory's granularity:
    // rounding a power of two of at most a granule; cache_fraction finite and at least 0;
    // peak_slack and max_peak_slack at least 0 or infinite; mapping_bytes 0 or a power of two;
    // max_stitches at least 1; sizes at most 2^48 bytes.
    void validate(std::size_t granularity) const {
        if (!is_power_of_two(rounding) || rounding > granularity) {
            throw std::invalid_argument("poolkit: expandable_options.rounding must be a power of two of at most a granule (" +
                                        std::to_string(granularity) + " bytes)");
        }
        if (!std::isfinite(cache_fraction) || cache_fraction < 0) {
            throw std::invalid_argument("poolkit: expandable_options.cache_fraction must be a finite number of at least 0");
        }
        for (const auto& [name, value] : {std::pair{"peak_slack", peak_slack}, std::pair{"max_peak_slack", max_peak_slack}}) {
            if (std::isnan(value) || value < 0) {
                throw std::invalid_argument(std::string("poolkit: expandable_options.") + name +
                                            " must be at least 0, or infinity (nothing unmapped for new mappings)");
            }
        }
        if (max_stitches == 0) throw std::invalid_argument("poolkit: expandable_options.max_stitches must be at least 1");
        if (mapping_bytes != 0 && !is_power_of_two(mapping_bytes)) {
            throw std::invalid_argument("poolkit: expandable_options.mapping_bytes must be 0 or a power of two");
        }
        constexpr std::size_t most_address_bytes = std::size_t{1} << 48;
        for (const auto& [name, value] :
             {std::pair{"span_bytes", span_bytes}, std::pair{"small_span_bytes", small_span_bytes}, std::pair{"small_size", small_size},
              std::pair{"mapping_bytes", mapping_bytes}, std::pair{"min_stitch_bytes", min_stitch_bytes}}) {
            if (value > most_address_bytes) {
                throw std::invalid_argument(std::string("poolkit: expandable_options.") + name + " must be at most 2^48 bytes (256 TiB)");
            }
        }
    }
};

}  // namespace poolkit
