// Fuzzes simulated_resource with fuzzer-chosen allocate/free sequences; check_invariants() after
// each step, and every live range must stay disjoint from the others.
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    poolkit::simulated_resource resource{{.capacity = std::size_t{64} << 20, .granularity = 512}};
    struct block {
        std::size_t bytes;
        std::size_t alignment;
    };
    std::map<std::uintptr_t, block> live;
    for (std::size_t i = 0; i + 3 <= size; i += 3) {
        const std::uint8_t op = data[i];
        const std::size_t amount = (std::size_t{data[i + 1]} << 8 | data[i + 2]);
        if (op % 3 != 0 || live.empty()) {
            const std::size_t bytes = 1 + amount * (op % 5 == 0 ? 4096 : 1);
            const std::size_t alignment = std::size_t{1} << (op % 14);
            void* pointer = resource.try_allocate(bytes, alignment);
            if (pointer == nullptr) continue;
            const auto address = reinterpret_cast<std::uintptr_t>(pointer);
            if (address % alignment != 0) std::abort();
            const auto next = live.lower_bound(address);
            if (next != live.end() && next->first < address + bytes) std::abort();
            if (next != live.begin() && std::prev(next)->first + std::prev(next)->second.bytes > address) std::abort();
            live.emplace(address, block{bytes, alignment});
        } else {
            auto victim = live.begin();
            std::advance(victim, amount % live.size());
            resource.deallocate(reinterpret_cast<void*>(victim->first), victim->second.bytes, victim->second.alignment);
            live.erase(victim);
        }
        resource.check_invariants();
    }
    for (const auto& [address, b] : live) resource.deallocate(reinterpret_cast<void*>(address), b.bytes, b.alignment);
    if (resource.live_bytes() != 0) std::abort();
    resource.check_invariants();
    return 0;
}
