// expandable<Upstream, Policy>: a coalescing best-fit pool over spans of virtual address space whose
// granules are backed by physical memory only while a block needs them (CUDA's virtual memory
// management; PyTorch's expandable_segments).
//
// Upstream is a virtual_memory (cuda_vmm_resource, simulated_vmm_resource) or a poolkit::ref to
// one. The pool claims spans of its address space (options.span_bytes each; a larger request gets
// a span of its own size) and places blocks in them best fit, coalescing freed blocks across the
// whole span: there are no chunk boundaries to strand memory at. Requests up to options.small_size
// go to spans of their own, so that a few live small blocks pin few granules (one of half a
// granule or more that they would map a granule for takes a large span's mapped hole instead).
// A block's granules are mapped when it is placed (the search: detail/expandable_search.hpp). A
// small request takes a placement that needs no mapping among the best-fitting free blocks; a
// large one the placement that maps fewest granules in any free block that fits, smallest block
// first: each granule it maps may be one unmapped elsewhere (a third fewer granules remapped per
// warm pass of the bundled BERT trace than best fit, 80% fewer on GPT-2: docs/virtual_memory.md).
// Where the low end of a block needs no mapping the block goes there, so that blocks pack towards
// the low ends of free ranges and the rest of each stays in one piece (as PyTorch's
// expandable_segments places). A free block keeps its wholly free granules mapped (the cache) until
// the mapping policy (strategy/mapping_policy.hpp) has them unmapped:
//   - before new granules are mapped, as many cached bytes as the policy says (oldest freed
//     first), and then as many ahead of the new block as it says (in large spans: a small span's
//     granules are allocations of their own, so mapping ahead saves nothing). follow_live, the
//     default, unmaps nothing for new mappings with its default options (PyTorch's
//     expandable_segments, as keep_mapped), and with a finite peak_slack keeps mapped memory
//     near live memory;
//   - at a free, while the cache exceeds the policy's most_cached_bytes();
//   - all of them on release(), and whatever the policy says, as many as the upstream's physical
//     limit needs before a map, and all of them when a map fails (then the map is tried again).
// A large span maps in physical allocations of options.mapping_bytes (16 MiB by default: the
// driver's cost per GiB mapped falls from 26.9 ms at 2 MiB to 7.0 at 8 MiB and 2.0 at 32 MiB,
// docs/costs.md; the map and unmap calls and the cache's bookkeeping:
// detail/expandable_mapping.hpp), and only allocations wholly inside a free block are cached and
// unmapped: a live block pins every allocation it touches. Small spans, any span near the
// physical limit, and mapping_bytes of at most a granule (expandable_options::exact_follow()) map
// a physical allocation per granule, so that any wholly free granule can be unmapped.
// With options.stitch (the default; over memory that can alias), a large request whose placement
// would map memory is served instead from free whole allocations scattered through the pool,
// aliased side by side into an address range of its own and lent to it until it is freed, mapping
// only what they lack (detail/expandable_stitches.hpp; GMLake's stitching). A freed stitch keeps
// its aliases for the next request of its size; a trim that may unmap gives the free ones up first,
// and a new stitch at the most a pool keeps first gives up those whose pieces other blocks took.
// Unmapping waits first for all work that may use the memory (the upstream's synchronize(): the
// whole device; under stream_ordered, what its free blocks wait for), so a block freed on a stream
// is never unmapped before that stream's work is done; it happens only on those occasions, never
// on the hot path. An upstream with may_unmap() false (a stream_ordered lane while a CUDA
// capture may run) keeps the cache mapped until a later occasion.
// Complexity: allocate and deallocate O(log n) in the blocks, plus a scan of the mapped-granule
// bits of the block (one word per 64 granules; none while its span has no unmapped granule below
// its highest mapped one, as in a pool that has not unmapped). A small request compares at most
// options.candidates free blocks; a large one stops at the first block that fits with nothing to
// map (usually the first), else scores every free large block that fits and could beat the best
// so far (its cache bounds what a placement in it can find mapped) — only where it then maps.
// Mapping and unmapping cost driver calls, tens of microseconds per physical allocation almost
// whatever its size (docs/costs.md).
// Thread safety: none; wrap in synchronized<>. Alignment: any power of two; blocks start on
// options.rounding. Stream semantics: none; a freed block is reusable at once. Put stream_ordered<>
// around it: each lane claims spans of its own over the shared virtual memory, and gives them back
// at release() and when the lane is dropped.
// Exhaustion: when mapping fails, every cached granule is unmapped and the mapping tried once
// more; then out_of_memory with the live, mapped and cached bytes. When the address space has no
// span left to claim (spans come back at release() and destruction), a smaller span is claimed,
// down to what the request needs; then out_of_memory that says the address space ran out. A
// request larger than the whole address space is refused at once, with no bookkeeping built.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/allocate_or_null.hpp>
#include <poolkit/core/detail/leak_report.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/virtual_memory.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/detail/expandable_invariants.hpp>
#include <poolkit/strategy/detail/expandable_mapping.hpp>
#include <poolkit/strategy/detail/expandable_parts.hpp>
#include <poolkit/strategy/detail/expandable_search.hpp>
#include <poolkit/strategy/detail/expandable_stitches.hpp>
#include <poolkit/strategy/detail/node_pool.hpp>
#include <poolkit/strategy/detail/tiling.hpp>
#include <poolkit/strategy/expandable_options.hpp>
#include <poolkit/strategy/mapping_policy.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <stdexcept>
#include <utility>
#include <vector>

