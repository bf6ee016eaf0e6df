// best_fit<Upstream>: a coalescing best-fit pool over chunks taken from Upstream.
//
// A request is rounded up to options.granularity and served from the smallest free block that
// holds it (ties: lowest address); the block is split when the remainder is at least
// options.minimum_split. A freed block merges at once with free neighbours in the same chunk;
// blocks of different chunks never merge, contiguous or not. When nothing fits, a chunk is taken
// from the upstream as options.growth says, between options.initial_size for the first and
// options.maximum_size reserved in all. Bookkeeping lives in host nodes from a node pool, never
// in the managed memory, so Upstream may hand out device memory or bare address space.
// Complexity: allocate and deallocate O(log n) in the number of blocks (free blocks in a
// multiset by size then address, live blocks in a set by address); coalescing O(1) through
// the address-ordered list of each chunk; no heap allocation per call once warm.
// Thread safety: none; wrap in synchronized<>.
// Alignment: any power of two. Up to the granularity it costs nothing; above it a block may be
// split to start at the right address, and a chunk for it is taken with that alignment.
// Stream semantics: none; a freed block is reusable at once. Put stream_ordered<> around it.
// Exhaustion: when the upstream throws std::bad_alloc or the maximum would be passed, it tries
// a chunk of just the needed size, then returns its wholly free chunks and tries once more, then
// throws out_of_memory with the live, reserved and cached bytes.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/allocate_or_null.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/detail/leak_report.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/detail/chunks.hpp>
#include <poolkit/strategy/detail/intrusive.hpp>
#include <poolkit/strategy/detail/node_pool.hpp>
#include <poolkit/strategy/detail/tiling.hpp>
#include <poolkit/strategy/growth.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <stdexcept>
#include <utility>

namespace poolkit {

struct best_fit_options {
    // The first chunk, taken on the first allocate that needs one.
    std::size_t initial_size = std::size_t{2} << 20;
    // How large each later chunk is.
    growth_policy growth = growth_policy::geometric(2);
    // Most bytes reserved from the upstream at once.
    std::size_t maximum_size = std::numeric_limits<std::size_t>::max();
    // Block sizes and chunk sizes round up to this power of two; chunks are aligned to it.
    std::size_t granularity = 256;
    // A block is split only when the rest would be at least this many bytes.
    std::size_t minimum_split = 256;
};

namespace detail::best_fit_parts {

struct by_size_tag;
struct in_chunk_tag;
struct chunk_tag;

struct chunk;

// One block of a chunk, free or live. It sits in the free multiset or the live set (never both:
// they share the hook) and always in its chunk's address-ordered list.
struct block : intrusive::set_hook<by_size_tag>, intrusive::list_hook<in_chunk_tag> {
    block(std::uintptr_t address_, std::size_t bytes_, chunk* owner_) noexcept : address(address_), bytes(bytes_), owner(owner_) {}
    std::uintptr_t address;
    std::size_t bytes;  // the whole block, a multiple of the granularity
    std::size_t requested = 0;  // live: the bytes asked for (rounded up to the granularity, <= bytes)
    chunk* owner;
    bool free = true;
};

struct by_size {
    struct key {
        std::size_t bytes;
        std::uintptr_t address;
    };
    bool operator()(const block& a, const block& b) const noexcept {
        return a.bytes < b.bytes || (a.bytes == b.bytes && a.address < b.address);
    }
    bool operator()(const block& a, const key& b) const noexcept {
        return a.bytes < b.bytes || (a.bytes == b.bytes && a.address < b.address);
    }
    bool operator()(const key& a, const block& b) const noexcept {
        return a.bytes < b.bytes || (a.bytes == b.bytes && a.address < b.address);
    }
};

struct by_address {
    bool operator()(const block& a, const block& b) const noexcept { return a.address < b.address; }
    bool operator()(const block& a, std::uintptr_t b) const noexcept { return a.address < b; }
    bool operator()(std::uintptr_t a, const block& b) const noexcept { return a < b.address; }
};

using block_list = intrusive::list<block, in_chunk_tag>;

// One range taken from the upstream, tiled by its blocks in address order.
struct chunk : intrusive::set_hook<chunk_tag> {
    chunk(std::uintptr_t address_, std::size_t bytes_, std::size_t alignment_) noexcept
        : address(address_), bytes(bytes_), alignment(alignment_) {}
    std::uintptr_t address;
    std::size_t bytes;
    std::size_t alignment;  // as asked of the upstream, to give it back the same way
    block_list blocks;

