// The shared body of the strategy fuzzers: fuzzer-chosen allocate, free and release steps
// against one resource, with check_invariants() sampled over the steps.
//
// Each step reads four bytes: an operation, a 16-bit amount and an alignment exponent. Every
// block must be aligned and disjoint from every live block (checked at every step); out_of_memory
// is allowed, anything else aborts. At the end every block is freed and the resource released.
//
// Speed: the fuzzers must run at well over 1,000 inputs a second, and check_invariants() walks
// all a resource holds, so it is sampled. It runs after
//   - every `check_every`-th step, at a phase set by the input's length (mutations that change the
//     length move the checked steps, so every step position is checked in some inputs),
//   - every release step, and the first out_of_memory of a run of them (the paths that change the
//     most at once: returning chunks, and exhaustion's release-and-retry),
//   - the last step (while blocks are still live), after every block is freed, and after the
//     final release.
// So every input ends checked, and a corruption that lasts is caught within `check_every` steps.
// Only the first `max_steps` steps of an input run: past that the input's bytes are ignored.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/errors.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <iterator>
#include <map>

namespace poolkit::fuzz {

struct live_block {
    std::size_t bytes;
    std::size_t alignment;
};

inline constexpr std::size_t default_check_every = 16;
inline constexpr std::size_t default_max_steps = 128;

// Runs the steps encoded in `data`. Sizes are amount * scale + 1 when the operation byte is odd
// in its second bit, else amount + 1, so both small and large blocks appear.
template <class R>
void run(R& resource, const std::uint8_t* data, std::size_t size, std::size_t scale, std::size_t check_every = default_check_every,
         std::size_t max_steps = default_max_steps) {
    check_every = std::max<std::size_t>(check_every, 1);
    const std::size_t steps = std::min(size / 4, max_steps);
    const std::size_t phase = steps % check_every;
    [[maybe_unused]] const auto check = [&resource] {
        if constexpr (has_check_invariants<R>) resource.check_invariants();
    };
    std::map<std::uintptr_t, live_block> live;
    bool out_of_memory_before = false;  // the previous step was refused
    for (std::size_t step = 0; step < steps; ++step) {
        const std::uint8_t* bytes_of_step = data + 4 * step;
        const std::uint8_t op = bytes_of_step[0];
        const std::size_t amount = std::size_t{bytes_of_step[1]} << 8 | bytes_of_step[2];
        const std::size_t alignment = std::size_t{1} << (bytes_of_step[3] % 17);
        bool must_check = step + 1 == steps || (step + phase) % check_every == 0;
        bool out_of_memory_now = false;
        if (op % 16 == 15) {
            if constexpr (has_release<R>) {
                resource.release();
                must_check = true;
            }
        } else if (op % 3 != 0 || live.empty()) {
            const std::size_t bytes = 1 + amount * (op & 2 ? scale : 1);
            void* pointer = nullptr;
            try {
                pointer = resource.allocate(bytes, alignment);
            } catch (const out_of_memory&) {
                out_of_memory_now = true;
                must_check = must_check || !out_of_memory_before;
            }
            if (!out_of_memory_now) {
                const auto address = reinterpret_cast<std::uintptr_t>(pointer);
                if (pointer == nullptr || address % alignment != 0) std::abort();
                const auto next = live.lower_bound(address);
                if (next != live.end() && next->first < address + bytes) std::abort();
                if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address) std::abort();
                live.emplace(address, live_block{bytes, alignment});
            }
        } else {
            auto victim = live.begin();
            std::advance(victim, static_cast<std::ptrdiff_t>(amount % live.size()));
            resource.deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, victim->second.alignment);
            live.erase(victim);
        }
        out_of_memory_before = out_of_memory_now;
        if (must_check) check();
    }
    for (const auto& [address, block] : live) {
        resource.deallocate(reinterpret_cast<void*>(address), block.bytes, block.alignment);
    }
    check();
    if constexpr (has_release<R>) {
        resource.release();
        check();
    }
}

}  // namespace poolkit::fuzz
