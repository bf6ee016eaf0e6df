// buddy<Upstream>: a binary buddy system over power-of-two chunks taken from Upstream.
//
// A request becomes a block of the smallest power of two that holds its bytes and its alignment
// and is at least options.minimum_block. A larger free block is halved until it fits; a freed
// block merges with its buddy (the other half of the block they were split from) while that is
// free, up to the whole chunk. Chunks are options.chunk_size bytes, or the request rounded up to a
// power of two when larger. Bookkeeping lives in host nodes (one per block, from a node pool) and
// a per-chunk table of block heads, one pointer per minimum block; nothing is written into the
// chunks.
// Complexity: allocate and deallocate O(levels) = O(log2(chunk / minimum block)), plus O(log
// chunks) to find a freed block's chunk; no heap allocation per call once warm. Internal
// fragmentation is up to half a block.
// Thread safety: none; wrap in synchronized<>.
// Alignment: any power of two. A block is aligned to its size up to the chunk's alignment
// (options.chunk_alignment, or the chunk size if smaller); larger alignments get a chunk taken
// with that alignment.
// Stream semantics: none; a freed block is reusable at once. Put stream_ordered<> around it.
// Exhaustion: when the upstream throws std::bad_alloc or options.maximum_size would be passed, it
// tries a chunk of just the block size, then returns its wholly free chunks and tries once more,
// then throws out_of_memory with the live, reserved and cached bytes.
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

#include <algorithm>
#include <array>
#include <bit>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <utility>

namespace poolkit {

struct buddy_options {
    // Bytes of each chunk, a power of two; a larger request gets a chunk of its own.
    std::size_t chunk_size = std::size_t{32} << 20;
    // The smallest block, a power of two.
    std::size_t minimum_block = 512;
    // The most alignment a chunk is asked for (a power of two), unless a request needs more.
    std::size_t chunk_alignment = std::size_t{64} << 10;
    // Most bytes reserved from the upstream at once.
    std::size_t maximum_size = std::numeric_limits<std::size_t>::max();
};

namespace detail::buddy_parts {

struct free_tag;
struct chunk_tag;
struct chunk;

struct block : intrusive::list_hook<free_tag> {
    block(std::uintptr_t address_, unsigned order_, chunk* owner_) noexcept : address(address_), order(order_), owner(owner_) {}
    std::uintptr_t address;
    unsigned order;  // the block is minimum_block << order bytes
    chunk* owner;
    std::size_t requested = 0;  // live: the bytes asked for
    bool free = true;
};

struct chunk : intrusive::set_hook<chunk_tag> {
    chunk(std::uintptr_t address_, std::size_t bytes_, std::size_t alignment_, unsigned top_order_, std::size_t granules)
        : address(address_), bytes(bytes_), alignment(alignment_), top_order(top_order_), heads(new block*[granules]()) {}
    std::uintptr_t address;
    std::size_t bytes;
    std::size_t alignment;  // as asked of the upstream
    unsigned top_order;  // the order of the whole chunk
    std::unique_ptr<block*[]> heads;  // heads[i]: the block that starts at minimum block i, or nullptr
};

using free_list = intrusive::list<block, free_tag>;
using chunk_set = chunk_index<chunk, chunk_tag>;

inline constexpr unsigned order_limit = 48;

}  // namespace detail::buddy_parts

template <resource Upstream>
class buddy : public forward_properties<buddy<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;
    using options_type = buddy_options;

    buddy()
        requires std::default_initializable<Upstream>
        : buddy(Upstream{}, buddy_options{}) {}

    explicit buddy(Upstream upstream, buddy_options options = {}) : upstream_(std::move(upstream)), options_(options) {
        if (!is_power_of_two(options_.chunk_size) || !is_power_of_two(options_.minimum_block) ||
            !is_power_of_two(options_.chunk_alignment) || options_.chunk_size < options_.minimum_block) {
            throw std::invalid_argument("poolkit: buddy needs power-of-two chunk_size >= minimum_block and a power-of-two chunk_alignment");
        }
        minimum_shift_ = static_cast<unsigned>(std::countr_zero(options_.minimum_block));
    }

