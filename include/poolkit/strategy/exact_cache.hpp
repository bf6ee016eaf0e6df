// exact_cache<Upstream>: every block is one allocation of the upstream, kept whole when freed and
// handed out again for a request it holds with little waste — a cache of large blocks (behind a
// segregator) whose footprint follows the live bytes.
//
// A freed block is cached; a request takes the smallest cached block of at least its size and
// alignment that wastes at most options.max_waste of the request. On a miss, when the cache would
// exceed options.max_cached of the live bytes, every cached block goes back to the upstream first,
// so what it holds stays within about 1 + max_cached times what is live. caching_pool's oversize
// pool differs: it hands out any free block at least as large as the request, and keeps its chunks
// until release() or growth.
// Complexity: O(log n) in the blocks per call; once warm, no host allocation per call. Thread safety: none; wrap in synchronized<>.
// Alignment: the upstream's; a cached block is reused only for an alignment it has. Stream
// semantics: none; a freed block is reusable at once. Put stream_ordered<> around it.
// Exhaustion: when the upstream throws out_of_memory, the cache goes back and the request is tried
// once more. Bookkeeping is on the host, never in the memory handed out.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/properties.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/detail/intrusive.hpp>
#include <poolkit/strategy/detail/node_pool.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <utility>

namespace poolkit {

struct exact_cache_options {
    // A cached block serves a request it exceeds by at most this fraction of the request.
    double max_waste = 1.0 / 16;
    // On a miss, the cache goes back first when it would exceed this fraction of the live bytes.
    double max_cached = 1.0 / 8;

    // Throws std::invalid_argument, naming the option, for a fraction that is not finite and at
    // least 0. exact_cache's constructor calls it.
    void validate() const {
        for (const auto& [name, value] : {std::pair{"max_waste", max_waste}, std::pair{"max_cached", max_cached}}) {
            if (!std::isfinite(value) || value < 0) {
                throw std::invalid_argument(std::string("poolkit: exact_cache_options.") + name + " must be a finite number of at least 0");
            }
        }
    }
};

namespace detail::exact_cache_parts {

struct by_address_tag;
struct by_size_tag;

// One allocation of the upstream, live or cached: always in the address set, and in the size
// index while cached.
struct block : intrusive::set_hook<by_address_tag>, intrusive::set_hook<by_size_tag> {
    block(std::uintptr_t address_, std::size_t bytes_, std::size_t alignment_) noexcept
        : address(address_), bytes(bytes_), alignment(alignment_), requested(bytes_) {}
    std::uintptr_t address;
    std::size_t bytes;  // as asked of the upstream
    std::size_t alignment;  // as asked of the upstream
    std::size_t requested;  // while live: what the caller asked for; 0 while cached

    [[nodiscard]] bool live() const noexcept { return requested != 0; }
};

struct by_address {
    bool operator()(const block& a, const block& b) const noexcept { return a.address < b.address; }
    bool operator()(const block& a, std::uintptr_t b) const noexcept { return a.address < b; }
    bool operator()(std::uintptr_t a, const block& b) const noexcept { return a < b.address; }
};

struct by_size {
    struct key {
        std::size_t bytes;
        std::size_t alignment;
    };
    static bool less(std::size_t a_bytes, std::size_t a_alignment, std::size_t b_bytes, std::size_t b_alignment) noexcept {
        return a_bytes < b_bytes || (a_bytes == b_bytes && a_alignment < b_alignment);
    }
    bool operator()(const block& a, const block& b) const noexcept { return less(a.bytes, a.alignment, b.bytes, b.alignment); }
    bool operator()(const block& a, const key& b) const noexcept { return less(a.bytes, a.alignment, b.bytes, b.alignment); }
    bool operator()(const key& a, const block& b) const noexcept { return less(a.bytes, a.alignment, b.bytes, b.alignment); }
};

using address_set = intrusive::set<block, by_address_tag, by_address>;
using size_index = intrusive::multiset<block, by_size_tag, by_size>;

}  // namespace detail::exact_cache_parts

template <resource Upstream>
class exact_cache : public forward_properties<exact_cache<Upstream>, Upstream> {
    using block = detail::exact_cache_parts::block;
    using by_address = detail::exact_cache_parts::by_address;
    using by_size = detail::exact_cache_parts::by_size;

public:
    using upstream_type = Upstream;
    using options_type = exact_cache_options;

    exact_cache()
        requires std::default_initializable<Upstream>
        : exact_cache(Upstream{}) {}
    explicit exact_cache(Upstream upstream, exact_cache_options options = {}) : upstream_(std::move(upstream)), options_(options) {
        options_.validate();
    }
    exact_cache(exact_cache&& other) noexcept
        : upstream_(std::move(other.upstream_)),
          options_(other.options_),
          nodes_(std::move(other.nodes_)),
          blocks_(std::move(other.blocks_)),
          cached_(std::move(other.cached_)),
          live_bytes_(std::exchange(other.live_bytes_, 0)),
          cached_bytes_(std::exchange(other.cached_bytes_, 0)) {}
    exact_cache(const exact_cache&) = delete;
    exact_cache& operator=(const exact_cache&) = delete;
    exact_cache& operator=(exact_cache&&) = delete;
    // Cached blocks go back; live ones are the caller's to free first.
    ~exact_cache() { release(); }

