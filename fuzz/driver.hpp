// The shared body of the strategy fuzzers: fuzzer-chosen allocate, free and release steps
// against one resource, with check_invariants() after each step.
//
// Each step reads four bytes: an operation, a 16-bit amount and an alignment exponent. Every
// block must be aligned and disjoint from every live block; out_of_memory is allowed, anything
// else aborts. At the end every block is freed and the resource released. check_invariants() runs
// after every `check_every`-th step and at the end: a resource whose check walks all it holds
// samples it, so that inputs run fast enough for the fuzzer to grow them.
#pragma once

#include <poolkit/core/concepts.hpp>
#include <poolkit/core/errors.hpp>

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

// Runs the steps encoded in `data`. Sizes are amount * scale + 1 when the operation byte is odd
// in its second bit, else amount + 1, so both small and large blocks appear.
template <class R>
void run(R& resource, const std::uint8_t* data, std::size_t size, std::size_t scale, std::size_t check_every = 1) {
    std::map<std::uintptr_t, live_block> live;
    for (std::size_t i = 0; i + 4 <= size; i += 4) {
        const std::uint8_t op = data[i];
        const std::size_t amount = std::size_t{data[i + 1]} << 8 | data[i + 2];
        const std::size_t alignment = std::size_t{1} << (data[i + 3] % 17);
        if (op % 16 == 15) {
            if constexpr (has_release<R>) resource.release();
        } else if (op % 3 != 0 || live.empty()) {
            const std::size_t bytes = 1 + amount * (op & 2 ? scale : 1);
            void* pointer = nullptr;
            try {
                pointer = resource.allocate(bytes, alignment);
            } catch (const out_of_memory&) {
                continue;
            }
            const auto address = reinterpret_cast<std::uintptr_t>(pointer);
            if (pointer == nullptr || address % alignment != 0) std::abort();
            const auto next = live.lower_bound(address);
            if (next != live.end() && next->first < address + bytes) std::abort();
            if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address) std::abort();
            live.emplace(address, live_block{bytes, alignment});
        } else {
            auto victim = live.begin();
            std::advance(victim, static_cast<std::ptrdiff_t>(amount % live.size()));
            resource.deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, victim->second.alignment);
            live.erase(victim);
        }
        if constexpr (has_check_invariants<R>) {
            if ((i / 4) % check_every == 0) resource.check_invariants();
        }
    }
    for (const auto& [address, block] : live) {
        resource.deallocate(reinterpret_cast<void*>(address), block.bytes, block.alignment);
    }
    if constexpr (has_check_invariants<R>) resource.check_invariants();
    if constexpr (has_release<R>) resource.release();
}

}  // namespace poolkit::fuzz