    buddy(const buddy&) = delete;
    buddy& operator=(const buddy&) = delete;
    // Moves every chunk and block; the source is left empty.
    buddy(buddy&& other) noexcept
        : upstream_(std::move(other.upstream_)),
          options_(other.options_),
          minimum_shift_(other.minimum_shift_),
          blocks_(std::move(other.blocks_)),
          chunks_(std::move(other.chunks_)),
          free_(std::move(other.free_)),
          chunk_index_(std::move(other.chunk_index_)),
          reserved_bytes_(std::exchange(other.reserved_bytes_, 0)),
          live_bytes_(std::exchange(other.live_bytes_, 0)),
          live_blocks_(std::exchange(other.live_blocks_, 0)) {}

    ~buddy() {
        detail::report_leaks("buddy", live_blocks_, live_bytes_);
        for (auto& list : free_) list.clear();
        chunk_index_.clear_and_dispose([this](chunk* c) { return_chunk(c); });
    }

    // Requires: alignment a power of two (else std::invalid_argument). Returns nullptr for 0 bytes.
    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        const auto order = order_for(bytes, alignment);
        if (!order) throw out_of_memory("buddy", figures(bytes, alignment));
        block* found = find_free(*order, alignment);
        if (found == nullptr) found = grow(bytes, *order, alignment);
        return take(*found, *order, bytes);
    }

    // As allocate, but nullptr instead of any exception.
    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        return detail::allocate_or_null(*this, bytes, alignment);
    }

    // As allocate, but only from free blocks already held: never takes a chunk from the upstream.
    // nullptr when no free block holds the request (or for 0 bytes or a bad alignment).
    // stream_ordered<> asks this of a stream's lane before it looks elsewhere. O(levels).
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        const auto order = order_for(bytes, alignment);
        if (!order) return nullptr;
        block* found = find_free(*order, alignment);
        if (found == nullptr) return nullptr;
        try {
            return take(*found, *order, bytes);
        } catch (...) {  // no host memory for the nodes of the split-off halves
            return nullptr;
        }
    }

    // Requires: `pointer` came from allocate(bytes, alignment) of this pool and is not yet freed.
    // Asserts it in debug builds (a size of another order counts as wrong); otherwise a block it
    // cannot find is ignored and the recorded order is used.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        block* b = find_live(reinterpret_cast<std::uintptr_t>(pointer));
        POOLKIT_ASSERT(b != nullptr, "deallocate of a pointer buddy did not hand out (or freed twice)");
        if (b == nullptr) return;
        POOLKIT_ASSERT(order_for(bytes, alignment) == b->order, "deallocate with a size other than the one allocated");
        static_cast<void>(bytes), static_cast<void>(alignment);
        live_bytes_ -= block_bytes(b->order);
        --live_blocks_;
        b->free = true;
        chunk& c = *b->owner;
        std::size_t index = granule(c, b->address);
        while (b->order < c.top_order) {
            const std::size_t buddy_index = index ^ (std::size_t{1} << b->order);
            block* other = c.heads[buddy_index];
            if (other == nullptr || !other->free || other->order != b->order) break;
            free_[other->order].erase(free_[other->order].iterator_to(*other));
            block* lower = buddy_index < index ? other : b;
            block* upper = buddy_index < index ? b : other;
            c.heads[granule(c, upper->address)] = nullptr;
            blocks_.destroy(upper);
            b = lower;
            ++b->order;
            index = std::min(index, buddy_index);
        }
        free_[b->order].push_front(*b);
    }
    POOLKIT_CUDA_MR_MEMBERS(buddy);

    // Returns every wholly free chunk to the upstream. O(chunks).
    void release() noexcept {
        for (auto it = chunk_index_.begin(); it != chunk_index_.end();) {
            chunk* c = &*it++;
            block* whole = c->heads[0];
            if (whole->free && whole->order == c->top_order) {
                free_[whole->order].erase(free_[whole->order].iterator_to(*whole));
                chunk_index_.erase(chunk_index_.iterator_to(*c));
                return_chunk(c);
            }
        }
    }

    // Whether `pointer` lies inside a live block. O(log chunks + levels).
    [[nodiscard]] bool owns(const void* pointer) const noexcept {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        const chunk* c = find_chunk(address);
        if (c == nullptr) return false;
        // The block containing `address` starts at the highest aligned head at or below it.
        std::size_t index = granule(*c, address);
        for (unsigned order = 0; order <= c->top_order; ++order) {
            const std::size_t start = index & ~((std::size_t{1} << order) - 1);
            if (const block* b = c->heads[start]; b != nullptr && b->order >= order) return !b->free;
        }
        return false;
    }

    // The walk of walk.hpp: every chunk in address order, each block of it in address order (the
    // heads of the chunk's table), with the bytes asked for when live. O(blocks); allocates
    // nothing.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const chunk& c : chunk_index_) {
            chunk_view chunk_seen;
            chunk_seen.address = c.address;
            chunk_seen.bytes = c.bytes;
            const std::size_t granules = c.bytes >> minimum_shift_;
            for (std::size_t index = 0; index < granules;) {
                const block* b = c.heads[index];
                block_view seen;
                seen.address = b->address;
                seen.bytes = block_bytes(b->order);
                seen.requested_bytes = b->free ? 0 : b->requested;
                seen.live = !b->free;
                visit(chunk_seen, seen);
                index += std::size_t{1} << b->order;
            }
        }
    }

    // Walks every chunk: its blocks tile it, each at a multiple of its own size; interior table
    // entries are empty; no two free buddies of one order remain unmerged; free blocks are on the
    // list of their order and nowhere else; counts and byte totals add up.
    void check_invariants() const {
        std::size_t reserved = 0, live = 0, live_count = 0, free_count = 0, block_count = 0;
        std::array<std::size_t, order_limit> free_per_order{};
        for (const chunk& c : chunk_index_) {
            POOLKIT_VERIFY(c.bytes == block_bytes(c.top_order), "a chunk that is not a power of two of blocks");
            const std::size_t granules = c.bytes >> minimum_shift_;
            std::size_t index = 0;
            while (index < granules) {
                const block* b = c.heads[index];
                POOLKIT_VERIFY(b != nullptr, "a hole between the blocks of a chunk");
                POOLKIT_VERIFY(b->owner == &c && b->address == c.address + (index << minimum_shift_), "a block head at the wrong place");
                const std::size_t span = std::size_t{1} << b->order;
                POOLKIT_VERIFY(index % span == 0 && index + span <= granules, "a block off its buddy grid");
                // No head inside a block: every slot of a block of up to 64 minimum blocks; in a
                // larger one the slots where its splits put heads (span/2, span/4, ... from its
                // start), which a merge that forgot one leaves behind. A full scan would make the
                // check linear in the minimum blocks of every chunk.
                if (span <= 64) {
                    for (std::size_t inner = index + 1; inner < index + span; ++inner) {
                        POOLKIT_VERIFY(c.heads[inner] == nullptr, "a block head inside another block");
                    }
                } else {
                    for (std::size_t half = span / 2; half >= 1; half /= 2) {
                        POOLKIT_VERIFY(c.heads[index + half] == nullptr, "a block head inside another block");
                    }
                }
                if (b->free) {
                    ++free_count;
                    if (b->order < c.top_order) {
                        const block* other = c.heads[index ^ span];
                        POOLKIT_VERIFY(!(other && other->free && other->order == b->order), "free buddies not merged");
                    }
                    ++free_per_order[b->order];
                } else {
                    ++live_count;
                    live += block_bytes(b->order);
                }
                ++block_count;
                index += span;
            }
            reserved += c.bytes;
        }
        // Each list holds only free blocks of its order, each a head of its chunk, and as many as
        // the walk found: so every free block is on the list of its order, once.
        for (unsigned order = 0; order < order_limit; ++order) {
            for (const block& entry : free_[order]) {
                POOLKIT_VERIFY(entry.free && entry.order == order, "a free list holds a block that is not free or of another order");
                POOLKIT_VERIFY(entry.owner->heads[granule(*entry.owner, entry.address)] == &entry,
                               "a free list holds a block that is not in its chunk");
            }
            POOLKIT_VERIFY(free_[order].size() == free_per_order[order], "a free block off the list of its order");
        }
        static_cast<void>(free_count);
        POOLKIT_VERIFY(live_count == live_blocks_ && live == live_bytes_, "live counts drifted");
        POOLKIT_VERIFY(reserved == reserved_bytes_, "reserved byte count drifted");
        POOLKIT_VERIFY(reserved <= options_.maximum_size, "reserved past the maximum");
        POOLKIT_VERIFY(blocks_.in_use() == block_count && chunks_.in_use() == chunk_index_.size(), "bookkeeping nodes leaked");
        static_cast<void>(reserved), static_cast<void>(live), static_cast<void>(live_count);
    }

    // The block size a request would get, or 0 when no block can hold it.
    [[nodiscard]] std::size_t block_size(std::size_t bytes, std::size_t alignment = default_alignment) const noexcept {
        const auto order = order_for(bytes, alignment);
        return order ? block_bytes(*order) : 0;
    }
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_bytes_; }
    [[nodiscard]] std::size_t chunks() const noexcept { return chunk_index_.size(); }
    [[nodiscard]] const buddy_options& options() const noexcept { return options_; }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: only the pool that handed out a block can take it back.
    friend bool operator==(const buddy& a, const buddy& b) noexcept { return &a == &b; }

