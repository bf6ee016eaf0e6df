// Mapping policies of expandable<Upstream, Policy>: how much physical memory the pool keeps mapped
// beyond its live blocks. The pool places blocks and maps and unmaps; the policy answers, with
// figures the pool gives it (mapping_state):
//   - before granules are mapped for a request: how many cached bytes to unmap first (the pool
//     unmaps the oldest freed first), then how many to map ahead beside the new block;
//   - after a free: the most bytes the cache may hold.
// It hears of each allocation and of each unmap it asked for, to adapt. Whatever the policy says,
// the pool never maps past the upstream's physical limit (it unmaps cache first), and when a map
// fails it unmaps the whole cache and tries once more.
//
// | expression | returns | meaning |
// | P(options) | | built from the pool's expandable_options (it reads the fields it uses) |
// | p.unmap_first(state) | size_t | cached bytes to unmap before mapping state.needed_bytes |
// | p.map_ahead(state) | size_t | bytes to map beyond the block, after those unmaps (state updated) |
// | p.allocated() | void | one allocate call (on the hot path: keep it a counter) |
// | p.unmapped(bytes, state) | void | the pool unmapped `bytes` for unmap_first |
// | cp.most_cached_bytes() | size_t | after a free, the cache is trimmed to this |
//
// follow_live (expandable's default) keeps mapped memory near live memory, as near as its
// options.peak_slack says: by default (infinite) not at all, which is what keep_mapped, PyTorch
// expandable_segments' policy, does. docs/virtual_memory.md compares them.
#pragma once

#include <poolkit/strategy/expandable_options.hpp>

#include <algorithm>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <limits>

namespace poolkit {

// What the pool tells its policy when a placement needs `needed_bytes` of new mappings.
struct mapping_state {
    std::size_t live_bytes = 0;  // live once the request is served
    std::size_t peak_live_bytes = 0;  // the most live at once before the request
    std::size_t mapped_bytes = 0;  // mapped by the pool now
    std::size_t needed_bytes = 0;  // to map for the request
    std::size_t granularity = 0;
};

template <class P>
concept mapping_policy =
    std::constructible_from<P, const expandable_options&> && requires(P& p, const P& cp, const mapping_state& state, std::size_t bytes) {
        { cp.unmap_first(state) } -> std::convertible_to<std::size_t>;
        { cp.map_ahead(state) } -> std::convertible_to<std::size_t>;
        p.allocated();
        p.unmapped(bytes, state);
        { cp.most_cached_bytes() } -> std::convertible_to<std::size_t>;
    };

// Mapped memory follows live memory. Before new granules are mapped, the cache is unmapped until
// the mapped bytes stay within the larger of the peak of live bytes so far (times 1 + the peak
// slack) and the live bytes after the request times (1 + cache_fraction); what that bound leaves
// without the slack is mapped ahead, so that a growing workload needs few map calls. The slack
// starts at options.peak_slack. Infinite (the default), nothing is unmapped for new mappings and
// nothing mapped ahead: keep_mapped's policy, which settles where following live memory keeps
// remapping (docs/virtual_memory.md, "How the defaults were chosen"). Given a larger options.max_peak_slack,
// a finite slack rises towards it while those unmaps come often (more than one granule per
// options.allocations_per_remap allocations, over windows of a quarter of the peak): where shapes
// vary so much that following live memory would remap on most calls, the pool keeps that much
// more mapped instead. A free trims the cache
// to options.max_cached_bytes.
class follow_live {
public:
    explicit follow_live(const expandable_options& options) noexcept
        : cache_fraction_(options.cache_fraction),
          first_slack_(options.peak_slack),
          most_slack_(std::max(options.max_peak_slack, options.peak_slack)),
          allocations_per_remap_(std::max<std::size_t>(options.allocations_per_remap, 1)),
          most_cached_bytes_(options.max_cached_bytes),
          slack_(options.peak_slack) {}

    // Down to the bound: the larger of the peak times (1 + slack) and the live bytes times
    // (1 + cache_fraction).
    [[nodiscard]] std::size_t unmap_first(const mapping_state& state) const noexcept {
        if (keeps()) return 0;
        const double bound = std::max(static_cast<double>(state.peak_live_bytes) * (1.0 + slack_), growing(state));
        const double excess = static_cast<double>(state.mapped_bytes + state.needed_bytes) - bound;
        return excess > 0 ? static_cast<std::size_t>(std::ceil(excess)) : 0;
    }
    // Up to the bound without the slack, which only spares remaps.
    [[nodiscard]] std::size_t map_ahead(const mapping_state& state) const noexcept {
        if (keeps()) return 0;
        const double headroom = std::max(static_cast<double>(state.peak_live_bytes), growing(state)) -
                                static_cast<double>(state.mapped_bytes + state.needed_bytes);
        return headroom > 0 ? static_cast<std::size_t>(headroom) : 0;
    }

    void allocated() noexcept { ++allocations_; }

    // Over windows of a quarter of the peak's granules unmapped for plans, a window reached in
    // fewer than allocations_per_remap allocations per granule raises the slack a quarter of the
    // way to max_peak_slack: following live memory costs more in driver calls and device waits
    // than the memory it saves.
    void unmapped(std::size_t bytes, const mapping_state& state) noexcept {
        if (keeps()) return;
        remapped_granules_ += bytes / state.granularity;
        const std::size_t window = std::max<std::size_t>(16, state.peak_live_bytes / state.granularity / 4);
        if (remapped_granules_ < window) return;
        if (allocations_ / allocations_per_remap_ < remapped_granules_) {
            slack_ = std::min(most_slack_, slack_ + (most_slack_ - first_slack_) / 4);
        }
        remapped_granules_ = 0;
        allocations_ = 0;
    }

    [[nodiscard]] std::size_t most_cached_bytes() const noexcept { return most_cached_bytes_; }
    // The slack in force: options.peak_slack, raised towards options.max_peak_slack by remaps.
    [[nodiscard]] double peak_slack() const noexcept { return slack_; }

private:
    // An infinite slack: nothing is unmapped for new mappings, nothing mapped ahead (keep_mapped).
    bool keeps() const noexcept { return std::isinf(slack_); }
    double growing(const mapping_state& state) const noexcept { return static_cast<double>(state.live_bytes) * (1.0 + cache_fraction_); }

    double cache_fraction_;
    double first_slack_;
    double most_slack_;
    std::size_t allocations_per_remap_;
    std::size_t most_cached_bytes_;
    double slack_;  // the peak slack in force
    std::size_t remapped_granules_ = 0;  // unmapped for plans in this window
    std::size_t allocations_ = 0;  // allocate calls in this window
};

// What PyTorch's expandable_segments does: every granule mapped stays mapped until release() (its
// empty_cache) or a map fails; nothing is mapped ahead. The footprint is the peak of what the
// placement ever needed at once. A baseline, and the policy for workloads whose peak recurs.
class keep_mapped {
public:
    explicit keep_mapped(const expandable_options&) noexcept {}
    [[nodiscard]] std::size_t unmap_first(const mapping_state&) const noexcept { return 0; }
    [[nodiscard]] std::size_t map_ahead(const mapping_state&) const noexcept { return 0; }
    void allocated() noexcept {}
    void unmapped(std::size_t, const mapping_state&) noexcept {}
    [[nodiscard]] std::size_t most_cached_bytes() const noexcept { return std::numeric_limits<std::size_t>::max(); }
};

static_assert(mapping_policy<follow_live> && mapping_policy<keep_mapped>);

}  // namespace poolkit
