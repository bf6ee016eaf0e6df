// monotonic<Upstream>: bump allocation from chunks taken from Upstream.
//
// Each request takes the next suitably aligned bytes of the current chunk; deallocate marks the
// block freed, and when the most recent live blocks of a chunk are freed their bytes are handed
// out again (stack order reuses memory). A chunk whose blocks are all freed starts over from its
// beginning; if it is not the current one it waits, wholly free, to become current when one is
// needed, or for release(). Chunks follow options.growth, from options.initial_size up to
// options.maximum_size reserved. Bookkeeping is never written into the chunks: one host record
// per chunk, holding the start and size of each block handed out since the chunk last started
// over (16 bytes each, in address order; freed ones stay marked until every later one is freed).
// Complexity: allocate O(1) amortized while the current chunk has room, else O(chunks) to look
// for a wholly free one before growing; deallocate O(1) for the most recent block of the current
// chunk, else O(log chunks + log blocks of the chunk).
// Thread safety: none; wrap in synchronized<>.
// Alignment: any power of two; padding before a block is lost until its chunk is wholly free.
// Stream semantics: none. Put stream_ordered<> around it.
// Exhaustion: when the upstream throws std::bad_alloc or the maximum would be passed, it tries a
// chunk of just the needed size, then returns its wholly free chunks and tries once more, then
// throws out_of_memory with the live, reserved and cached bytes.
// Bad input: a pointer that is not the start of a block it handed out (outside every chunk, or
// inside a block), a block freed twice, a size other than the one allocated. Each is a failed
// POOLKIT_ASSERT; without assertions the first two are ignored and a wrong size frees the block
// with the size it was allocated with, so a chunk never starts over while a block of it is live.
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
#include <poolkit/strategy/growth.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <limits>
#include <utility>
#include <vector>

namespace poolkit {

struct monotonic_options {
    // The first chunk, taken on the first allocate.
    std::size_t initial_size = std::size_t{64} << 10;
    // How large each later chunk is.
    growth_policy growth = growth_policy::geometric(2);
    // Most bytes reserved from the upstream at once.
    std::size_t maximum_size = std::numeric_limits<std::size_t>::max();
};

namespace detail::monotonic_parts {

struct chunk_tag;

// A block handed out since its chunk last started over; bytes 0 once it is freed.
struct handed_out {
    std::uintptr_t address;
    std::size_t bytes;
};

struct chunk : intrusive::set_hook<chunk_tag> {
    chunk(std::uintptr_t address_, std::size_t bytes_, std::size_t alignment_) noexcept
        : address(address_), bytes(bytes_), alignment(alignment_), high_water(address_) {}
    std::uintptr_t address;
    std::size_t bytes;
    std::size_t alignment;  // as asked of the upstream
    std::uintptr_t high_water;  // the end of what was handed out since the chunk last started over
    std::size_t live_blocks = 0;
    std::size_t live_bytes = 0;
    // Invariant: ascending by address, the last one live and ending at high_water; live_blocks of
    // them have bytes > 0, adding up to live_bytes; empty exactly when the chunk has started over.
    std::vector<handed_out> blocks;
};

using chunk_set = chunk_index<chunk, chunk_tag>;

}  // namespace detail::monotonic_parts

template <resource Upstream>
class monotonic : public forward_properties<monotonic<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;
    using options_type = monotonic_options;

    monotonic()
        requires std::default_initializable<Upstream>
        : monotonic(Upstream{}, monotonic_options{}) {}

    explicit monotonic(Upstream upstream, monotonic_options options = {}) : upstream_(std::move(upstream)), options_(options) {
        options_.growth.validate();
    }

    monotonic(const monotonic&) = delete;
    monotonic& operator=(const monotonic&) = delete;
    // Moves every chunk; the source is left empty.
    monotonic(monotonic&& other) noexcept
        : upstream_(std::move(other.upstream_)),
          options_(other.options_),
          chunks_(std::move(other.chunks_)),
          chunk_index_(std::move(other.chunk_index_)),
          current_(std::exchange(other.current_, nullptr)),
          reserved_bytes_(std::exchange(other.reserved_bytes_, 0)),
          live_blocks_(std::exchange(other.live_blocks_, 0)),
          live_bytes_(std::exchange(other.live_bytes_, 0)) {}

