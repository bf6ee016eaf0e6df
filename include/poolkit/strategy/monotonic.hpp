// monotonic<Upstream>: bump allocation from chunks taken from Upstream.
//
// Each request takes the next suitably aligned bytes of the current chunk; deallocate only counts,
// except that freeing the most recent block of a chunk gives its bytes back (stack order reuses
// memory). A chunk whose blocks are all freed starts over from its beginning; if it is not the
// current one it waits, wholly free, to become current when one is needed, or for release(). Chunks follow options.growth, from options.initial_size up to options.maximum_size
// reserved. Bookkeeping (one host record per chunk) is never written into the chunks.
// Complexity: allocate O(1) while the current chunk has room, else O(chunks) to look for a wholly
// free one before growing; deallocate O(1) into the current chunk, else O(log chunks).
// Thread safety: none; wrap in synchronized<>.
// Alignment: any power of two; padding before a block is lost until its chunk is wholly free.
// Stream semantics: none. Put stream_ordered<> around it.
// Exhaustion: when the upstream throws std::bad_alloc or the maximum would be passed, it tries a
// chunk of just the needed size, then returns its wholly free chunks and tries once more, then
// throws out_of_memory with the live, reserved and cached bytes.
// Bad input caught by assertions: a pointer outside every chunk, a block reaching past what the
// chunk handed out, more frees than allocations in a chunk. A wrong size that stays within those
// bounds cannot be seen: there are no per-block records.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
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
#include <limits>
#include <utility>

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

struct chunk : intrusive::set_hook<chunk_tag> {
    chunk(std::uintptr_t address_, std::size_t bytes_, std::size_t alignment_) noexcept
        : address(address_), bytes(bytes_), alignment(alignment_), high_water(address_) {}
    std::uintptr_t address;
    std::size_t bytes;
    std::size_t alignment;         // as asked of the upstream
    std::uintptr_t high_water;     // the end of what was handed out since the chunk last started over
    std::size_t live_blocks = 0;
    std::size_t live_bytes = 0;
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

    explicit monotonic(Upstream upstream, monotonic_options options = {})
        : upstream_(std::move(upstream)), options_(options) {
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
        current_->high_water = start + bytes;
        ++current_->live_blocks;
        current_->live_bytes += bytes;
        ++live_blocks_;
        live_bytes_ += bytes;
        return reinterpret_cast<void*>(start);
    }

    // As allocate, but nullptr instead of any exception.
    [[nodiscard]] void* try_allocate(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (!is_power_of_two(alignment)) return nullptr;
        try {
            return allocate(bytes, alignment);
        } catch (...) {
            return nullptr;
        }
    }

    // Counts the block as freed; a chunk whose blocks are all freed can start over. Requires:
    // `pointer` came from allocate(bytes, alignment) of this resource and is not yet freed.
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (pointer == nullptr) return;
        static_cast<void>(alignment);
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        chunk* c = current_ != nullptr && address - current_->address < current_->bytes ? current_ : find_chunk(address);
        POOLKIT_ASSERT(c != nullptr, "deallocate of a pointer monotonic did not hand out");
        if (c == nullptr) return;
        const bool plausible = c->live_blocks > 0 && bytes <= c->high_water - address && bytes <= c->live_bytes;
        POOLKIT_ASSERT(plausible, "deallocate with a size other than the one allocated, or freed twice");
        if (!plausible) return;
        --c->live_blocks;
        c->live_bytes -= bytes;
        --live_blocks_;
        live_bytes_ -= bytes;
        if (c->live_blocks == 0) {
            c->live_bytes = 0;
            c->high_water = c->address;  // starts over, current or not
        } else if (address + bytes == c->high_water) {
            c->high_water = address;  // the most recent block: its bytes are handed out again
        }
    }

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

    // Whether `pointer` lies inside what a chunk has handed out since it last started over.
    [[nodiscard]] bool owns(const void* pointer) const noexcept {
        const auto address = reinterpret_cast<std::uintptr_t>(pointer);
        const chunk* c = std::as_const(*this).find_chunk_const(address);
        return c != nullptr && address < c->high_water;
    }

    // The walk of walk.hpp, as far as monotonic can tell: it keeps no per-block records, so each
    // chunk shows at most two blocks, in address order: what it handed out since it last started
    // over, as one live block (its bytes cannot be reused until every block of the chunk is
    // freed; requested_bytes is the live bytes in it, as the callers stated them), then the
    // untouched rest as one free block. O(chunks); allocates nothing.
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
    // has no live block; counts and byte totals add up.
    void check_invariants() const {
        std::size_t reserved = 0, blocks = 0, bytes = 0;
        std::uintptr_t previous_end = 0;
        for (const chunk& c : chunk_index_) {
            POOLKIT_VERIFY(c.address >= previous_end, "chunks overlap");
            POOLKIT_VERIFY(c.high_water >= c.address && c.high_water - c.address <= c.bytes,
                           "a high-water mark outside its chunk");
            POOLKIT_VERIFY((c.live_blocks == 0) == (c.high_water == c.address), "a wholly free chunk that did not start over");
            POOLKIT_VERIFY(c.live_bytes <= c.high_water - c.address, "more live bytes than were handed out");
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
        const auto preferred = options_.growth.next_chunk(bytes, reserved_bytes_, options_.initial_size,
                                                          options_.maximum_size, unit);
        chunk* fresh = detail::grow_chunk(
            preferred, checked_align_up(bytes, unit),
            [&](std::size_t chunk_bytes) { return try_grow(chunk_bytes, chunk_alignment); }, [&] { release(); });
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

    [[nodiscard]] const chunk* find_chunk_const(std::uintptr_t address) const noexcept {
        return detail::find_chunk(chunk_index_, address);
    }
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
              has_owns<monotonic<detail::resource_archetype<>>> &&
              has_check_invariants<monotonic<detail::resource_archetype<>>> &&
              has_upstream<monotonic<detail::resource_archetype<>>>);
static_assert(walkable<monotonic<detail::resource_archetype<>>>);

}  // namespace poolkit
