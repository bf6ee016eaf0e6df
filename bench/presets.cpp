// The caching preset's CPU cost per call, over simulated memory and simulated streams: what it adds
// to a replay or a training step, apart from the GPU.
//   build-release/bench/poolkit-bench-presets
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/recorded.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

namespace {

using simulated_caching = poolkit::caching_resource<poolkit::ref<poolkit::simulated_resource>, poolkit::host_events>;

// Warm allocate + free pairs of `bytes` on one stream through `r`.
template <class R>
void time_pairs(benchmark::State& state, R& r, std::size_t bytes) {
    const poolkit::stream_ref stream = poolkit::default_stream;
    r.deallocate_async(r.allocate_async(bytes, 256, stream), bytes, 256, stream);
    for (auto _ : state) {
        void* p = r.allocate_async(bytes, 256, stream);
        benchmark::DoNotOptimize(p);
        r.deallocate_async(p, bytes, 256, stream);
    }
    state.SetItemsProcessed(state.iterations() * 2);
}

// A warm allocate + free pair of one size on one stream.
void caching_pair(benchmark::State& state) {
    poolkit::simulated_resource memory;
    simulated_caching pool{poolkit::ref(memory)};
    time_pairs(state, pool, static_cast<std::size_t>(state.range(0)));
}

// RMM's random_allocations shape: 73% allocate, sizes uniform up to a maximum, frees at random.
void caching_random(benchmark::State& state) {
    poolkit::simulated_resource memory;
    simulated_caching pool{poolkit::ref(memory)};
    const auto maximum = static_cast<std::size_t>(state.range(0));
    const poolkit::stream_ref stream = poolkit::default_stream;
    std::mt19937_64 random(1);
    std::vector<std::pair<void*, std::size_t>> live;
    live.reserve(1 << 16);
    for (auto _ : state) {
        if (live.empty() || (random() % 100 < 73 && live.size() < 4096)) {
            const std::size_t bytes = 1 + random() % maximum;
            live.emplace_back(pool.allocate_async(bytes, 256, stream), bytes);
        } else {
            const std::size_t index = random() % live.size();
            pool.deallocate_async(live[index].first, live[index].second, 256, stream);
            live[index] = live.back();
            live.pop_back();
        }
    }
    for (auto [p, bytes] : live) pool.deallocate_async(p, bytes, 256, stream);
    state.SetItemsProcessed(state.iterations());
}

// The pair of caching_pair through recorded<>: history off (0), recording (1), recording with a
// label per alloc and free (2, a counter: the cost of poolkit's side, not of gathering a stack).
void caching_pair_recorded(benchmark::State& state) {
    poolkit::simulated_resource memory;
    simulated_caching pool{poolkit::ref(memory)};
    poolkit::history history;
    poolkit::recorded users{pool, history};
    std::uint64_t labels = 0;
    if (state.range(0) == 1) history.start(1 << 16);
    if (state.range(0) == 2) {
        history.start(1 << 16, {[](void* count, poolkit::history_action) noexcept { return ++*static_cast<std::uint64_t*>(count); },
                                [](void*, std::uint64_t) noexcept {}, &labels});
    }
    time_pairs(state, users, std::size_t{1} << 20);
}

}  // namespace

BENCHMARK(caching_pair_recorded)->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(caching_pair)->Arg(4096)->Arg(1 << 20)->Arg(64 << 20);
BENCHMARK(caching_random)->Arg(1 << 20)->Arg(64 << 20);