namespace poolkit {

template <class Upstream, mapping_policy Policy = follow_live>
    requires virtual_memory<typename detail::referent<Upstream>::type>
class expandable : public forward_properties<expandable<Upstream, Policy>, Upstream> {
public:
    using upstream_type = Upstream;
    using options_type = expandable_options;
    using policy_type = Policy;

    expandable()
        requires std::default_initializable<Upstream>
        : expandable(Upstream{}, expandable_options{}) {}

    explicit expandable(Upstream upstream, expandable_options options = {})
        : upstream_(std::move(upstream)), options_(options), policy_(options_) {
        grid_.set_granularity(memory().granularity());
        options_.validate(grid_.bytes);
        options_.max_peak_slack = std::max(options_.max_peak_slack, options_.peak_slack);
        options_.allocations_per_remap = std::max<std::size_t>(options_.allocations_per_remap, 1);
        grid_.per_allocation = std::max<std::size_t>(1, options_.mapping_bytes / grid_.bytes);
        options_.candidates = std::clamp(options_.candidates, 1, detail::expandable_parts::max_candidates);
        if (options_.span_bytes == 0) options_.span_bytes = std::max(mapping_type::limit_of(memory()), std::size_t{1} << 30);
        options_.span_bytes = round_to_granule(options_.span_bytes);
        if (options_.small_span_bytes == 0) options_.small_span_bytes = options_.span_bytes / 8;
        options_.small_span_bytes = round_to_granule(std::max(options_.small_span_bytes, options_.small_size * 2));
    }

    expandable(const expandable&) = delete;
    expandable& operator=(const expandable&) = delete;

    // Every mapped granule is unmapped (after the upstream's synchronize()), and every span's
    // address space given back.
    ~expandable() {
        detail::report_leaks("expandable", live_blocks(), live_bytes_);
        stitches_.drop(memory(), true);
        live_.clear();
        small_free_.clear();
        large_free_.clear();
        mapping_.unmap_all(memory(), spans_);
        for (const auto& s : spans_) {
            s->blocks.clear_and_dispose([this](block* b) { blocks_.destroy(b); });
            memory().unclaim(reinterpret_cast<void*>(s->address), s->bytes);
        }
    }

    // Requires: alignment a power of two (else std::invalid_argument). Returns nullptr for 0 bytes.
    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const auto rounded = checked_align_up(bytes, options_.rounding);
        if (!rounded || *rounded > std::numeric_limits<std::size_t>::max() / 2) {
            throw out_of_memory("expandable", figures(bytes, alignment));
        }
        placement found = find(*rounded, alignment);
        policy_.allocated();
        if (found.where != nullptr && found.unmapped == 0) return carve(*found.where, found.start, *rounded, bytes);
        if (void* stitched = stitch(found, *rounded, alignment)) return stitched;
        return map_and_carve(found, bytes, *rounded, alignment);
    }