    ~monotonic() {
        detail::report_leaks("monotonic", live_blocks_, live_bytes_);
        chunk_index_.clear_and_dispose([this](chunk* c) { return_chunk(c); });
    }

    // Requires: alignment a power of two (else std::invalid_argument). Returns nullptr for 0 bytes.
    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        if (current_ == nullptr || !fits(*current_, bytes, alignment)) current_ = next_chunk(bytes, alignment);
        const std::uintptr_t start = align_up(current_->high_water, alignment);
        current_->blocks.push_back({start, bytes});  // may throw std::bad_alloc; nothing changed yet
        current_->high_water = start + bytes;
        ++current_->live_blocks;
        current_->live_bytes += bytes;
        ++live_blocks_;
        live_bytes_ += bytes;
        return reinterpret_cast<void*>(start);
    }

    // As allocate, but nullptr instead of any exception.
    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        return detail::allocate_or_null(*this, bytes, alignment);
    }

    // Marks the block freed; the bytes of the most recent blocks of a chunk, once all freed, are
    // handed out again, and a chunk whose blocks are all freed starts over. Requires: `pointer`
    // came from allocate(bytes, alignment) of this resource and is not yet freed. Asserts it in
    // debug builds; otherwise a pointer that is not a live block's start is ignored, and a wrong
    // size is replaced by the one allocated.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        static_cast<void>(alignment);
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        chunk* c = current_ != nullptr && address - current_->address < current_->bytes ? current_ : find_chunk(address);
        POOLKIT_ASSERT(c != nullptr, "deallocate of a pointer monotonic did not hand out (outside every chunk)");
        if (c == nullptr) return;
        detail::monotonic_parts::handed_out* block = find_block(*c, address);
        POOLKIT_ASSERT(block != nullptr,
                       "deallocate of a pointer monotonic did not hand out, or freed twice (not the start of a live "
                       "block of its chunk)");
        if (block == nullptr) return;
        POOLKIT_ASSERT(block->bytes != 0, "monotonic: deallocate of a block freed twice");
        if (block->bytes == 0) return;
        POOLKIT_ASSERT(block->bytes == bytes, "monotonic: deallocate with a size other than the one allocated");
        const std::size_t freed = block->bytes;  // as allocated, whatever the caller says
        block->bytes = 0;
        --c->live_blocks;
        c->live_bytes -= freed;
        --live_blocks_;
        live_bytes_ -= freed;
        // The most recent blocks, once freed, are handed out again; with none left the chunk starts over.
        while (!c->blocks.empty() && c->blocks.back().bytes == 0) c->blocks.pop_back();
        c->high_water = c->blocks.empty() ? c->address : c->blocks.back().address + c->blocks.back().bytes;
    }
    POOLKIT_CUDA_MR_MEMBERS(monotonic);

    // Returns every wholly free chunk to the upstream. O(chunks).
    void release() noexcept {
        for (auto it = chunk_index_.begin(); it != chunk_index_.end();) {
            chunk* c = &*it++;
            if (c->live_blocks == 0) {
                if (c == current_) current_ = nullptr;
                chunk_index_.erase(chunk_index_.iterator_to(*c));
                return_chunk(c);
            }
        }
    }

    // Whether `pointer` lies inside a live block. O(log chunks + log blocks of the chunk).
    [[nodiscard]] bool owns(const void* pointer) const noexcept {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        const chunk* c = find_chunk_const(address);
        if (c == nullptr || address >= c->high_water) return false;
        const auto after = std::upper_bound(c->blocks.begin(), c->blocks.end(), address,
                                            [](std::uintptr_t key, const auto& record) { return key < record.address; });
        if (after == c->blocks.begin()) return false;
        const auto& block = *std::prev(after);
        return block.bytes != 0 && address - block.address < block.bytes;
    }

    // The walk of walk.hpp: each chunk shows at most two blocks, in address order: what it handed
    // out since it last started over, up to the end of its most recent live block, as one live
    // block (freed bytes inside it cannot be reused until every block after them is freed;
    // requested_bytes is the live bytes in it), then the untouched rest as one free block.
    // O(chunks); allocates nothing.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const chunk& c : chunk_index_) {
            chunk_view chunk_seen;
            chunk_seen.address = c.address;
            chunk_seen.bytes = c.bytes;
            const std::size_t handed_out = c.high_water - c.address;
            if (handed_out > 0) {
                block_view used;
                used.address = c.address;
                used.bytes = handed_out;
                used.requested_bytes = c.live_bytes;
                used.live = true;
                visit(chunk_seen, used);
            }
            if (handed_out < c.bytes) {
                block_view rest;
                rest.address = c.high_water;
                rest.bytes = c.bytes - handed_out;
                visit(chunk_seen, rest);
            }
        }
    }

    // Chunks lie apart; each one's high-water mark is inside it and is its start exactly when it
    // has no live block; each chunk's block records are in address order inside what it handed
    // out, live ones apart, the last one live and ending at the high-water mark; counts and byte
    // totals add up.
    void check_invariants() const {
        std::size_t reserved = 0, blocks = 0, bytes = 0;
        std::uintptr_t previous_end = 0;
        for (const chunk& c : chunk_index_) {
            POOLKIT_VERIFY(c.address >= previous_end, "chunks overlap");
            POOLKIT_VERIFY(c.high_water >= c.address && c.high_water - c.address <= c.bytes, "a high-water mark outside its chunk");
            POOLKIT_VERIFY((c.live_blocks == 0) == (c.high_water == c.address), "a wholly free chunk that did not start over");
            POOLKIT_VERIFY(c.live_bytes <= c.high_water - c.address, "more live bytes than were handed out");
            std::size_t chunk_blocks = 0, chunk_bytes = 0;
            std::uintptr_t block_floor = c.address;  // no record starts below it
            for (const auto& record : c.blocks) {
                POOLKIT_VERIFY(record.address >= block_floor && record.address < c.high_water,
                               "a block record out of order or outside what its chunk handed out");
                block_floor = record.address + std::max<std::size_t>(record.bytes, 1);
                POOLKIT_VERIFY(block_floor <= c.high_water, "a block record reaching past the high-water mark");
                if (record.bytes != 0) ++chunk_blocks;
                chunk_bytes += record.bytes;
            }
            POOLKIT_VERIFY(
                c.blocks.empty() || (c.blocks.back().bytes != 0 && c.blocks.back().address + c.blocks.back().bytes == c.high_water),
                "the last block record is not live at the high-water mark");
            POOLKIT_VERIFY(chunk_blocks == c.live_blocks && chunk_bytes == c.live_bytes, "a chunk's block records and counts disagree");
            previous_end = c.address + c.bytes;
            reserved += c.bytes;
            blocks += c.live_blocks;
            bytes += c.live_bytes;
        }
        POOLKIT_VERIFY(current_ == nullptr || chunk_index_.find(*current_) != chunk_index_.end(),
                       "the current chunk is not one of the chunks");
        POOLKIT_VERIFY(reserved == reserved_bytes_ && blocks == live_blocks_ && bytes == live_bytes_, "counts drifted");
        POOLKIT_VERIFY(reserved <= options_.maximum_size, "reserved past the maximum");
        POOLKIT_VERIFY(chunks_.in_use() == chunk_index_.size(), "chunk records leaked");
    }

    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return reserved_bytes_; }
    [[nodiscard]] std::size_t chunks() const noexcept { return chunk_index_.size(); }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }

    // Identity: only the resource that handed out a block can take it back.
    friend bool operator==(const monotonic& a, const monotonic& b) noexcept { return &a == &b; }

