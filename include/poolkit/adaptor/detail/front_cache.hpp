// front_cache: the blocks freed on one stream that no event covers yet.
//
// Contract:
// - Every block in it was freed on its stream, so work issued there later is ordered after the
//   block's last use: take() hands one to a request on that stream at once, with no event. No
//   other stream may take one (stream_ordered covers the cache with an event first).
// - take() matches the request's size and alignment exactly (what a deallocate names is what its
//   allocate asked), newest first; a 64-bit mask of size hashes, with a count per bit, lets most
//   misses scan nothing.
// - At most `capacity` blocks; room is taken as it fills (most streams never free on their own).
//   The owner bounds it (in blocks, bytes and streams with an open cache) and covers it past that.
// Complexity: push O(1) amortized; take O(blocks) at worst, O(1) when the mask rules the size out.
// Not thread-safe.
#pragma once

#include <poolkit/core/assert.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace poolkit::detail {

struct free_block {
    void* pointer = nullptr;
    std::size_t bytes = 0;
    std::size_t alignment = 0;
};

class front_cache {
public:
    explicit front_cache(std::size_t capacity) noexcept : capacity_(capacity) {}

    [[nodiscard]] bool full() const noexcept { return blocks_.size() >= capacity_; }

    // Requires !full(). False: no host memory for it, nothing changed.
    [[nodiscard]] bool push(const free_block& block) noexcept {
        POOLKIT_ASSERT(!full(), "front_cache::push past its capacity");
        try {
            blocks_.push_back(block);
        } catch (...) {
            return false;
        }
        const unsigned bit = bit_of(block.bytes);
        ++counts_[bit];
        mask_ |= std::uint64_t{1} << bit;
        bytes_ += block.bytes;
        return true;
    }

    // A block of exactly `bytes` and `alignment`, newest first; nullptr if there is none.
    [[nodiscard]] void* take(std::size_t bytes, std::size_t alignment) noexcept {
        const unsigned bit = bit_of(bytes);
        if ((mask_ >> bit & 1) == 0) return nullptr;
        for (std::size_t i = blocks_.size(); i-- > 0;) {
            if (blocks_[i].bytes != bytes || blocks_[i].alignment != alignment) continue;
            void* pointer = blocks_[i].pointer;
            blocks_.erase(blocks_.begin() + static_cast<std::ptrdiff_t>(i));
            if (--counts_[bit] == 0) mask_ &= ~(std::uint64_t{1} << bit);
            bytes_ -= bytes;
            return pointer;
        }
        return nullptr;
    }

    // Every block, oldest first; clear() empties the cache.
    [[nodiscard]] std::span<const free_block> blocks() const noexcept { return blocks_; }
    void clear() noexcept {
        blocks_.clear();
        counts_ = {};
        mask_ = 0;
        bytes_ = 0;
    }

    [[nodiscard]] bool empty() const noexcept { return blocks_.empty(); }
    [[nodiscard]] std::size_t size() const noexcept { return blocks_.size(); }
    [[nodiscard]] std::size_t bytes() const noexcept { return bytes_; }

    // The mask, counts and bytes agree with the blocks.
    [[nodiscard]] bool consistent() const noexcept {
        std::array<std::uint16_t, 64> counts{};
        std::size_t bytes = 0;
        for (const free_block& b : blocks_) {
            ++counts[bit_of(b.bytes)];
            bytes += b.bytes;
        }
        std::uint64_t mask = 0;
        for (unsigned bit = 0; bit < 64; ++bit) mask |= std::uint64_t{counts[bit] != 0} << bit;
        return counts == counts_ && mask == mask_ && bytes == bytes_;
    }

private:
    static unsigned bit_of(std::size_t bytes) noexcept {
        return static_cast<unsigned>((static_cast<std::uint64_t>(bytes) * 0x9e3779b97f4a7c15) >> 58);
    }

    std::size_t capacity_;
    std::vector<free_block> blocks_;
    std::array<std::uint16_t, 64> counts_{};
    std::uint64_t mask_ = 0;
    std::size_t bytes_ = 0;
};

}  // namespace poolkit::detail
