// Fuzzes simulated_resource with fuzzer-chosen allocate/free sequences: every live range must stay
// aligned and disjoint from the others (checked at every step), and check_invariants() runs after
// every 16th step (at a phase set by the input's length), after the first refused allocation of a
// run, after the last step and at the end. An input runs at most 128 steps (bytes past them are
// ignored), so that the fuzzer runs at well over 1,000 inputs a second.
#include <poolkit/upstream/simulated_resource.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>

namespace {

constexpr std::size_t max_steps = 128;
constexpr std::size_t check_every = 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource resource{{.capacity = std::size_t{64} << 20, .granularity = 512}};
    struct block {
        std::size_t bytes;
        std::size_t alignment;
    };
    std::map<std::uintptr_t, block> live;
    const std::size_t steps = std::min(size / 3, max_steps);
    const std::size_t phase = steps % check_every;
    bool refused_before = false;  // the previous step's allocation was refused
    for (std::size_t step = 0; step < steps; ++step) {
        const std::size_t i = 3 * step;
        bool must_check = step + 1 == steps || (step + phase) % check_every == 0;
        bool refused_now = false;
        const std::uint8_t op = data[i];
        const std::size_t amount = (std::size_t{data[i + 1]} << 8 | data[i + 2]);
        if (op % 3 != 0 || live.empty()) {
            const std::size_t bytes = 1 + amount * (op % 5 == 0 ? 4096 : 1);
            const std::size_t alignment = std::size_t{1} << (op % 14);
            void* pointer = resource.try_allocate(bytes, alignment);
            if (pointer == nullptr) {
                refused_now = true;
                must_check = must_check || !refused_before;
            } else {
                const auto address = reinterpret_cast<std::uintptr_t>(pointer);
                if (address % alignment != 0) std::abort();
                const auto next = live.lower_bound(address);
                if (next != live.end() && next->first < address + bytes) std::abort();
                if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address) std::abort();
                live.emplace(address, block{bytes, alignment});
            }
        } else {
            auto victim = live.begin();
            std::advance(victim, amount % live.size());
            resource.deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, victim->second.alignment);
            live.erase(victim);
        }
        refused_before = refused_now;
        if (must_check) resource.check_invariants();
    }
    for (const auto& [address, b] : live) resource.deallocate(reinterpret_cast<void*>(address), b.bytes, b.alignment);
    if (resource.live_bytes() != 0) std::abort();
    resource.check_invariants();
    return 0;
}