    // As allocate, but nullptr instead of any exception.
    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        return detail::allocate_or_null(*this, bytes, alignment);
    }

    // As allocate, but only where every granule is mapped already: never maps, never claims.
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        const auto rounded = checked_align_up(bytes, options_.rounding);
        if (!rounded || *rounded > std::numeric_limits<std::size_t>::max() / 2) return nullptr;
        try {
            const placement found = find(*rounded, alignment, 0);
            if (found.where == nullptr || found.unmapped != 0) return nullptr;
            return carve(*found.where, found.start, *rounded, bytes);
        } catch (...) {  // no host memory for a bookkeeping node
            return nullptr;
        }
    }

    // Requires: `pointer` came from allocate(bytes, alignment) of this pool and is not yet freed
    // (asserted in debug builds; otherwise an unknown pointer is ignored). O(log n) plus the bits
    // of the block.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        if (stitch_type* stitched = stitches_.live_at(reinterpret_cast<std::uintptr_t>(pointer))) {
            POOLKIT_ASSERT(checked_align_up(bytes, options_.rounding) == stitched->requested,
                           "deallocate with a size other than the one allocated");
            unstitch(*stitched);
        } else {
            block* freed = take_live(pointer, bytes, alignment, "deallocate of a pointer expandable did not hand out (or freed twice)");
            if (freed == nullptr) return;
            live_bytes_ -= freed->bytes;
            free_block(*freed);
        }
        if (const std::size_t most = policy_.most_cached_bytes(); cached_bytes() > most) {
            try {
                trim(cached_bytes() - most);
            } catch (...) {
                POOLKIT_ASSERT(false, "expandable could not wait for the device before unmapping");
            }
        }
    }
    POOLKIT_CUDA_MR_MEMBERS(expandable);

    // Unmaps every cached granule, after the upstream's synchronize() (PyTorch's empty_cache), and
    // gives back the address space of every span left empty.
    void release() {
        if (may_unmap()) stitches_.drop(memory(), false);
        trim(std::numeric_limits<std::size_t>::max());
        give_back_empty_spans();
    }

    // Whether `pointer` lies inside a live block of this pool. O(log n).
    [[nodiscard]] bool owns(const void* pointer) const noexcept {
        return detail::inside_live<by_address>(live_, pointer) || stitches_.inside_live(reinterpret_cast<std::uintptr_t>(pointer));
    }

    // The walk of core/walk.hpp: each span is a chunk (address space; reserved_bytes() says what
    // is mapped), its blocks in address order. The pieces a stitched block uses are live blocks
    // there (the memory is in use; the stitch's own address range is not a chunk). O(blocks);
    // allocates nothing.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        std::vector<const span*> ordered;
        for (const auto& s : spans_) ordered.push_back(s.get());
        std::sort(ordered.begin(), ordered.end(), [](const span* a, const span* b) { return a->address < b->address; });
        for (const span* s : ordered) detail::visit_tiling(*s, visit);
    }

    // Blocks tile their span, each in the index its state says, and the counts add up
    // (detail/expandable_invariants.hpp says what else).
    void check_invariants() const { detail::expandable_parts::pool_invariants::verify(*this); }

    // Bytes handed out (whole blocks); mapped by this pool (its physical footprint); mapped but
    // wholly free (the cache); the most mapped and the most live at once.
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return mapping_.mapped_granules() * grid_.bytes; }
    [[nodiscard]] std::size_t cached_bytes() const noexcept { return mapping_.cached_granules() * grid_.bytes; }
    [[nodiscard]] std::size_t peak_reserved_bytes() const noexcept { return mapping_.peak_mapped_granules() * grid_.bytes; }
    [[nodiscard]] std::size_t peak_live_bytes() const noexcept { return peak_live_bytes_; }
    [[nodiscard]] std::size_t live_blocks() const noexcept { return live_.size() - stitches_.lent_pieces() + stitches_.live(); }
    // Stitched blocks live now, and stitches kept (live and free).
    [[nodiscard]] std::size_t stitched_blocks() const noexcept { return stitches_.live(); }
    [[nodiscard]] std::size_t stitches() const noexcept { return stitches_.size(); }
    [[nodiscard]] std::size_t chunks() const noexcept { return spans_.size(); }
    // Map and unmap calls this pool made of its upstream (a stitch's aliases among them).
    [[nodiscard]] std::size_t map_calls() const noexcept { return mapping_.map_calls() + stitches_.alias_calls(); }
    [[nodiscard]] std::size_t unmap_calls() const noexcept { return mapping_.unmap_calls() + stitches_.unalias_calls(); }
    [[nodiscard]] const expandable_options& options() const noexcept { return options_; }
    [[nodiscard]] const Policy& policy() const noexcept { return policy_; }
    // The policy's peak slack in force, where it has one (follow_live).
    [[nodiscard]] double peak_slack() const noexcept
        requires requires(const Policy& p) { p.peak_slack(); }
    {
        return policy_.peak_slack();
    }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: only the pool that handed out a block can take it back.
    friend bool operator==(const expandable& a, const expandable& b) noexcept { return &a == &b; }

