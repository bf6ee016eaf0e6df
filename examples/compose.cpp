// Composing blocks: a coalescing best-fit pool over simulated memory, counted on both sides, then
// the memory_summary table and the fragmentation figures. Compiled and run by the tests.
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdio>
#include <vector>

int main() {
    using upstream = poolkit::counted<poolkit::simulated_resource>;  // counts what the pool reserves
    using pool = poolkit::best_fit<poolkit::ref<upstream>>;  // coalescing best fit
    using observed = poolkit::counted<poolkit::ref<pool>>;  // counts what users hold

    upstream memory;
    pool blocks{poolkit::ref(memory), {.initial_size = std::size_t{64} << 20}};
    observed users{poolkit::ref(blocks)};

    std::vector<void*> live;
    for (std::size_t i = 1; i <= 100; ++i) live.push_back(users.allocate(i * 100'000));
    for (std::size_t i = 0; i < live.size(); i += 2) users.deallocate(live[i], (i + 1) * 100'000);

    std::fputs(poolkit::memory_summary(users).c_str(), stdout);
    const auto stats = users.memory_stats();
    std::printf("allocated now %lld bytes, reserved %lld bytes\n", static_cast<long long>(stats.at("allocated_bytes.all.current")),
                static_cast<long long>(stats.at("reserved_bytes.all.current")));
    for (std::size_t i = 1; i < live.size(); i += 2) users.deallocate(live[i], (i + 1) * 100'000);
    blocks.release();
    return memory.memory_stats().at("allocated_bytes.all.current") == 0 ? 0 : 1;
}
