// Allocate+free pairs straight from the host upstreams: the floor every strategy is measured over.
//   build/bench/poolkit-bench-upstream
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <benchmark/benchmark.h>

namespace {

template <class Resource>
void allocate_free_pair(benchmark::State& state) {
    Resource resource;
    const auto bytes = static_cast<std::size_t>(state.range(0));
    for (auto _ : state) {
        void* pointer = resource.allocate(bytes, poolkit::default_alignment);
        benchmark::DoNotOptimize(pointer);
        resource.deallocate(pointer, bytes, poolkit::default_alignment);
    }
    state.SetItemsProcessed(state.iterations());
}

}  // namespace

BENCHMARK(allocate_free_pair<poolkit::new_delete_resource>)->Arg(256)->Arg(64 << 10)->Arg(4 << 20);
BENCHMARK(allocate_free_pair<poolkit::simulated_resource>)->Arg(256)->Arg(64 << 10)->Arg(4 << 20);
