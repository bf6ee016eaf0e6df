// exact_cache<Upstream>, the large-block cache of the replay's "tiered" composition (which puts
// it behind poolkit::segregator).
//
// exact_cache<Upstream>: keeps freed large blocks whole and hands one out again for a request it
// holds within 1/16 of its size; on a miss, when the cache would exceed an eighth of the live
// bytes, it first returns every cached block to the upstream, then asks the upstream: what it
// holds stays within about 1.125 times what is live. Complexity O(log n) in the cached blocks. Thread safety: none.
// Alignment: the upstream's (a cached block is reused only for an alignment it has). Streams:
// none. Exhaustion: the upstream's, after the cache was emptied.
//
// Why it is not a strategy of include/: none does this job. The nearest, caching_pool's oversize
// pool (a best_fit whose blocks never split), hands out any free block at least as large as the
// request, however much larger, and keeps its chunks until release() or growth; exact_cache
// bounds the waste of each reuse to 1/16 and bounds the whole cache by the live bytes.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>

#include <cstddef>
#include <map>
#include <unordered_map>
#include <utility>

namespace poolkit::replay_tool {

template <resource Upstream>
class exact_cache {
public:
    explicit exact_cache(Upstream upstream) : upstream_(std::move(upstream)) {}
    exact_cache(exact_cache&& other) noexcept
        : upstream_(std::move(other.upstream_)),
          cached_(std::move(other.cached_)),
          live_(std::move(other.live_)),
          live_bytes_(std::exchange(other.live_bytes_, 0)),
          cached_bytes_(std::exchange(other.cached_bytes_, 0)) {
        other.cached_.clear();
        other.live_.clear();
    }
    exact_cache(const exact_cache&) = delete;
    ~exact_cache() { release(); }

    void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
        validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        auto hit = cached_.lower_bound({bytes, 0});
        while (hit != cached_.end() && hit->first.bytes - bytes <= bytes / 16) {
            if (hit->first.alignment >= alignment) {
                void* pointer = hit->second;
                live_.emplace(pointer, hit->first);
                cached_bytes_ -= hit->first.bytes;
                live_bytes_ += hit->first.bytes;
                cached_.erase(hit);
                return pointer;
            }
            ++hit;
        }
        // A miss: keep the cache while it is small next to what is live, else return it.
        if (cached_bytes_ + bytes > live_bytes_ / 8) release();
        void* pointer = upstream_.allocate(bytes, alignment);
        try {
            live_.emplace(pointer, key{bytes, alignment});
            live_bytes_ += bytes;
        } catch (...) {
            upstream_.deallocate(pointer, bytes, alignment);
            throw;
        }
        return pointer;
    }
    void deallocate(void* pointer, std::size_t, std::size_t = default_alignment) noexcept {
        if (pointer == nullptr) return;
        const auto found = live_.find(pointer);
        if (found == live_.end()) return;
        const key block = found->second;
        live_.erase(found);
        live_bytes_ -= block.bytes;
        try {
            cached_.emplace(block, pointer);
            cached_bytes_ += block.bytes;
        } catch (...) {
            upstream_.deallocate(pointer, block.bytes, block.alignment);
        }
    }
    // Returns every cached block to the upstream.
    void release() noexcept {
        for (const auto& [block, pointer] : cached_) upstream_.deallocate(pointer, block.bytes, block.alignment);
        cached_.clear();
        cached_bytes_ = 0;
    }
    friend bool operator==(const exact_cache& a, const exact_cache& b) noexcept { return &a == &b; }

private:
    struct key {
        std::size_t bytes;
        std::size_t alignment;
        bool operator<(const key& other) const noexcept {
            return bytes < other.bytes || (bytes == other.bytes && alignment < other.alignment);
        }
    };
    Upstream upstream_;
    std::multimap<key, void*> cached_;
    std::unordered_map<void*, key> live_;
    std::size_t live_bytes_ = 0;    // in blocks handed out
    std::size_t cached_bytes_ = 0;  // in blocks kept for reuse
};

}  // namespace poolkit::replay_tool