    [[nodiscard]] bool wholly_free() const noexcept { return blocks.size() == 1 && blocks.front().free; }
};

using free_blocks = intrusive::multiset<block, by_size_tag, by_size>;
using live_blocks = intrusive::set<block, by_size_tag, by_address>;
using chunk_set = chunk_index<chunk, chunk_tag>;

}  // namespace detail::best_fit_parts

template <resource Upstream>
class best_fit : public forward_properties<best_fit<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;
    using options_type = best_fit_options;

    best_fit()
        requires std::default_initializable<Upstream>
        : best_fit(Upstream{}, best_fit_options{}) {}

    explicit best_fit(Upstream upstream, best_fit_options options = {}) : upstream_(std::move(upstream)), options_(options) {
        validate_alignment(options_.granularity);
        options_.growth.validate();
        options_.minimum_split = std::max(options_.minimum_split, options_.granularity);
    }

    best_fit(const best_fit&) = delete;
    best_fit& operator=(const best_fit&) = delete;
    // Moves every chunk and block; the source is left empty and may be destroyed or used again.
    best_fit(best_fit&& other) noexcept
        : upstream_(std::move(other.upstream_)),
          options_(other.options_),
          blocks_(std::move(other.blocks_)),
          chunks_(std::move(other.chunks_)),
          free_(std::move(other.free_)),
          live_(std::move(other.live_)),
          chunk_index_(std::move(other.chunk_index_)),
          reserved_bytes_(std::exchange(other.reserved_bytes_, 0)),
          live_bytes_(std::exchange(other.live_bytes_, 0)) {}

    ~best_fit() {
        detail::report_leaks("best_fit", live_.size(), live_bytes_);
        live_.clear();
        free_.clear();
        chunk_index_.clear_and_dispose([this](chunk* c) { return_chunk(c); });
    }

