// fixed_size<Upstream>: a pool of blocks of one size, carved from slabs taken from Upstream.
//
// Requests of at most options.block_size bytes, aligned to at most the block alignment (the
// largest power of two dividing block_size, at most options.slab_alignment), get a block; any
// other request goes straight to the upstream, like D's FreeList. Bookkeeping (free stack, live
// bitmap per slab) lives in host records, never in the slabs.
// Complexity: allocate O(1) while a slab has a free block; deallocate O(1) into the slab last
// used, else O(log slabs).
// Thread safety: none; wrap in synchronized<>.
// Alignment: any power of two (the upstream serves what the blocks cannot).
// Stream semantics: none; a freed block is reusable at once. Put stream_ordered<> around it.
// Exhaustion: it asks for a full slab, then a slab of one block, then returns every wholly free
// slab and asks once more, then throws out_of_memory with the live, reserved and cached bytes.
// Bad input: a free of a pool block that is not live (a foreign or interior pointer, a second
// free, a size that is not one for a block) is a failed POOLKIT_ASSERT, and ignored without
// assertions. A free of a request passed on is checked before it reaches the upstream: with
// POOLKIT_ENABLE_ASSERTS every block passed on is remembered (one host record each), and a free
// of one not live, or with another size, is a failed POOLKIT_ASSERT instead of a crash inside the
// upstream. Without assertions such a free that cannot be right (none passed on is live, more
// bytes than are live, or a pointer the upstream says it does not own, where it has owns()) is
// ignored; the counters never go below zero. Only owns() tells a second free from a right one
// while another block passed on is live.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/detail/leak_report.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/detail/slabs.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>
#include <vector>
#if POOLKIT_ENABLE_ASSERTS
#  include <unordered_map>
#endif

namespace poolkit {

struct fixed_size_options {
    // The size of every block.
    std::size_t block_size = 256;
    // Bytes a slab aims for; a slab holds at least one block.
    std::size_t slab_size = std::size_t{64} << 10;
    // The most alignment a slab is asked for.
    std::size_t slab_alignment = 4096;
    // Most bytes reserved for slabs at once.
    std::size_t maximum_size = std::numeric_limits<std::size_t>::max();
};

template <resource Upstream>
class fixed_size : public forward_properties<fixed_size<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;
    using options_type = fixed_size_options;

    fixed_size()
        requires std::default_initializable<Upstream>
        : fixed_size(Upstream{}, fixed_size_options{}) {}

    explicit fixed_size(Upstream upstream, fixed_size_options options = {})
        : upstream_(std::move(upstream)), options_(options), engine_(spec(options_), options_.maximum_size) {}

    fixed_size(const fixed_size&) = delete;
    fixed_size& operator=(const fixed_size&) = delete;
    // Moves every slab; the source may only be destroyed.
    fixed_size(fixed_size&& other) noexcept
        : upstream_(std::move(other.upstream_)),
          options_(other.options_),
          engine_(std::move(other.engine_)),
          passed_blocks_(std::exchange(other.passed_blocks_, 0)),
          passed_bytes_(std::exchange(other.passed_bytes_, 0))
#if POOLKIT_ENABLE_ASSERTS
          ,
          passed_live_(std::move(other.passed_live_))
#endif
    {
    }

    ~fixed_size() {
        detail::report_leaks("fixed_size", engine_.live_blocks() + passed_blocks_, engine_.live_bytes() + passed_bytes_);
        engine_.release_all(upstream_);
    }