    [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        if (void* cached = take_cached(bytes, alignment)) return cached;
        if (static_cast<double>(cached_bytes_) + static_cast<double>(bytes) > static_cast<double>(live_bytes_) * options_.max_cached) {
            release();
        }
        void* pointer = nullptr;
        try {
            pointer = upstream_.allocate(bytes, alignment);
        } catch (const out_of_memory&) {
            if (cached_bytes_ == 0) throw;
            release();
            pointer = upstream_.allocate(bytes, alignment);
        }
        try {
            blocks_.insert(*nodes_.make(address_of(pointer), bytes, alignment));
        } catch (...) {  // no host memory for the node: the block goes back
            upstream_.deallocate(pointer, bytes, alignment);
            throw;
        }
        live_bytes_ += bytes;
        return pointer;
    }

    // `pointer` must be a live block of this cache (checked by POOLKIT_ASSERT); the block it
    // stands for is kept whole, whatever `bytes` says. O(log n), allocating nothing.
    void deallocate(void* pointer, std::size_t /*bytes*/, std::size_t /*alignment*/ = default_alignment) noexcept {
        if (pointer == nullptr) return;
        const auto found = blocks_.find(address_of(pointer), by_address{});
        const bool live = found != blocks_.end() && found->live();
        POOLKIT_ASSERT(live, "exact_cache::deallocate: not a live block of this cache");
        if (!live) return;
        block& b = *found;
        b.requested = 0;
        cached_.insert(b);
        live_bytes_ -= b.bytes;
        cached_bytes_ += b.bytes;
    }
    POOLKIT_CUDA_MR_MEMBERS(exact_cache);

    // A cached block for the request, else nullptr (never the upstream).
    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
        if (bytes == 0 || !is_power_of_two(alignment)) return nullptr;
        return take_cached(bytes, alignment);
    }

    // Every cached block goes back to the upstream.
    void release() noexcept {
        cached_.clear_and_dispose([this](block* b) {
            blocks_.erase(blocks_.iterator_to(*b));
            upstream_.deallocate(reinterpret_cast<void*>(b->address), b->bytes, b->alignment);
            nodes_.destroy(b);
        });
        cached_bytes_ = 0;
    }

    [[nodiscard]] bool owns(const void* pointer) const noexcept {
        const auto address = address_of(pointer);
        auto next = blocks_.upper_bound(address, by_address{});
        if (next == blocks_.begin()) return false;
        --next;
        return address < next->address + next->bytes;
    }

    // Each block is a chunk of its own, in address order.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const block& b : blocks_) {
            block_view seen;
            seen.address = b.address;
            seen.bytes = b.bytes;
            seen.requested_bytes = b.requested;
            seen.live = b.live();
            visit(chunk_view{b.address, b.bytes}, seen);
        }
    }

    // The byte counts match the blocks; the size index holds exactly the cached blocks.
    void check_invariants() const {
        std::size_t live = 0, cached = 0, cached_count = 0;
        for (const block& b : blocks_) {
            if (b.live()) {
                live += b.bytes;
                POOLKIT_VERIFY(b.requested <= b.bytes, "exact_cache: a live block's request is not inside it");
            } else {
                cached += b.bytes;
                ++cached_count;
            }
        }
        for (const block& b : cached_) POOLKIT_VERIFY(!b.live(), "exact_cache: a live block is in the cache index");
        POOLKIT_VERIFY(cached_count == cached_.size(), "exact_cache: a cached block is not in the cache index");
        POOLKIT_VERIFY(nodes_.in_use() == blocks_.size(), "exact_cache: a node is in no block set");
        POOLKIT_VERIFY(live == live_bytes_ && cached == cached_bytes_, "exact_cache: the byte counts drifted");
    }

    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }
    [[nodiscard]] std::size_t cached_bytes() const noexcept { return cached_bytes_; }
    [[nodiscard]] std::size_t reserved_bytes() const noexcept { return live_bytes_ + cached_bytes_; }
    [[nodiscard]] const exact_cache_options& options() const noexcept { return options_; }
    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }
    friend bool operator==(const exact_cache& a, const exact_cache& b) noexcept { return &a == &b; }

private:
    static std::uintptr_t address_of(const void* pointer) noexcept { return reinterpret_cast<std::uintptr_t>(pointer); }

    // The smallest cached block of at least `bytes` and `alignment` within max_waste, taken out of
    // the cache; nullptr when there is none.
    void* take_cached(std::size_t bytes, std::size_t alignment) noexcept {
        const double most = static_cast<double>(bytes) * (1 + options_.max_waste);
        for (auto hit = cached_.lower_bound(by_size::key{bytes, 0}, by_size{});
             hit != cached_.end() && static_cast<double>(hit->bytes) <= most; ++hit) {
            if (hit->alignment < alignment) continue;
            block& b = *hit;
            cached_.erase(hit);
            b.requested = bytes;
            cached_bytes_ -= b.bytes;
            live_bytes_ += b.bytes;
            return reinterpret_cast<void*>(b.address);
        }
        return nullptr;
    }

    Upstream upstream_;
    exact_cache_options options_;
    detail::node_pool<block> nodes_;  // the blocks' bookkeeping: no host allocation per call once warm
    detail::exact_cache_parts::address_set blocks_;  // every block, live or cached, by address
    detail::exact_cache_parts::size_index cached_;  // the cached blocks by (bytes, alignment)
    std::size_t live_bytes_ = 0;
    std::size_t cached_bytes_ = 0;
};

static_assert(resource_with<exact_cache<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_try_allocate_cached<exact_cache<detail::resource_archetype<>>> &&
              has_release<exact_cache<detail::resource_archetype<>>> && walkable<exact_cache<detail::resource_archetype<>>> &&
              has_owns<exact_cache<detail::resource_archetype<>>>);

}  // namespace poolkit