    // Requires: alignment a power of two (else std::invalid_argument). Returns nullptr for 0 bytes.
    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const auto rounded = checked_align_up(bytes, options_.granularity);
        if (!rounded) throw out_of_memory("best_fit", figures(bytes, alignment));
        if (void* pointer = place(bytes, *rounded, alignment)) return pointer;
        block& fresh = grow(bytes, *rounded, alignment);  // aligned as asked: no padding
        return carve(fresh, fresh.address, *rounded, bytes);
    }

    // As allocate, but nullptr instead of any exception.
    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        return detail::allocate_or_null(*this, bytes, alignment);
    }

    // As allocate, but only from free blocks already held: never takes a chunk from the upstream.
    // nullptr when nothing fits (or for 0 bytes or a bad alignment). stream_ordered<> asks this of
    // a stream's lane before it looks elsewhere.
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        const auto rounded = checked_align_up(bytes, options_.granularity);
        if (!rounded) return nullptr;
        try {
            return place(bytes, *rounded, alignment);
        } catch (...) {  // no host memory for a bookkeeping node
            return nullptr;
        }
    }

    // Requires: `pointer` came from allocate(bytes, alignment) of this pool and is not yet freed.
    // Asserts both in debug builds; otherwise a pointer it does not know is ignored, and the size
    // it recorded is used whatever `bytes` says. Complexity O(log n).
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        block* freed = detail::take_live<by_address>(live_, pointer, bytes, alignment, options_.granularity,
                                                     "deallocate of a pointer best_fit did not hand out (or freed twice)");
        if (freed == nullptr) return;
        live_bytes_ -= freed->bytes;
        detail::coalesce(freed->owner->blocks, *freed, blocks_, free_index());
    }
    POOLKIT_CUDA_MR_MEMBERS(best_fit);

    // Returns every wholly free chunk to the upstream. O(chunks).
    void release() noexcept {
        for (auto it = chunk_index_.begin(); it != chunk_index_.end();) {
            chunk* c = &*it;
            ++it;
            if (c->wholly_free()) {
                free_.erase(free_.iterator_to(c->blocks.front()));
                chunk_index_.erase(chunk_index_.iterator_to(*c));
                return_chunk(c);
            }
        }
    }

    // Whether `pointer` lies inside a live block of this pool. O(log n).
    [[nodiscard]] bool owns(const void* pointer) const noexcept { return detail::inside_live<by_address>(live_, pointer); }

    // The walk of walk.hpp: every chunk in address order, each block of it in address order, with
    // the bytes asked for when live. O(blocks); allocates nothing.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const chunk& c : chunk_index_) detail::visit_tiling(c, visit);
    }

    // Walks every chunk and block: blocks tile their chunk in address order; no two free blocks
    // touch; each block is in exactly the index its state says; counts and byte totals agree.
    void check_invariants() const {
        std::size_t reserved = 0, live = 0, cached = 0, live_count = 0, free_count = 0, block_count = 0;
        for (const chunk& c : chunk_index_) {
            POOLKIT_VERIFY(c.address % options_.granularity == 0, "a chunk off the granularity");
            detail::verify_tiling<by_address>(
                c, options_.granularity, live_,
                [&](const block& b) {
                    POOLKIT_VERIFY(free_.find(b) != free_.end(), "a free block missing from the size index");
                    cached += b.bytes;
                    ++free_count;
                },
                [&](const block& b) {
                    POOLKIT_VERIFY(b.bytes - align_up(b.requested, options_.granularity) < options_.minimum_split,
                                   "a live block holds a remainder it should have split off");
                    live += b.bytes;
                    ++live_count;
                });
            block_count += c.blocks.size();
            reserved += c.bytes;
        }
        POOLKIT_VERIFY(free_count == free_.size(), "the size index holds blocks that are not free");
        POOLKIT_VERIFY(detail::in_strict_order(free_, by_size{}), "the size index out of order");
        POOLKIT_VERIFY(live_count == live_.size(), "the live index holds blocks that are not live");
        POOLKIT_VERIFY(live == live_bytes_, "live byte count drifted");
        POOLKIT_VERIFY(reserved == reserved_bytes_, "reserved byte count drifted");
        POOLKIT_VERIFY(reserved == live + cached, "live and free blocks do not add up to the chunks");
        POOLKIT_VERIFY(reserved <= options_.maximum_size, "reserved past the maximum");
        POOLKIT_VERIFY(blocks_.in_use() == block_count && chunks_.in_use() == chunk_index_.size(), "bookkeeping nodes leaked");
        static_cast<void>(reserved), static_cast<void>(cached), static_cast<void>(block_count);
    }

    // Bytes handed out (counted in whole blocks), taken from the upstream, and free inside chunks.
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_bytes_; }
    [[nodiscard]] std::size_t cached_bytes() const noexcept { return reserved_bytes_ - live_bytes_; }
    [[nodiscard]] std::size_t live_blocks() const noexcept { return live_.size(); }
    [[nodiscard]] std::size_t free_blocks() const noexcept { return free_.size(); }
    [[nodiscard]] std::size_t chunks() const noexcept { return chunk_index_.size(); }
    [[nodiscard]] const best_fit_options& options() const noexcept { return options_; }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: only the pool that handed out a block can take it back.
    friend bool operator==(const best_fit& a, const best_fit& b) noexcept { return &a == &b; }

