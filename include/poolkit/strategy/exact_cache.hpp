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
// Complexity: O(log n) in the blocks per call. Thread safety: none; wrap in synchronized<>.
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

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
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

template <resource Upstream>
class exact_cache : public forward_properties<exact_cache<Upstream>, Upstream> {
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
          blocks_(std::exchange(other.blocks_, {})),
          cached_(std::exchange(other.cached_, {})),
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
            blocks_.emplace(address_of(pointer), block{bytes, alignment, bytes, true, cached_.end()});
        } catch (...) {  // no host memory for the record: the block goes back
            upstream_.deallocate(pointer, bytes, alignment);
            throw;
        }
        live_bytes_ += bytes;
        return pointer;
    }

    // `pointer` must be a live block of this cache (checked by POOLKIT_ASSERT); the block it
    // stands for is kept whole, whatever `bytes` says.
    void deallocate(void* pointer, std::size_t /*bytes*/, std::size_t /*alignment*/ = default_alignment) noexcept {
        if (pointer == nullptr) return;
        const auto found = blocks_.find(address_of(pointer));
        const bool live = found != blocks_.end() && found->second.live;
        POOLKIT_ASSERT(live, "exact_cache::deallocate: not a live block of this cache");
        if (!live) return;
        block& b = found->second;
        live_bytes_ -= b.bytes;
        try {
            b.in_cache = cached_.emplace(key{b.bytes, b.alignment}, found->first);
        } catch (...) {  // no host memory to cache it: it goes back
            upstream_.deallocate(pointer, b.bytes, b.alignment);
            blocks_.erase(found);
            return;
        }
        b.live = false;
        b.requested = 0;
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
        for (const auto& [k, address] : cached_) {
            upstream_.deallocate(reinterpret_cast<void*>(address), k.bytes, k.alignment);
            blocks_.erase(address);
        }
        cached_.clear();
        cached_bytes_ = 0;
    }

    [[nodiscard]] bool owns(const void* pointer) const noexcept {
        const auto address = address_of(pointer);
        auto next = blocks_.upper_bound(address);
        if (next == blocks_.begin()) return false;
        --next;
        return address < next->first + next->second.bytes;
    }

    // Each block is a chunk of its own, in address order.
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const auto& [address, b] : blocks_) {
            block_view seen;
            seen.address = address;
            seen.bytes = b.bytes;
            seen.requested_bytes = b.requested;
            seen.live = b.live;
            visit(chunk_view{address, b.bytes}, seen);
        }
    }

    // The byte counts match the blocks; every cached block is indexed once, under its own key.
    void check_invariants() const {
        std::size_t live = 0, cached = 0, indexed = 0;
        for (const auto& [address, b] : blocks_) {
            if (b.live) {
                live += b.bytes;
                POOLKIT_VERIFY(b.requested != 0 && b.requested <= b.bytes, "exact_cache: a live block's request is not inside it");
            } else {
                cached += b.bytes;
                POOLKIT_VERIFY(b.in_cache != cached_.end() && b.in_cache->second == address, "exact_cache: a cached block is not indexed");
                POOLKIT_VERIFY(b.in_cache->first.bytes == b.bytes && b.in_cache->first.alignment == b.alignment,
                               "exact_cache: a cached block is indexed under another key");
                ++indexed;
            }
        }
        POOLKIT_VERIFY(indexed == cached_.size(), "exact_cache: the index holds blocks that are not cached");
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
    struct key {
        std::size_t bytes;
        std::size_t alignment;
        friend bool operator<(const key& a, const key& b) noexcept {
            return a.bytes < b.bytes || (a.bytes == b.bytes && a.alignment < b.alignment);
        }
    };
    using cache_index = std::multimap<key, std::uintptr_t>;
    struct block {
        std::size_t bytes;  // as the upstream gave it
        std::size_t alignment;  // as the upstream gave it
        std::size_t requested;  // while live: what the caller asked for
        bool live;
        typename cache_index::iterator in_cache;  // while cached: its entry in cached_
    };

    static std::uintptr_t address_of(const void* pointer) noexcept { return reinterpret_cast<std::uintptr_t>(pointer); }

    void* take_cached(std::size_t bytes, std::size_t alignment) noexcept {
        const double most = static_cast<double>(bytes) * (1 + options_.max_waste);
        for (auto hit = cached_.lower_bound(key{bytes, 0}); hit != cached_.end() && static_cast<double>(hit->first.bytes) <= most; ++hit) {
            if (hit->first.alignment < alignment) continue;
            block& b = blocks_.find(hit->second)->second;
            b.live = true;
            b.requested = bytes;
            b.in_cache = cached_.end();
            cached_bytes_ -= b.bytes;
            live_bytes_ += b.bytes;
            void* pointer = reinterpret_cast<void*>(hit->second);
            cached_.erase(hit);
            return pointer;
        }
        return nullptr;
    }

    Upstream upstream_;
    exact_cache_options options_;
    std::map<std::uintptr_t, block> blocks_;  // every block, live or cached, by address
    cache_index cached_;  // cached blocks by (bytes, alignment)
    std::size_t live_bytes_ = 0;
    std::size_t cached_bytes_ = 0;
};

static_assert(resource_with<exact_cache<detail::resource_archetype<host_accessible>>, host_accessible>);
static_assert(has_try_allocate_cached<exact_cache<detail::resource_archetype<>>> &&
              has_release<exact_cache<detail::resource_archetype<>>> && walkable<exact_cache<detail::resource_archetype<>>> &&
              has_owns<exact_cache<detail::resource_archetype<>>>);

}  // namespace poolkit
