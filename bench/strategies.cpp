// Every strategy over simulated_resource: warm allocate+free pairs at fixed sizes, and random
// sequences in the shape of RMM's random_allocations benchmark (73% allocate while something is
// live, sizes uniform in [1, max], frees of a uniformly chosen live block).
//   cmake -S . -B build-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DPOOLKIT_CUDA=OFF
//   cmake --build build-release --target poolkit-bench-strategies
//   build-release/bench/poolkit-bench-strategies
// Numbers quoted in docs/strategies.md name the machine they were taken on.
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

namespace {

using namespace poolkit;
using simulated_ref = ref<simulated_resource>;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

// Each factory owns the simulated upstream and the strategy over it.
struct best_fit_factory {
    simulated_resource addresses{{.capacity = std::size_t{512} << 30}};
    best_fit<simulated_ref> resource{addresses, {.initial_size = std::size_t{1} << 30}};
};

struct size_classes_factory {
    simulated_resource addresses{{.capacity = std::size_t{512} << 30}};
    size_classes<simulated_ref> resource{addresses};
};
struct buddy_factory {
    simulated_resource addresses{{.capacity = std::size_t{512} << 30}};
    buddy<simulated_ref> resource{addresses, {.chunk_size = std::size_t{64} << 20}};
};
struct fixed_size_factory {  // 1 MiB blocks: every size of the benchmarks fits
    simulated_resource addresses{{.capacity = std::size_t{512} << 30}};
    fixed_size<simulated_ref> resource{addresses, {.block_size = std::size_t{1} << 20, .slab_size = std::size_t{64} << 20}};
};

struct monotonic_factory {
    simulated_resource addresses{{.capacity = std::size_t{512} << 30}};
    monotonic<simulated_ref> resource{addresses, {.initial_size = std::size_t{1} << 30}};
};
struct segregator_factory {  // size_classes up to 64 KiB, best_fit above
    simulated_resource addresses{{.capacity = std::size_t{512} << 30}};
    segregator<64 * KiB, size_classes<simulated_ref>, best_fit<simulated_ref>> resource{
        size_classes<simulated_ref>{addresses, {.largest = 64 * KiB}},
        best_fit<simulated_ref>{addresses, {.initial_size = std::size_t{1} << 30}}};
};
struct fallback_factory {  // best_fit capped at 1 GiB, then buddy
    simulated_resource addresses{{.capacity = std::size_t{512} << 30}};
    fallback<best_fit<simulated_ref>, buddy<simulated_ref>> resource{
        best_fit<simulated_ref>{addresses, {.initial_size = std::size_t{1} << 30, .maximum_size = std::size_t{1} << 30}},
        buddy<simulated_ref>{addresses, {.chunk_size = std::size_t{64} << 20}}};
};

template <class Factory>
void allocate_free_pair(benchmark::State& state) {
    auto factory = std::make_unique<Factory>();
    auto& resource = factory->resource;
    const auto bytes = static_cast<std::size_t>(state.range(0));
    resource.deallocate(resource.allocate(bytes, default_alignment), bytes, default_alignment);  // warm
    for (auto _ : state) {
        void* pointer = resource.allocate(bytes, default_alignment);
        benchmark::DoNotOptimize(pointer);
        resource.deallocate(pointer, bytes, default_alignment);
    }
    state.SetItemsProcessed(state.iterations());
}

// One step of a random sequence: allocate `bytes`, or free the live block at `victim` (an index
// taken modulo the live count when the step runs).
struct step {
    bool allocate;
    std::size_t bytes;
    std::size_t victim;
};

std::vector<step> random_steps(std::size_t allocations, std::size_t max_bytes, std::uint64_t seed) {
    std::mt19937_64 random(seed);
    std::uniform_int_distribution<std::size_t> size(1, max_bytes);
    std::uniform_int_distribution<int> percent(0, 99);
    std::vector<step> steps;
    std::size_t live = 0;
    for (std::size_t made = 0; made < allocations;) {
        if (live == 0 || percent(random) < 73) {
            steps.push_back({true, size(random), 0});
            ++live;
            ++made;
        } else {
            steps.push_back({false, 0, static_cast<std::size_t>(random())});
            --live;
        }
    }
    return steps;
}

template <class Factory>
void random_allocations(benchmark::State& state) {
    const auto allocations = static_cast<std::size_t>(state.range(0));
    const auto max_bytes = static_cast<std::size_t>(state.range(1));
    const std::vector<step> steps = random_steps(allocations, max_bytes, 42);
    auto factory = std::make_unique<Factory>();
    auto& resource = factory->resource;
    struct live_block {
        void* pointer;
        std::size_t bytes;
    };
    std::vector<live_block> live;
    live.reserve(allocations);
    for (auto _ : state) {
        for (const step& s : steps) {
            if (s.allocate) {
                live.push_back({resource.allocate(s.bytes, default_alignment), s.bytes});
            } else {
                const std::size_t index = s.victim % live.size();
                resource.deallocate(live[index].pointer, live[index].bytes, default_alignment);
                live[index] = live.back();
                live.pop_back();
            }
        }
        for (const live_block& block : live) resource.deallocate(block.pointer, block.bytes, default_alignment);
        live.clear();
    }
    state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(steps.size()));
}

void fixed_sizes(benchmark::internal::Benchmark* benchmark) {
    for (std::size_t bytes : {std::size_t{256}, 4 * KiB, 64 * KiB, 1 * MiB}) benchmark->Arg(static_cast<std::int64_t>(bytes));
}
void random_shapes(benchmark::internal::Benchmark* benchmark) {
    for (std::size_t max_bytes : {4 * KiB, 64 * KiB, 1 * MiB}) {
        benchmark->Args({10000, static_cast<std::int64_t>(max_bytes)});
    }
}

}  // namespace

BENCHMARK(allocate_free_pair<best_fit_factory>)->Name("best_fit/pair")->Apply(fixed_sizes);
BENCHMARK(random_allocations<best_fit_factory>)->Name("best_fit/random")->Apply(random_shapes);
BENCHMARK(allocate_free_pair<size_classes_factory>)->Name("size_classes/pair")->Apply(fixed_sizes);
BENCHMARK(random_allocations<size_classes_factory>)->Name("size_classes/random")->Apply(random_shapes);
BENCHMARK(allocate_free_pair<buddy_factory>)->Name("buddy/pair")->Apply(fixed_sizes);
BENCHMARK(random_allocations<buddy_factory>)->Name("buddy/random")->Apply(random_shapes);
BENCHMARK(allocate_free_pair<fixed_size_factory>)->Name("fixed_size/pair")->Apply(fixed_sizes);
BENCHMARK(random_allocations<fixed_size_factory>)->Name("fixed_size/random")->Apply(random_shapes);
BENCHMARK(allocate_free_pair<monotonic_factory>)->Name("monotonic/pair")->Apply(fixed_sizes);
BENCHMARK(random_allocations<monotonic_factory>)->Name("monotonic/random")->Apply(random_shapes);
BENCHMARK(allocate_free_pair<segregator_factory>)->Name("segregator/pair")->Apply(fixed_sizes);
BENCHMARK(random_allocations<segregator_factory>)->Name("segregator/random")->Apply(random_shapes);
BENCHMARK(allocate_free_pair<fallback_factory>)->Name("fallback/pair")->Apply(fixed_sizes);
BENCHMARK(random_allocations<fallback_factory>)->Name("fallback/random")->Apply(random_shapes);