private:
    using block = detail::best_fit_parts::block;
    using chunk = detail::best_fit_parts::chunk;
    using by_size = detail::best_fit_parts::by_size;
    using by_address = detail::best_fit_parts::by_address;

    // How many next-larger candidates an aligned request inspects before it asks for a block
    // large enough to hold any padding.
    static constexpr int aligned_candidates = 8;

    // A live block for `rounded` bytes (`bytes` asked) at `alignment`, or nullptr when no free
    // block holds it.
    void* place(std::size_t bytes, std::size_t rounded, std::size_t alignment) {
        auto candidate = free_.lower_bound(by_size::key{rounded, 0}, by_size{});
        if (alignment <= options_.granularity) {
            if (candidate == free_.end()) return nullptr;
            return carve(*candidate, candidate->address, rounded, bytes);
        }
        for (int i = 0; i < aligned_candidates && candidate != free_.end(); ++i, ++candidate) {
            const std::uintptr_t start = align_up(candidate->address, alignment);
            if (start - candidate->address <= candidate->bytes - rounded) return carve(*candidate, start, rounded, bytes);
        }
        const auto padded = checked_add(rounded, alignment - options_.granularity);
        if (!padded) return nullptr;
        candidate = free_.lower_bound(by_size::key{*padded, 0}, by_size{});
        if (candidate == free_.end()) return nullptr;
        return carve(*candidate, align_up(candidate->address, alignment), rounded, bytes);
    }

    // The size index as split_around and coalesce change it (detail/tiling.hpp).
    detail::ordered_index<detail::best_fit_parts::free_blocks, by_size> free_index() noexcept { return {free_}; }

    // Turns free block `b` into a live block of `rounded` bytes at `start` for a request of
    // `bytes`, splitting off the padding before it and, when large enough, the remainder after
    // it. Strong guarantee: the nodes are made before anything changes.
    void* carve(block& b, std::uintptr_t start, std::size_t rounded, std::size_t bytes) {
        detail::split_around(b.owner->blocks, b, start, rounded, options_.minimum_split, blocks_, free_index());
        b.requested = bytes;
        b.free = false;
        live_.insert(b);
        live_bytes_ += b.bytes;
        return reinterpret_cast<void*>(start);
    }

    // Takes a chunk that holds `rounded` bytes at `alignment` and returns its one free block.
    block& grow(std::size_t bytes, std::size_t rounded, std::size_t alignment) {
        const std::size_t chunk_alignment = std::max(alignment, options_.granularity);
        const auto preferred =
            options_.growth.next_chunk(rounded, reserved_bytes_, options_.initial_size, options_.maximum_size, options_.granularity);
        block* fresh = detail::grow_chunk(
            preferred, rounded, [&](std::size_t chunk_bytes) { return try_grow(chunk_bytes, chunk_alignment); }, [&] { release(); });
        if (fresh != nullptr) return *fresh;
        memory_figures failure = figures(bytes, alignment);
        if (options_.maximum_size != std::numeric_limits<std::size_t>::max()) failure.limit_bytes = options_.maximum_size;
        throw out_of_memory("best_fit", failure);
    }

    // Takes a chunk of `bytes` and files it as one free block; nullptr when the upstream refuses.
    // Nullptr also when the chunk would take the reserved total past the maximum.
    block* try_grow(std::size_t bytes, std::size_t alignment) {
        if (!detail::fits_under(bytes, reserved_bytes_, options_.maximum_size)) return nullptr;
        void* memory = detail::allocate_chunk(upstream_, bytes, alignment);
        if (memory == nullptr) return nullptr;
        const auto address = reinterpret_cast<std::uintptr_t>(memory);
        chunk* c = nullptr;
        try {
            c = chunks_.make(address, bytes, alignment);
            block* whole = blocks_.make(address, bytes, c);
            c->blocks.push_back(*whole);
        } catch (...) {
            if (c) chunks_.destroy(c);
            upstream_.deallocate(memory, bytes, alignment);
            throw;
        }
        chunk_index_.insert(*c);
        free_.insert(c->blocks.front());
        reserved_bytes_ += bytes;
        return &c->blocks.front();
    }

    // Gives a chunk, already out of every index, back to the upstream with its nodes.
    void return_chunk(chunk* c) noexcept {
        c->blocks.clear_and_dispose([this](block* b) { blocks_.destroy(b); });
        reserved_bytes_ -= c->bytes;
        upstream_.deallocate(reinterpret_cast<void*>(c->address), c->bytes, c->alignment);
        chunks_.destroy(c);
    }

    [[nodiscard]] memory_figures figures(std::size_t bytes, std::size_t alignment) const noexcept {
        return memory_figures::held(bytes, alignment, live_bytes_, reserved_bytes_);
    }

    [[no_unique_address]] Upstream upstream_;
    best_fit_options options_;
    // Declared before the indexes, so that the indexes go first on destruction.
    detail::node_pool<block> blocks_;
    detail::node_pool<chunk> chunks_;
    // Invariant: every free block is in free_, every live block in live_, each block in its
    // chunk's list; a block's `free` says which.
    detail::best_fit_parts::free_blocks free_;
    detail::best_fit_parts::live_blocks live_;
    detail::best_fit_parts::chunk_set chunk_index_;
    std::size_t reserved_bytes_ = 0;  // sum of chunk sizes
    std::size_t live_bytes_ = 0;  // sum of live block sizes
};

static_assert(resource_with<best_fit<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_try_allocate<best_fit<detail::resource_archetype<>>> && has_release<best_fit<detail::resource_archetype<>>> &&
              has_owns<best_fit<detail::resource_archetype<>>> && has_check_invariants<best_fit<detail::resource_archetype<>>> &&
              has_upstream<best_fit<detail::resource_archetype<>>>);
static_assert(!has_property<best_fit<detail::resource_archetype<>>, device_accessible>);
static_assert(walkable<best_fit<detail::resource_archetype<>>>);

}  // namespace poolkit
