// A strategy of your own: keeps freed blocks by exact size and hands them out again for the same
// size; everything else goes to the upstream. docs/extending.md walks through it.
//
// What makes it a poolkit strategy: it takes its upstream as the first template parameter and holds
// it by value (a poolkit::ref to share one), is constructible from (upstream, options), names
// upstream_type and options_type, offers the optional capabilities where they work
// (try_allocate_cached: only from the cache; release; check_invariants), forwards its upstream's
// properties, and keeps its bookkeeping off the memory it manages (device memory is not
// host-readable). With try_allocate_cached and release it is a lane pool:
// stream_ordered<U, lanes<size_cache>> builds it over a ref to the shared upstream.
// Complexity: O(log sizes). Thread safety: none. Alignment: the upstream's, for requests of the
// same alignment. Exhaustion: the upstream's; on failure the cache goes back and the request is
// tried once more.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/assert.hpp>
#include <poolkit/core/concepts.hpp>
#include <poolkit/core/cuda_mr_spelling.hpp>
#include <poolkit/core/properties.hpp>

#include <cstddef>
#include <map>
#include <new>
#include <utility>
#include <vector>

namespace example {

struct size_cache_options {
    std::size_t max_cached_blocks = 1024;  // past this, a freed block goes back at once
};

template <poolkit::resource Upstream>
class size_cache : public poolkit::forward_properties<size_cache<Upstream>, Upstream> {
public:
    using upstream_type = Upstream;
    using options_type = size_cache_options;

    explicit size_cache(Upstream upstream, size_cache_options options = {}) : upstream_(std::move(upstream)), options_(options) {}
    size_cache(const size_cache&) = delete;
    size_cache& operator=(const size_cache&) = delete;
    ~size_cache() { release(); }

    void* allocate(std::size_t bytes, std::size_t alignment = poolkit::default_alignment) {
        poolkit::validate_alignment(alignment);
        if (bytes == 0) return nullptr;
        if (void* cached = try_allocate_cached(bytes, alignment)) return cached;
        try {
            return upstream_.allocate(bytes, alignment);
        } catch (const std::bad_alloc&) {
            release();
            return upstream_.allocate(bytes, alignment);
        }
    }
    void deallocate(void* pointer, std::size_t bytes, std::size_t alignment = poolkit::default_alignment) noexcept {
        if (pointer == nullptr) return;
        if (cached_ < options_.max_cached_blocks) {
            try {
                cache_[{bytes, alignment}].push_back(pointer);
                ++cached_;
                return;
            } catch (...) {  // no host memory for the record: give the block back instead
            }
        }
        upstream_.deallocate(pointer, bytes, alignment);
    }
    POOLKIT_CUDA_MR_MEMBERS(size_cache);  // the same in CCCL 3.1's cuda::mr spelling (none under 3.0)

    [[nodiscard]] void* try_allocate_cached(std::size_t bytes, std::size_t alignment = poolkit::default_alignment) noexcept {
        const auto found = cache_.find({bytes, alignment});
        if (found == cache_.end() || found->second.empty()) return nullptr;
        void* pointer = found->second.back();
        found->second.pop_back();
        --cached_;
        return pointer;
    }
    void release() noexcept {
        for (auto& [key, pointers] : cache_) {
            for (void* pointer : pointers) upstream_.deallocate(pointer, key.first, key.second);
        }
        cache_.clear();
        cached_ = 0;
    }
    void check_invariants() const {
        std::size_t count = 0;
        for (const auto& entry : cache_) count += entry.second.size();
        POOLKIT_VERIFY(count == cached_, "size_cache: the cached count drifted");
    }

    [[nodiscard]] Upstream& upstream_resource() noexcept { return upstream_; }
    [[nodiscard]] const Upstream& upstream_resource() const noexcept { return upstream_; }
    friend bool operator==(const size_cache& a, const size_cache& b) noexcept { return &a == &b; }

private:
    Upstream upstream_;
    size_cache_options options_;
    std::map<std::pair<std::size_t, std::size_t>, std::vector<void*>> cache_;  // (bytes, alignment) -> blocks
    std::size_t cached_ = 0;
};

}  // namespace example
