// caching_pool<Upstream>: the placement rules of PyTorch's CUDA caching allocator, made of best_fit pools.
//
// Requests round up to options.rounding (512 B), or to one of options.power2_divisions steps per
// power of two when that is set. Rounded requests up to options.small_size (1 MiB) come from a
// small best_fit pool of options.small_chunk (2 MiB) chunks, split down to the rounding; larger
// ones from a large pool whose chunks grow as options.large_growth says and whose blocks split
// only when more than options.small_size would remain; requests of options.max_split_size or more
// from an oversize pool whose blocks are never split, so that they cannot fragment the large pool.
// Where it departs from PyTorch (both options, on by default, measured on the bundled traces with
// poolkit-replay): large chunks are 256 MiB (PyTorch: 20 MiB, or the request rounded to 2 MiB),
// and before the large pool takes a new chunk it returns its wholly free chunks upstream
// (release_before_growth), so memory freed by one phase of a workload does not sit beside the
// memory the next phase grows into. Peak reserved / peak live: 1.43 / 1.03 / 1.03 on the BERT,
// GPT-2 and ResNet traces, against PyTorch's 2.91 / 1.09 / 1.19, with no upstream call once warm.
// Complexity: one size test, then the chosen best_fit's O(log n). Thread safety: none (wrap in
// synchronized<>, or use the presets). Alignment: any power of two (best_fit's). Stream
// semantics: none; stream_ordered<..., lanes<caching_pool>> is the caching allocator. Exhaustion: each pool
// releases its wholly free chunks and retries (best_fit's rule), then out_of_memory; release()
// returns every wholly free chunk of all three pools (empty_cache).
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/detail/walk_merge.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/best_fit.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace poolkit {

struct caching_options {
    // Every request rounds up to a multiple of this power of two.
    std::size_t rounding = 512;
    // If 2 or more (a power of two), a request above `rounding` times this rounds up to one of
    // this many steps per power of two (PyTorch's roundup_power2_divisions): fewer distinct sizes,
    // more reuse, some waste.
    std::size_t power2_divisions = 0;
    // Rounded requests up to this size use the small pool.
    std::size_t small_size = std::size_t{1} << 20;
    // Chunk size of the small pool.
    std::size_t small_chunk = std::size_t{2} << 20;
    // How the large pool grows: 256 MiB chunks (or the request, when larger). Small workloads on
    // small GPUs may prefer growth_policy::as_needed(2 MiB), PyTorch's rule for large requests.
    growth_policy large_growth = growth_policy::fixed_step(std::size_t{256} << 20);
    // Requests of at least this size get whole, never-split blocks of their own pool.
    std::size_t max_split_size = std::numeric_limits<std::size_t>::max();
    // Before the large or oversize pool takes a new chunk, it returns its wholly free chunks to the
    // upstream (cudaFree synchronizes: this happens only on growth, never once a workload is warm).
    bool release_before_growth = true;

    // Throws std::invalid_argument, naming the option and its rule, for options no caching_pool
    // takes: a rounding that is not a power of two, power2_divisions above 1 that is not one, a
    // small_chunk of 0 or below small_size, a large_growth amount of 0. caching_pool's constructor
    // calls it; call it to check options before a pool is made.
    void validate() const {
        if (!is_power_of_two(rounding)) throw std::invalid_argument("poolkit: caching_options.rounding must be a power of two");
        if (power2_divisions > 1 && !is_power_of_two(power2_divisions)) {
            throw std::invalid_argument("poolkit: caching_options.power2_divisions must be 0, 1 or a power of two");
        }
        if (small_chunk == 0) throw std::invalid_argument("poolkit: caching_options.small_chunk must be positive");
        if (small_chunk < small_size) {
            throw std::invalid_argument("poolkit: caching_options.small_chunk (" + std::to_string(small_chunk) +
                                        ") must hold a small request: at least small_size (" + std::to_string(small_size) + ")");
        }
        if (large_growth.amount == 0) throw std::invalid_argument("poolkit: caching_options.large_growth amount must be positive");
    }
};

template <resource Upstream>
class caching_pool : public forward_properties<caching_pool<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;
    using options_type = caching_options;

    caching_pool()
        requires std::default_initializable<Upstream>
        : caching_pool(Upstream{}) {}

    explicit caching_pool(Upstream upstream, caching_options options = {})
        : upstream_(std::move(upstream)),
          options_(validated(options)),
          small_(ref<Upstream>(upstream_), small_options(options_)),
          large_(ref<Upstream>(upstream_), large_options(options_, false)),
          oversize_(ref<Upstream>(upstream_), large_options(options_, true)) {}

    caching_pool(const caching_pool&) = delete;
    caching_pool& operator=(const caching_pool&) = delete;
    // The pools refer to upstream_ through refs: moving would leave them pointing at the old one.
    caching_pool(caching_pool&&) = delete;

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const std::size_t rounded = rounded_or_zero(bytes);
        if (rounded == 0) throw out_of_memory("caching_pool", figures(bytes, alignment));
        pool& chosen = pool_for(rounded);
        const std::size_t asked = forwarded(bytes, rounded);
        if (options_.release_before_growth && &chosen != &small_) {
            if (void* pointer = chosen.try_allocate_cached(asked, alignment)) return pointer;
            chosen.release();
        }
        return chosen.allocate(asked, alignment);
    }

    void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        const std::size_t rounded = rounded_or_zero(bytes);
        if (rounded == 0) return nullptr;
        return pool_for(rounded).try_allocate_cached(forwarded(bytes, rounded), alignment);
    }

    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        const std::size_t rounded = rounded_or_zero(bytes);
        POOLKIT_ASSERT(rounded != 0, "deallocate with a size no allocation could have had");
        if (rounded == 0) return;
        pool_for(rounded).deallocate(pointer, forwarded(bytes, rounded), alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(caching_pool);

    void release() noexcept {
        small_.release();
        large_.release();
        oversize_.release();
    }

    [[nodiscard]] bool owns(const void* pointer) const noexcept {
        return small_.owns(pointer) || large_.owns(pointer) || oversize_.owns(pointer);
    }

    void check_invariants() const {
        small_.check_invariants();
        large_.check_invariants();
        oversize_.check_invariants();
    }

    // The walk of walk.hpp over the small, large and oversize pools together: chunks in address
    // order, blocks with the bytes asked for (the rounded size where power2_divisions rounded
    // it). O(blocks + chunks log chunks); the merge keeps the visits on the host heap.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        detail::walk_parts(visit, small_, large_, oversize_);
    }

    [[nodiscard]] std::size_t live_bytes() const noexcept { return small_.live_bytes() + large_.live_bytes() + oversize_.live_bytes(); }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept {
        return small_.reserved_bytes() + large_.reserved_bytes() + oversize_.reserved_bytes();
    }
    [[nodiscard]] std::size_t cached_bytes() const noexcept { return reserved_bytes() - live_bytes(); }
    [[nodiscard]] const caching_options& options() const noexcept { return options_; }

    // The size a request of `bytes` occupies: the rounding rules above. Nothing on overflow.
    [[nodiscard]] std::optional<std::size_t> round(std::size_t bytes) const noexcept {
        if (bytes == 0) return 0;
        const std::size_t rounded = rounded_or_zero(bytes);
        if (rounded == 0) return std::nullopt;
        return rounded;
    }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    friend bool operator==(const caching_pool& a, const caching_pool& b) noexcept { return &a == &b; }

