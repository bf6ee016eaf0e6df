// Randomized, shuffled allocate/free sequences against any resource, with check_invariants()
// after every step.
//
// run_shuffled(resource, plan) allocates and frees mixed sizes and alignments as `plan` says and
// checks every block: aligned, disjoint from every other live block and, where the memory may be
// touched, holding what was written into it until it is freed. At the end it frees what is left
// in a shuffled order. Failures are doctest REQUIREs, with the seed and step in the message.
#pragma once

#include <poolkit/core/alignment.hpp>
#include <poolkit/core/concepts.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <random>
#include <vector>

namespace poolkit::test {

struct sequence_plan {
    std::uint64_t seed = 1;
    int steps = 3000;
    int allocate_percent = 60;  // of the steps while something is live
    std::size_t small_bytes = 4096;  // most sizes are uniform in [1, small_bytes]
    std::size_t large_bytes = 300000;  // one in eight is uniform in [1, large_bytes]
    int largest_alignment_log2 = 12;  // alignments 1, 2, 4 ... 2^this
    bool touch = false;  // write a pattern into each block and check it on free
};

namespace detail {
struct live_block {
    std::size_t bytes;
    std::size_t alignment;
    unsigned char pattern;
};

inline void write_pattern(std::uintptr_t address, const live_block& block) {
    // First and last bytes are enough to see overlap and stray writes without slowing the walk.
    auto* bytes = reinterpret_cast<unsigned char*>(address);
    const std::size_t span = std::min<std::size_t>(block.bytes, 64);
    std::memset(bytes, block.pattern, span);
    std::memset(bytes + block.bytes - span, block.pattern, span);
}
inline bool holds_pattern(std::uintptr_t address, const live_block& block) {
    const auto* bytes = reinterpret_cast<const unsigned char*>(address);
    const std::size_t span = std::min<std::size_t>(block.bytes, 64);
    for (std::size_t i = 0; i < span; ++i) {
        if (bytes[i] != block.pattern || bytes[block.bytes - 1 - i] != block.pattern) return false;
    }
    return true;
}
}  // namespace detail

template <class R>
void check_if_possible(const R& resource) {
    if constexpr (has_check_invariants<R>) resource.check_invariants();
}

// Runs the plan against `resource`; returns the most blocks that were live at once.
template <class R>
std::size_t run_shuffled(R& resource, const sequence_plan& plan) {
    std::mt19937_64 random(plan.seed);
    std::map<std::uintptr_t, detail::live_block> live;
    std::size_t most_live = 0;
    auto free_one = [&](std::map<std::uintptr_t, detail::live_block>::iterator victim) {
        if (plan.touch) REQUIRE_MESSAGE(detail::holds_pattern(victim->first, victim->second), "a block lost its contents");
        resource.deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, victim->second.alignment);
        live.erase(victim);
    };
    for (int step = 0; step < plan.steps; ++step) {
        INFO("seed ", plan.seed, ", step ", step);
        if (live.empty() || static_cast<int>(random() % 100) < plan.allocate_percent) {
            const std::size_t limit = random() % 8 == 0 ? plan.large_bytes : plan.small_bytes;
            const std::size_t bytes = 1 + random() % limit;
            const std::size_t alignment = std::size_t{1} << (random() % (plan.largest_alignment_log2 + 1));
            void* pointer = resource.allocate(bytes, alignment);
            REQUIRE(pointer != nullptr);
            const auto address = reinterpret_cast<std::uintptr_t>(pointer);
            REQUIRE(address % alignment == 0);
            const auto next = live.lower_bound(address);
            REQUIRE_MESSAGE((next == live.end() || address + bytes <= next->first), "a block overlaps the next one");
            REQUIRE_MESSAGE((next == live.begin() || std::prev(next)->first + std::prev(next)->second.bytes <= address),
                            "a block overlaps the previous one");
            const detail::live_block block{bytes, alignment, static_cast<unsigned char>(random())};
            if (plan.touch) detail::write_pattern(address, block);
            live.emplace(address, block);
            most_live = std::max(most_live, live.size());
        } else {
            auto victim = live.begin();
            std::advance(victim, static_cast<std::ptrdiff_t>(random() % live.size()));
            free_one(victim);
        }
        check_if_possible(resource);
    }
    std::vector<std::uintptr_t> rest;
    for (const auto& entry : live) rest.push_back(entry.first);
    std::shuffle(rest.begin(), rest.end(), random);
    for (std::uintptr_t address : rest) {
        free_one(live.find(address));
        check_if_possible(resource);
    }
    return most_live;
}

}  // namespace poolkit::test