    // Requires: alignment a power of two (else std::invalid_argument). Returns nullptr for 0 bytes.
    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        if (!fits(bytes, alignment)) {
            void* pointer = upstream_.allocate(bytes, alignment);
            try {
                count_passed(pointer, bytes);
            } catch (...) {  // no host memory for the record of a debug build: the block goes back
                upstream_.deallocate(pointer, bytes, alignment);
                throw;
            }
            return pointer;
        }
        if (void* pointer = engine_.allocate(upstream_, 0)) return pointer;
        memory_figures figures = memory_figures::request(bytes, alignment);
        figures.live_bytes = engine_.live_bytes() + passed_bytes_;
        figures.reserved_bytes = engine_.reserved_bytes();
        figures.cached_bytes = engine_.reserved_bytes() - engine_.live_bytes();
        throw out_of_memory("fixed_size", figures);
    }

    // As allocate, but only from a free block of a slab it already has: never takes a slab, never
    // passes a request on to the upstream. nullptr when none is free or the request is not one
    // for a block (or for 0 bytes or a bad alignment). stream_ordered<> asks this of a stream's
    // lane before it looks elsewhere. O(1).
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment) || !fits(bytes, alignment)) return nullptr;
        return engine_.allocate_cached(0);
    }

    // Requires: `pointer` came from allocate(bytes, alignment) of this pool and is not yet freed.
    // Asserts it in debug builds, requests passed on included; otherwise a block it cannot find
    // is ignored, and a free of a request passed on that cannot be right is not passed on (see
    // the header comment).
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        if (!fits(bytes, alignment)) {
            const bool in_slab = engine_.find(address) != nullptr;
            POOLKIT_ASSERT(!in_slab, "deallocate with a size other than the one allocated (a pool block freed as passed on)");
            if (in_slab) return;
            if (!uncount_passed(pointer, bytes)) return;
            upstream_.deallocate(pointer, bytes, alignment);
            return;
        }
        [[maybe_unused]] const bool freed = engine_.deallocate(0, address);
        POOLKIT_ASSERT(freed,
                       "deallocate of a pointer fixed_size did not hand out (or freed twice, or a size "
                       "other than the one allocated)");
    }
    POOLKIT_CUDA_MR_MEMBERS(fixed_size);

    // Returns every wholly free slab to the upstream.
    void release() noexcept { engine_.release(upstream_); }

    // Whether `pointer` lies in a live block of a slab, or, where the upstream can tell, in a
    // live block passed on to it.
    [[nodiscard]] bool owns(const void* pointer) const
        requires has_owns<Upstream>
    {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        if (engine_.find(address) != nullptr) return engine_.in_live_block(address);
        return passed_blocks_ > 0 && upstream_.owns(pointer);
    }

    void check_invariants() const { engine_.check_invariants(); }

    // The walk of walk.hpp: every slab as a chunk of equal blocks, in address order
    // (requested_bytes 0: slabs keep no request sizes). Requests passed on to the upstream are
    // not seen. O(blocks).
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        engine_.for_each_block(visit);
    }

    [[nodiscard]] std::size_t block_size() const noexcept { return options_.block_size; }
    [[nodiscard]] std::size_t block_alignment() const noexcept { return engine_.spec(0).alignment; }
    [[nodiscard]] std::size_t live_bytes() const noexcept { return engine_.live_bytes(); }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return engine_.reserved_bytes(); }
    // Slabs held, the chunks this strategy took from the upstream.
    [[nodiscard]] std::size_t chunks() const noexcept { return engine_.chunks(); }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: only the pool that handed out a block can take it back.
    friend bool operator==(const fixed_size& a, const fixed_size& b) noexcept { return &a == &b; }

private:
    static std::vector<detail::slabs::class_spec> spec(const fixed_size_options& options) {
        validate_alignment(options.slab_alignment);
        if (options.block_size == 0) throw std::invalid_argument("poolkit: fixed_size block_size must be positive");
        const std::size_t blocks = std::clamp<std::size_t>(options.slab_size / options.block_size, 1, std::size_t{1} << 30);
        return {{options.block_size, detail::slabs::natural_alignment(options.block_size, options.slab_alignment),
                 static_cast<std::uint32_t>(blocks)}};
    }

    [[nodiscard]] bool fits(std::size_t bytes, std::size_t alignment) const noexcept {
        return bytes <= options_.block_size && alignment <= engine_.spec(0).alignment;
    }

    // Counts a block the upstream just served (and, with assertions, remembers it). May throw
    // std::bad_alloc only with assertions, before anything is counted.
    void count_passed([[maybe_unused]] void* pointer, std::size_t bytes) {
#if POOLKIT_ENABLE_ASSERTS
        const bool fresh = passed_live_.emplace(reinterpret_cast<std::uintptr_t>(pointer), bytes).second;
        POOLKIT_ASSERT(fresh, "fixed_size: the upstream handed out a block that is still live");
#endif
        ++passed_blocks_;
        passed_bytes_ += bytes;
    }

    // Whether a free of a request passed on can be right, and if so uncounts it. A failed
    // POOLKIT_ASSERT naming the rule when assertions are on; false (nothing changed, nothing to
    // pass on) otherwise.
    bool uncount_passed([[maybe_unused]] void* pointer, std::size_t bytes) noexcept {
#if POOLKIT_ENABLE_ASSERTS
        const auto found = passed_live_.find(reinterpret_cast<std::uintptr_t>(pointer));
        POOLKIT_ASSERT(found != passed_live_.end(),
                       "fixed_size: deallocate of a block passed on to the upstream that it did not hand out, or one "
                       "freed twice");
        if (found == passed_live_.end()) return false;
        POOLKIT_ASSERT(found->second == bytes,
                       "fixed_size: deallocate of a block passed on to the upstream with a size other than the one allocated");
        if (found->second != bytes) return false;
        passed_live_.erase(found);
#else
        if (passed_blocks_ == 0 || bytes > passed_bytes_) return false;
        if constexpr (has_owns<Upstream>) {
            if (!upstream_.owns(pointer)) return false;
        }
#endif
        --passed_blocks_;
        passed_bytes_ -= bytes;
        return true;
    }

    [[no_unique_address]] Upstream upstream_;
    fixed_size_options options_;
    detail::slabs::slab_engine engine_;
    std::size_t passed_blocks_ = 0;  // live blocks the upstream serves directly
    std::size_t passed_bytes_ = 0;
#if POOLKIT_ENABLE_ASSERTS
    std::unordered_map<std::uintptr_t, std::size_t> passed_live_;  // each live block passed on -> its bytes
#endif
};

static_assert(resource_with<fixed_size<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_release<fixed_size<detail::resource_archetype<>>> && has_check_invariants<fixed_size<detail::resource_archetype<>>> &&
              has_upstream<fixed_size<detail::resource_archetype<>>>);
static_assert(!has_owns<fixed_size<detail::resource_archetype<>>>);
static_assert(walkable<fixed_size<detail::resource_archetype<>>>);

}  // namespace poolkit