private:
    using pool = best_fit<ref<Upstream>>;

    // round() for the hot paths, 0 for overflow (bytes > 0): a plain size_t, which the compiler
    // keeps in registers where an optional returned from an out-of-line copy went through memory.
    [[nodiscard]] std::size_t rounded_or_zero(std::size_t bytes) const noexcept {
        const std::size_t divisions = options_.power2_divisions;
        if (divisions > 1 && bytes / divisions > options_.rounding) {
            const std::size_t step = std::bit_floor(bytes) / std::bit_floor(divisions);
            const std::size_t remainder = bytes & (step - 1);  // step is a power of two
            if (remainder == 0) return bytes;
            return bytes > std::numeric_limits<std::size_t>::max() - (step - remainder) ? 0 : bytes + (step - remainder);
        }
        const std::size_t mask = options_.rounding - 1;
        return bytes > std::numeric_limits<std::size_t>::max() - mask ? 0 : (bytes + mask) & ~mask;
    }

    static caching_options validated(caching_options options) {
        options.validate();
        return options;
    }
    static best_fit_options small_options(const caching_options& options) {
        best_fit_options result;
        result.initial_size = options.small_chunk;
        result.growth = growth_policy::fixed_step(options.small_chunk);
        result.granularity = options.rounding;
        result.minimum_split = options.rounding;
        return result;
    }
    static best_fit_options large_options(const caching_options& options, bool oversize) {
        best_fit_options result;
        result.initial_size = 0;
        result.growth = oversize ? growth_policy::as_needed(options.rounding) : options.large_growth;
        result.granularity = options.rounding;
        // Large blocks split only when more than a small request would remain; oversize never.
        result.minimum_split = oversize ? std::numeric_limits<std::size_t>::max() : options.small_size + 1;
        return result;
    }

    // What a pool is asked for: the bytes themselves where the pool's own rounding (to the
    // granularity, options.rounding) gives `rounded`, so that its blocks keep the request size;
    // else `rounded`.
    [[nodiscard]] std::size_t forwarded(std::size_t bytes, std::size_t rounded) const noexcept {
        return checked_align_up(bytes, options_.rounding) == rounded ? bytes : rounded;
    }

    pool& pool_for(std::size_t rounded) noexcept {
        if (rounded <= options_.small_size) return small_;
        return rounded < options_.max_split_size ? large_ : oversize_;
    }

    memory_figures figures(std::size_t bytes, std::size_t alignment) const noexcept {
        return memory_figures::held(bytes, alignment, live_bytes(), reserved_bytes());
    }

    Upstream upstream_;
    caching_options options_;
    pool small_;
    pool large_;
    pool oversize_;
};

static_assert(walkable<caching_pool<detail::resource_archetype<>>>);

static_assert(resource_with<caching_pool<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_try_allocate_cached<caching_pool<detail::resource_archetype<>>> &&
              has_release<caching_pool<detail::resource_archetype<>>> && has_owns<caching_pool<detail::resource_archetype<>>> &&
              has_check_invariants<caching_pool<detail::resource_archetype<>>> && walkable<caching_pool<detail::resource_archetype<>>>);

}  // namespace poolkit