private:
    using chunk = detail::monotonic_parts::chunk;
    static constexpr std::size_t unit = default_alignment;

    [[nodiscard]] static bool fits(const chunk& c, std::size_t bytes, std::size_t alignment) noexcept {
        const std::uintptr_t end = c.address + c.bytes;
        if (alignment > end - c.high_water) return false;
        const std::uintptr_t start = align_up(c.high_water, alignment);
        return start <= end && bytes <= end - start;
    }

    // A chunk with room for the request: a wholly free one that holds it, else a new one. Out of
    // line: inlined, this slow path keeps allocate itself from being inlined into its callers.
    [[gnu::noinline]] chunk* next_chunk(std::size_t bytes, std::size_t alignment) {
        for (chunk& c : chunk_index_) {
            if (c.live_blocks == 0 && fits(c, bytes, alignment)) return &c;
        }
        const std::size_t chunk_alignment = std::max(alignment, unit);
        const auto preferred = options_.growth.next_chunk(bytes, reserved_bytes_, options_.initial_size, options_.maximum_size, unit);
        chunk* fresh = detail::grow_chunk(
            preferred, checked_align_up(bytes, unit), [&](std::size_t chunk_bytes) { return try_grow(chunk_bytes, chunk_alignment); },
            [&] { release(); });
        if (fresh != nullptr) return fresh;
        memory_figures failure = memory_figures::held(bytes, alignment, live_bytes_, reserved_bytes_);
        if (options_.maximum_size != std::numeric_limits<std::size_t>::max()) failure.limit_bytes = options_.maximum_size;
        throw out_of_memory("monotonic", failure);
    }

    chunk* try_grow(std::size_t bytes, std::size_t alignment) {
        if (!detail::fits_under(bytes, reserved_bytes_, options_.maximum_size)) return nullptr;
        void* memory = detail::allocate_chunk(upstream_, bytes, alignment);
        if (memory == nullptr) return nullptr;
        chunk* c = nullptr;
        try {
            c = chunks_.make(reinterpret_cast<std::uintptr_t>(memory), bytes, alignment);
        } catch (...) {
            upstream_.deallocate(memory, bytes, alignment);
            throw;
        }
        chunk_index_.insert(*c);
        reserved_bytes_ += bytes;
        return c;
    }

    // The record of the block that starts at `address` in `c`, or nullptr. O(1) for the most
    // recent block, else O(log blocks).
    static detail::monotonic_parts::handed_out* find_block(chunk& c, std::uintptr_t address) noexcept {
        if (c.blocks.empty()) return nullptr;
        if (c.blocks.back().address == address) return &c.blocks.back();
        const auto found = std::lower_bound(c.blocks.begin(), c.blocks.end(), address,
                                            [](const auto& record, std::uintptr_t key) { return record.address < key; });
        return found != c.blocks.end() && found->address == address ? &*found : nullptr;
    }

    [[nodiscard]] const chunk* find_chunk_const(std::uintptr_t address) const noexcept { return detail::find_chunk(chunk_index_, address); }
    chunk* find_chunk(std::uintptr_t address) noexcept { return const_cast<chunk*>(find_chunk_const(address)); }

    void return_chunk(chunk* c) noexcept {
        reserved_bytes_ -= c->bytes;
        upstream_.deallocate(reinterpret_cast<void*>(c->address), c->bytes, c->alignment);
        chunks_.destroy(c);
    }

    [[no_unique_address]] Upstream upstream_;
    monotonic_options options_;
    detail::node_pool<chunk> chunks_;  // before the index: the index goes first on destruction
    detail::monotonic_parts::chunk_set chunk_index_;
    chunk* current_ = nullptr;  // the chunk new blocks come from, or nullptr
    std::size_t reserved_bytes_ = 0;
    std::size_t live_blocks_ = 0;
    std::size_t live_bytes_ = 0;  // as the callers stated the sizes
};

static_assert(resource_with<monotonic<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_try_allocate<monotonic<detail::resource_archetype<>>> && has_release<monotonic<detail::resource_archetype<>>> &&
              has_owns<monotonic<detail::resource_archetype<>>> && has_check_invariants<monotonic<detail::resource_archetype<>>> &&
              has_upstream<monotonic<detail::resource_archetype<>>>);
static_assert(walkable<monotonic<detail::resource_archetype<>>>);

}  // namespace poolkit