private:
    using block = detail::buddy_parts::block;
    using chunk = detail::buddy_parts::chunk;
    static constexpr unsigned order_limit = detail::buddy_parts::order_limit;

    [[nodiscard]] std::size_t block_bytes(unsigned order) const noexcept { return options_.minimum_block << order; }
    [[nodiscard]] std::size_t granule(const chunk& c, std::uintptr_t address) const noexcept {
        return (address - c.address) >> minimum_shift_;
    }

    // The order of the block for a request, or nothing when none can hold it.
    [[nodiscard]] std::optional<unsigned> order_for(std::size_t bytes, std::size_t alignment) const noexcept {
        const std::size_t needed = std::max({bytes, alignment, options_.minimum_block});
        if (needed > (std::size_t{1} << 62)) return std::nullopt;
        const auto order = static_cast<unsigned>(std::countr_zero(std::bit_ceil(needed))) - minimum_shift_;
        if (order >= order_limit) return std::nullopt;
        return order;
    }

    // A free block of at least `order` that starts aligned to `alignment`: the first on each
    // list, since every block is aligned to its size up to its chunk's alignment, unless the
    // alignment is above that; then the lists are searched.
    block* find_free(unsigned order, std::size_t alignment) noexcept {
        for (unsigned k = order; k < order_limit; ++k) {
            for (block& candidate : free_[k]) {
                if (is_aligned(reinterpret_cast<void*>(candidate.address), alignment)) return &candidate;
                if (alignment <= options_.chunk_alignment) break;
            }
        }
        return nullptr;
    }

    // Splits free block `b` down to `order`, marks it live for a request of `bytes` and returns
    // its address. The nodes for the split-off halves are made first: nothing changes if that
    // throws.
    void* take(block& b, unsigned order, std::size_t bytes) {
        std::array<block*, order_limit> halves{};
        const unsigned splits = b.order - order;
        try {
            for (unsigned i = 0; i < splits; ++i) halves[i] = blocks_.make(0, 0, b.owner);
        } catch (...) {
            for (unsigned i = 0; i < splits && halves[i]; ++i) blocks_.destroy(halves[i]);
            throw;
        }
        free_[b.order].erase(free_[b.order].iterator_to(b));
        chunk& c = *b.owner;
        for (unsigned i = 0; i < splits; ++i) {
            --b.order;
            block* upper = halves[i];
            upper->address = b.address + block_bytes(b.order);
            upper->order = b.order;
            c.heads[granule(c, upper->address)] = upper;
            free_[upper->order].push_front(*upper);
        }
        b.free = false;
        b.requested = bytes;
        live_bytes_ += block_bytes(order);
        ++live_blocks_;
        return reinterpret_cast<void*>(b.address);
    }

    // Takes a chunk that holds a block of `order` aligned as asked; returns its one free block.
    block* grow(std::size_t bytes, unsigned order, std::size_t alignment) {
        const std::size_t needed = block_bytes(order);
        block* fresh = detail::grow_chunk(
            std::max(needed, options_.chunk_size), needed, [&](std::size_t chunk_bytes) { return try_grow(chunk_bytes, alignment); },
            [&] { release(); });
        if (fresh != nullptr) return fresh;
        memory_figures failure = figures(bytes, alignment);
        if (options_.maximum_size != std::numeric_limits<std::size_t>::max()) failure.limit_bytes = options_.maximum_size;
        throw out_of_memory("buddy", failure);
    }

    block* try_grow(std::size_t bytes, std::size_t alignment) {
        if (!detail::fits_under(bytes, reserved_bytes_, options_.maximum_size)) return nullptr;
        const std::size_t chunk_alignment = std::max(std::min(bytes, options_.chunk_alignment), alignment);
        void* memory = detail::allocate_chunk(upstream_, bytes, chunk_alignment);
        if (memory == nullptr) return nullptr;
        const auto address = reinterpret_cast<std::uintptr_t>(memory);
        const auto top_order = static_cast<unsigned>(std::countr_zero(bytes)) - minimum_shift_;
        chunk* c = nullptr;
        try {
            c = chunks_.make(address, bytes, chunk_alignment, top_order, bytes >> minimum_shift_);
            c->heads[0] = blocks_.make(address, top_order, c);
        } catch (...) {
            if (c) chunks_.destroy(c);
            upstream_.deallocate(memory, bytes, chunk_alignment);
            throw;
        }
        chunk_index_.insert(*c);
        free_[top_order].push_front(*c->heads[0]);
        reserved_bytes_ += bytes;
        return c->heads[0];
    }

    [[nodiscard]] const chunk* find_chunk(std::uintptr_t address) const noexcept { return detail::find_chunk(chunk_index_, address); }

    // The live block that starts at `address`, or nullptr.
    block* find_live(std::uintptr_t address) noexcept {
        const chunk* c = find_chunk(address);
        if (c == nullptr || (address - c->address) % options_.minimum_block != 0) return nullptr;
        block* b = c->heads[granule(*c, address)];
        return b != nullptr && !b->free ? b : nullptr;
    }

    // Gives a chunk, already out of the index and with its blocks off the free lists, back.
    void return_chunk(chunk* c) noexcept {
        const std::size_t granules = c->bytes >> minimum_shift_;
        // A wholly free chunk (release) is one block; the destructor may find it split. Each block
        // is stepped over whole: O(blocks), not O(minimum blocks).
        for (std::size_t i = 0; i < granules;) {
            block* b = c->heads[i];
            if (b == nullptr) {
                ++i;
                continue;
            }
            i += std::size_t{1} << b->order;
            blocks_.destroy(b);
        }
        reserved_bytes_ -= c->bytes;
        upstream_.deallocate(reinterpret_cast<void*>(c->address), c->bytes, c->alignment);
        chunks_.destroy(c);
    }

    [[nodiscard]] memory_figures figures(std::size_t bytes, std::size_t alignment) const noexcept {
        return memory_figures::held(bytes, alignment, live_bytes_, reserved_bytes_);
    }

    [[no_unique_address]] Upstream upstream_;
    buddy_options options_;
    unsigned minimum_shift_ = 0;  // log2(minimum_block)
    // Declared before the indexes, so that the indexes go first on destruction.
    detail::node_pool<block> blocks_;
    detail::node_pool<chunk> chunks_;
    // Invariant: free_[k] holds exactly the free blocks of order k.
    std::array<detail::buddy_parts::free_list, order_limit> free_;
    detail::buddy_parts::chunk_set chunk_index_;
    std::size_t reserved_bytes_ = 0;
    std::size_t live_bytes_ = 0;
    std::size_t live_blocks_ = 0;
};

static_assert(resource_with<buddy<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_try_allocate<buddy<detail::resource_archetype<>>> && has_release<buddy<detail::resource_archetype<>>> &&
              has_owns<buddy<detail::resource_archetype<>>> && has_check_invariants<buddy<detail::resource_archetype<>>> &&
              has_upstream<buddy<detail::resource_archetype<>>>);
static_assert(walkable<buddy<detail::resource_archetype<>>>);

}  // namespace poolkit