private:
    friend struct detail::expandable_parts::pool_invariants;

    using block = detail::expandable_parts::block;
    using span = detail::expandable_parts::span;
    using by_size = detail::expandable_parts::by_size;
    using by_address = detail::expandable_parts::by_address;
    using placement = detail::expandable_parts::placement;
    using memory_type = typename detail::referent<Upstream>::type;
    using mapping_type = detail::expandable_parts::mapping<memory_type>;
    using kept = detail::expandable_parts::kept;
    using piece = detail::expandable_parts::piece;
    using stitch_type = detail::expandable_parts::stitch;
    using stitching_type = detail::expandable_parts::stitching<memory_type>;

    memory_type& memory() noexcept { return detail::referent<Upstream>::get(upstream_); }
    const memory_type& memory() const noexcept { return detail::referent<Upstream>::get(const_cast<Upstream&>(upstream_)); }
    // An optional capability of the upstream: false while granules may not be unmapped (a
    // stream-ordered owner while a CUDA capture may run, where only a wait for the whole device
    // would make it safe). The cache then stays mapped until a later trim.
    bool may_unmap() {
        if constexpr (requires(memory_type& m) {
                          { m.may_unmap() } -> std::convertible_to<bool>;
                      }) {
            return memory().may_unmap();
        } else {
            return true;
        }
    }
    std::size_t round_to_granule(std::size_t bytes) const {
        const auto rounded = checked_align_up(std::max(bytes, grid_.bytes), grid_.bytes);
        if (!rounded) throw std::invalid_argument("poolkit: expandable span too large");
        return *rounded;
    }

    bool is_small(std::size_t rounded) const noexcept { return rounded <= options_.small_size; }

    // Where a request goes (detail/expandable_search.hpp); where == nullptr: nothing fits. A large
    // request must map at most `most_unmapped` granules (try_allocate_cached accepts 0). A small
    // request of half a granule or more that its spans would map a granule for goes instead into a
    // large span's mapped hole where one fits it: a new granule would hold little else, while
    // small spans' memory, once mapped, serves no large request (multi-scale vision draws
    // 1.012-1.016 -> 1.001-1.007 of the live peak; docs/virtual_memory.md, "How the defaults were chosen").
    // With options.small_in_old_holes a smaller one goes into the oldest such hole of the cache.
    placement find(std::size_t rounded, std::size_t alignment, std::size_t most_unmapped = std::numeric_limits<std::size_t>::max()) {
        namespace parts = detail::expandable_parts;
        if (!is_small(rounded)) return parts::find_large(grid_, large_free_, rounded, alignment, most_unmapped);
        const placement small = parts::find_small(grid_, small_free_, rounded, alignment, options_.candidates);
        if (small.where != nullptr && small.unmapped == 0) return small;
        if (rounded * 2 >= grid_.bytes) {
            const placement mapped = parts::find_large(grid_, large_free_, rounded, alignment, 0);
            if (mapped.where != nullptr && mapped.unmapped == 0) return mapped;
        } else if (options_.small_in_old_holes) {
            const placement old = parts::find_oldest_mapped(grid_, mapping_.cached(), rounded, alignment, oldest_holes_compared);
            if (old.where != nullptr) return old;
        }
        return small;
    }
    // The cached blocks that small_in_old_holes compares, oldest first (the oldest nearly always
    // serves: 1 and 16 give the same figures on every trace measured).
    static constexpr int oldest_holes_compared = 8;

    kept keep_under(const placement& found, std::size_t rounded) const noexcept {
        const auto [first, last] = grid_.under(*found.where->owner, found.start, rounded);
        return {found.where, first, last};
    }

    // Stitching (detail/expandable_stitches.hpp). A request of at least one physical allocation
    // and min_stitch_bytes whose placement would map memory takes a free stitch of its size (up
    // to a quarter more) whose pieces are all free; else a new stitch of free whole allocations,
    // oldest freed first, where they cover it. Where its placement would map at least a quarter
    // of it, a new stitch may also take as much new memory as they lack, where that is less than
    // the placement would map and the policy would unmap nothing for it (mapped at the low end of
    // the placement's unmapped granules, where the request would have gone). Else nullptr: the
    // placement maps as before. Growing a stitch where a placement maps little takes holes that
    // later requests then grow for (a training trace 1.033 -> 1.069 times its live peak,
    // stitching at any share); docs/virtual_memory.md, "Stitching". `found` is found again where
    // memory was mapped and no stitch made.
    static constexpr std::size_t stitch_least_share = 4;
    // Where a placement maps little, free whole allocations are stitched for the request (rather
    // than mapping a little more) at most this many times between two placements that map; each
    // time the bound is reached the pool maps instead and the bound halves. Where work on other
    // streams lags, the holes shift from step to step and such stitches would be made in every
    // step, each a map call per piece (about 28 us): the halving makes the pool settle, as it does
    // with no lag in its first step (docs/virtual_memory.md, "Stitching").
    static constexpr std::size_t first_little_stitch_bound = 16;

    void* stitch(placement& found, std::size_t rounded, std::size_t alignment) {
        if constexpr (aliasing_virtual_memory<memory_type>) {
            const std::size_t allocation = grid_.per_allocation * grid_.bytes;
            if (!options_.stitch || is_small(rounded) || grid_.per_allocation == 1 || alignment > grid_.bytes ||
                rounded < std::max(allocation, options_.min_stitch_bytes)) {
                return nullptr;
            }
            const std::size_t want = align_up(rounded, grid_.bytes);
            const auto usable = [this](const piece& p) { return free_block_over(p) != nullptr; };
            const auto [again_at, again] = stitches_.free_fitting(want, usable);
            if (again != nullptr) {
                if (void* lent = lend(again_at, *again, rounded)) return lent;
            }
            const std::size_t needed = found.where != nullptr ? found.unmapped * grid_.bytes : want;
            const bool maps_little = needed < want / stitch_least_share;
            if (maps_little && little_stitches_.spent()) return nullptr;
            std::size_t total = 0;
            std::vector<piece> pieces = stitches_.free_pieces(mapping_.cached(), want, total);
            const bool may_grow = !maps_little && total < want && found.where != nullptr && align_up(want - total, allocation) < needed;
            if (total < want && !may_grow) return nullptr;
            if (maps_little && !little_stitches_.take()) return nullptr;
            // At the cap, room is made only for a stitch that would be made.
            if (stitches_.full() && !(may_unmap() && stitches_.give_up_unusable(memory(), usable) > 0)) return nullptr;
            const bool grew = may_grow && map_lacking(found, rounded, want - total);
            if (grew) pieces = stitches_.free_pieces(mapping_.cached(), want, total);
            if (total >= want) {
                const auto [at, made] = stitches_.make(memory(), std::move(pieces), total);
                if (made != nullptr) {
                    if (void* lent = lend(at, *made, rounded)) return lent;
                    stitches_.undo(memory(), at);
                }
            }
            if (grew) found = find(rounded, alignment);
            return nullptr;
        } else {
            static_cast<void>(found), static_cast<void>(rounded), static_cast<void>(alignment);
            return nullptr;
        }
    }

    // Maps `lacking` bytes at the low end of `found`'s unmapped granules, where the physical limit
    // and the policy allow them all: whether anything was mapped (the block's cache refiled).
    bool map_lacking(const placement& found, std::size_t rounded, std::size_t lacking) {
        if (lacking > physical_left() ||
            policy_.unmap_first({live_bytes_ + rounded, peak_live_bytes_, reserved_bytes(), lacking, grid_.bytes}) != 0) {
            return false;
        }
        const auto [first, last] = grid_.under(*found.where->owner, found.start, rounded);
        const bool mapped = mapping_.map_first_unmapped(memory(), *found.where->owner, first, last, lacking / grid_.bytes);
        if (mapped) {
            mapping_.uncache(*found.where);  // its cache grew
            mapping_.cache(*found.where);
        }
        return mapped;
    }

    // Lends `st` for a request of `rounded` bytes, its pieces carved as live blocks of their spans:
    // its address, or nullptr, with nothing lent, where the host has no memory for a node.
    void* lend(std::uintptr_t address, stitch_type& st, std::size_t rounded) noexcept {
        if (!stitches_.lend(
                st, rounded, [this](const piece& p) { take_piece(p); }, [this](const piece& p) { give_piece(p); })) {
            return nullptr;
        }
        live_bytes_ += rounded;
        peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
        return reinterpret_cast<void*>(address);
    }
    // A live stitch freed: its pieces go back to the pool; it keeps its aliases for later.
    void unstitch(stitch_type& st) noexcept {
        live_bytes_ -= st.requested;
        stitches_.take_back(st, [this](const piece& p) { give_piece(p); });
    }
    // A piece out of the free block that holds it, or back: live blocks not counted as live bytes.
    void take_piece(const piece& p) {
        block* over = free_block_over(p);
        POOLKIT_ASSERT(over != nullptr, "a stitch's piece is not free");
        const std::size_t bytes = (p.last - p.first) * grid_.bytes;
        const std::size_t peak = peak_live_bytes_;
        carve(*over, grid_.address(*p.owner, p.first), bytes, bytes);
        live_bytes_ -= bytes;
        peak_live_bytes_ = peak;
    }
    void give_piece(const piece& p) noexcept {
        const std::size_t bytes = (p.last - p.first) * grid_.bytes;
        block* b = take_live(reinterpret_cast<void*>(grid_.address(*p.owner, p.first)), bytes, 1, "a stitch's piece was not lent");
        if (b != nullptr) free_block(*b);
    }
    block* free_block_over(const piece& p) noexcept { return detail::expandable_parts::free_block_over(live_, grid_, p); }

    // A placement that needs mapping (or a new span): maps within the budget, trimming the cache
    // as the policy says, then carves. Strong guarantee.
    void* map_and_carve(placement found, std::size_t bytes, std::size_t rounded, std::size_t alignment) {
        little_stitches_.reset();
        if (found.where == nullptr) {
            block& fresh = claim_span(rounded, alignment);
            const std::uintptr_t start = align_up(fresh.address, alignment);
            found = {&fresh, start, grid_.unmapped_under(*fresh.owner, start, rounded)};
        }
        const std::size_t needed = found.unmapped * grid_.bytes;
        const auto state = [&] { return mapping_state{live_bytes_ + rounded, peak_live_bytes_, reserved_bytes(), needed, grid_.bytes}; };
        // The policy's unmaps, and as many more as the upstream's physical limit needs (it may
        // serve other pools too).
        std::size_t excess = policy_.unmap_first(state());
        if (const std::size_t left = physical_left(); needed > left) excess = std::max(excess, needed - left);
        if (excess > 0 && mapping_.cached_granules() > 0) {
            const std::size_t before = reserved_bytes();
            trim(excess, keep_under(found, rounded));
            policy_.unmapped(before - reserved_bytes(), state());
        }
        // What the policy would map ahead, into the free space beside the block, so that the next
        // requests of a growing workload need no map call of their own; never past the limit. Not
        // in a small span: its granules are allocations of their own, so mapping ahead saves no
        // driver call there, and the ahead can be all a trim left under the peak (5,000 granules
        // mapped at once for one small block, on a varying-length training trace).
        const block& where = *found.where;
        const std::size_t left = physical_left();
        const std::size_t ahead =
            !where.owner->small && left > needed ? align_down(std::min(policy_.map_ahead(state()), left - needed), grid_.bytes) : 0;
        std::uintptr_t first = found.start, last = found.start + rounded;
        if (ahead > 0 && last < where.end()) {
            last = std::min<std::uintptr_t>(where.end(), align_up(last, grid_.bytes) + ahead);
        } else if (ahead > 0 && first > where.address) {
            first = std::max<std::uintptr_t>(
                where.address, align_down(first, grid_.bytes) - std::min<std::uintptr_t>(ahead, align_down(first, grid_.bytes)));
        }
        // Without mapping_bytes the block and what is mapped ahead take one map call; with it the
        // ahead is mapped apart (near the limit too, where both are granule by granule), so that
        // no allocation holds both (the block would pin it), and failing to map it changes
        // nothing: it is a bet.
        const bool apart = grid_.per_allocation > 1;
        const std::uintptr_t own_first = apart ? found.start : first, own_last = apart ? found.start + rounded : last;
        try {
            map_range(*where.owner, own_first, own_last - own_first);
        } catch (const std::bad_alloc&) {
            const std::size_t before = mapping_.cached_granules();
            trim(std::numeric_limits<std::size_t>::max(), keep_under(found, rounded));
            if (mapping_.cached_granules() == before && own_first == found.start && own_last == found.start + rounded) {
                throw out_of_memory("expandable", figures(bytes, alignment));
            }
            try {
                map_range(*found.where->owner, found.start, rounded);
            } catch (const std::bad_alloc&) {
                throw out_of_memory("expandable", figures(bytes, alignment));
            }
        }
        if (apart && (first != own_first || last != own_last)) {
            try {
                map_range(*where.owner, first, last - first);  // only the granules ahead are left unmapped
            } catch (const std::bad_alloc&) {
            }
        }
        return carve(*found.where, found.start, rounded, bytes);
    }

    // What the upstream can still map; the mapping's map and trim (oldest freed first, whole
    // allocations), the trim only where the upstream allows unmapping now.
    std::size_t physical_left() const { return mapping_type::physical_left(memory()); }
    void map_range(span& s, std::uintptr_t start, std::size_t bytes) { mapping_.map_range(memory(), s, start, bytes); }
    // Free stitches alias cached allocations, which may not be unmapped under them: a trim that
    // may unmap gives them up first.
    void trim(std::size_t bytes, kept keep = {}) {
        if (mapping_.cached_granules() == 0 || !may_unmap()) return;
        stitches_.drop(memory(), false);
        mapping_.trim(memory(), true, bytes, keep);
    }

    // Claims a span for a request and files it as one free block: options' span size where the
    // address space has it, else the largest that does down to what the request needs (so that many
    // pools over one address space — stream lanes — share it to the end;
    // detail::expandable_parts::claim_address_space). A request larger than the whole address space
    // is refused at once: the span's bookkeeping (a bit per granule) is built only after the claim
    // succeeded.
    block& claim_span(std::size_t rounded, std::size_t alignment) {
        const bool small = is_small(rounded);
        const std::size_t wanted = small ? options_.small_span_bytes : options_.span_bytes;
        const auto padded = checked_add(rounded, alignment > grid_.bytes ? alignment : 0);
        const auto needed = padded ? checked_align_up(std::max(*padded, grid_.bytes), grid_.bytes) : std::nullopt;
        if (!needed || *needed > memory().capacity()) {
            memory_figures refused = figures(rounded, alignment);
            refused.limit_bytes = memory().capacity();
            refused.address_space_bytes = memory().capacity();
            throw out_of_memory("expandable (request larger than the whole address space)", refused);
        }
        spans_.reserve(spans_.size() + 1);
        const auto [claimed, bytes] = detail::expandable_parts::claim_address_space(memory(), wanted, *needed, grid_.bytes);
        std::unique_ptr<span> fresh;
        block* whole = nullptr;
        try {
            fresh = std::make_unique<span>(reinterpret_cast<std::uintptr_t>(claimed), bytes, grid_.bytes, small);
            whole = blocks_.make(fresh->address, bytes, fresh.get());
        } catch (...) {
            memory().unclaim(claimed, bytes);
            throw;
        }
        fresh->blocks.push_back(*whole);
        spans_.push_back(std::move(fresh));
        free_index().file(*whole);
        return *whole;
    }

    // Gives back the address space of every span that holds no block and no mapped granule.
    void give_back_empty_spans() noexcept {
        std::erase_if(spans_, [this](const std::unique_ptr<span>& s) {
            block& only = s->blocks.front();
            if (!only.free || only.bytes != s->bytes || s->count(0, s->bytes / grid_.bytes, true) != 0) return false;
            free_index().forget(only);
            s->blocks.clear_and_dispose([this](block* b) { blocks_.destroy(b); });
            memory().unclaim(reinterpret_cast<void*>(s->address), s->bytes);
            return true;
        });
    }

    // A block taken out of the live index (marked free) joins the free blocks beside it and is filed.
    void free_block(block& b) noexcept {
        b.requested = 0;
        detail::coalesce(b.owner->blocks, b, blocks_, free_index());
    }

    // The size indexes and the cache, which every free block is filed in (detail/expandable_mapping.hpp).
    detail::expandable_parts::free_indexes<memory_type> free_index() noexcept { return {small_free_, large_free_, mapping_}; }

    // Turns free block `b` into a live block of `rounded` bytes at `start` (every granule under
    // it mapped) for a request of `bytes`, splitting off the free space before and after it.
    // Strong guarantee: the nodes are made before anything changes.
    void* carve(block& b, std::uintptr_t start, std::size_t rounded, std::size_t bytes) {
        detail::split_around(b.owner->blocks, b, start, rounded, 1, blocks_, free_index());
        b.requested = bytes;
        b.free = false;
        detail::expandable_parts::file_live(live_, b);
        recent_live_.remember(b);
        live_bytes_ += b.bytes;
        peak_live_bytes_ = std::max(peak_live_bytes_, live_bytes_);
        return reinterpret_cast<void*>(start);
    }

    // The live block at `pointer` out of the live index, marked free (detail::take_live): found
    // in the recently carved first, else searched from the root.
    block* take_live(void* pointer, std::size_t bytes, std::size_t alignment, const char* who) noexcept {
        if (block* recent = recent_live_.take(reinterpret_cast<std::uintptr_t>(pointer))) {
            return detail::take_live_block(live_, *recent, pointer, bytes, alignment, options_.rounding);
        }
        return detail::take_live<by_address>(live_, pointer, bytes, alignment, options_.rounding, who);
    }

    [[nodiscard]] memory_figures figures(std::size_t bytes, std::size_t alignment) const noexcept {
        return memory_figures::held(bytes, alignment, live_bytes_, reserved_bytes());
    }

    Upstream upstream_;
    expandable_options options_;
    Policy policy_;
    detail::expandable_parts::grid grid_;  // the memory's granularity; granules per physical allocation of a large span
    // Declared before the indexes, so that the indexes go first on destruction.
    detail::node_pool<block> blocks_;
    std::vector<std::unique_ptr<span>> spans_;
    // Invariant: every free block is in the free index of its span's kind, every live block in
    // live_; free blocks with cached granules are in the mapping's cache, oldest freed first.
    detail::expandable_parts::free_blocks small_free_;
    detail::expandable_parts::free_blocks large_free_;
    detail::expandable_parts::live_blocks live_;
    detail::expandable_parts::recent_live recent_live_;  // a shortcut into live_ for frees
    mapping_type mapping_{grid_};  // mapped granules, the cache, map and unmap calls
    // Stitched blocks; their pieces are live blocks of the spans (lent), not counted in live_bytes_.
    stitching_type stitches_{grid_, options_.max_stitches};
    // Stitches tried where the placement mapped little, since the pool last mapped a placement.
    detail::expandable_parts::halving_bound little_stitches_{first_little_stitch_bound};
    std::size_t live_bytes_ = 0;
    std::size_t peak_live_bytes_ = 0;
};

}  // namespace poolkit
