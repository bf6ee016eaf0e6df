// The stitched blocks of expandable (strategy/expandable.hpp): GMLake's stitching over CUDA
// virtual memory. A large request that would map new memory while enough of the pool's mapped
// memory lies free in pieces too small for it is served from those pieces instead: a range of
// address space of its own aliases them (aliasing_virtual_memory's alias), and the pieces are
// lent to it, carved as live blocks of their spans, until it is freed. A freed stitch keeps its
// aliases, so that the next request of about its size whose pieces are all free again takes it
// with no driver call; a program that repeats its shapes stitches in its first step only.
//
// This header holds the records; the pool lends and takes back the pieces. Each piece is one
// physical allocation of a span, whole: granules [first, last), starting an allocation at first
// and ending one at last. Not thread-safe.
#pragma once

#include <poolkit/strategy/detail/expandable_parts.hpp>

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <utility>
#include <vector>

namespace poolkit {

namespace detail::expandable_parts {

struct piece {
    span* owner;
    std::size_t first;
    std::size_t last;
};

// A range of claimed address space whose pieces alias physical allocations of the pool's spans,
// in order. requested == 0: free (its pieces back in the pool, its aliases kept).
struct stitch {
    std::size_t bytes = 0;
    std::size_t requested = 0;
    std::vector<piece> pieces;
};

class stitch_set {
public:
    // A pool keeps at most this many: each holds address space and aliases until release().
    static constexpr std::size_t most = 64;

    [[nodiscard]] bool empty() const noexcept { return all_.empty(); }
    [[nodiscard]] std::size_t size() const noexcept { return all_.size(); }
    [[nodiscard]] std::size_t live() const noexcept { return live_; }
    [[nodiscard]] std::size_t live_bytes() const noexcept { return live_bytes_; }

    // The live stitch that starts at `address`, or nullptr. O(log n).
    [[nodiscard]] stitch* live_at(std::uintptr_t address) noexcept {
        if (live_ == 0) return nullptr;
        const auto found = all_.find(address);
        return found != all_.end() && found->second.requested != 0 ? &found->second : nullptr;
    }
    // Whether `address` lies inside a live stitch.
    [[nodiscard]] bool inside_live(std::uintptr_t address) const noexcept {
        if (live_ == 0) return false;
        auto after = all_.upper_bound(address);
        if (after == all_.begin()) return false;
        const auto& [start, s] = *std::prev(after);
        return s.requested != 0 && address - start < s.requested;
    }

    stitch& add(std::uintptr_t address, stitch s) { return all_.emplace(address, std::move(s)).first->second; }
    void lend(stitch& s, std::size_t requested) noexcept {
        s.requested = requested;
        ++live_;
        live_bytes_ += requested;
    }
    void take_back(stitch& s) noexcept {
        live_bytes_ -= s.requested;
        s.requested = 0;
        --live_;
    }

    // Every stitch: f(address, stitch).
    template <class F>
    void for_each(F&& f) {
        for (auto& [address, s] : all_) f(address, s);
    }
    template <class F>
    void for_each(F&& f) const {
        for (const auto& [address, s] : all_) f(address, s);
    }
    // Forgets the stitches for which f(address, stitch) says true (after it gave back their
    // aliases and address space); a live one stops counting as live.
    template <class F>
    void erase_if(F&& f) {
        for (auto it = all_.begin(); it != all_.end();) {
            if (!f(it->first, it->second)) {
                ++it;
                continue;
            }
            if (it->second.requested != 0) take_back(it->second);
            it = all_.erase(it);
        }
    }

private:
    std::map<std::uintptr_t, stitch> all_;
    std::size_t live_ = 0;
    std::size_t live_bytes_ = 0;  // requested bytes of the live ones
};

}  // namespace detail::expandable_parts

}  // namespace poolkit
