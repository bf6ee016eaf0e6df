// The caching preset's CPU cost per call as the number of streams grows, over simulated memory
// (no GPU): what stream_ordered adds to find a stream's record and to reuse across streams.
//   pairs_over_streams/N:  allocate + free pairs, each on the next of N streams in turn
//   cross_stream_frees/N:  a block allocated on one stream is freed on the next (a pipeline
//                          handing buffers on), N streams in turn
//   pipeline/N:            each step allocates on the next of N streams and frees there the block
//                          the step before allocated on its own, six sizes in turn (the shape of
//                          bench/pipeline.hpp on the GPU): front blocks rarely fit the next request
//   build-release/bench/poolkit-bench-streams (streams 1, 4, 64, 256, 1024, 4096)
// ns per call (items are calls); compare each N with N = 1 in the same run.
#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {

using simulated_caching = poolkit::caching_resource<poolkit::ref<poolkit::simulated_resource>, poolkit::completed_events>;

std::vector<poolkit::stream_ref> make_streams(std::size_t count) {
    std::vector<poolkit::stream_ref> streams;
    for (std::size_t i = 0; i < count; ++i) streams.emplace_back(reinterpret_cast<poolkit::stream_handle>((i + 1) * 64));
    return streams;
}

void pairs_over_streams(benchmark::State& state) {
    poolkit::simulated_resource memory;
    simulated_caching pool{poolkit::ref(memory)};
    const auto streams = make_streams(static_cast<std::size_t>(state.range(0)));
    constexpr std::size_t sizes[] = {4096, 65536, 1 << 20, 3000};
    for (auto s : streams) {
        for (std::size_t size : sizes) pool.deallocate_async(pool.allocate_async(size, 256, s), size, 256, s);
    }
    std::size_t i = 0;
    for (auto _ : state) {
        const auto s = streams[i % streams.size()];
        const std::size_t size = sizes[i++ % 4];
        void* p = pool.allocate_async(size, 256, s);
        benchmark::DoNotOptimize(p);
        pool.deallocate_async(p, size, 256, s);
    }
    state.SetItemsProcessed(state.iterations() * 2);
}

void cross_stream_frees(benchmark::State& state) {
    poolkit::simulated_resource memory;
    simulated_caching pool{poolkit::ref(memory)};
    const auto streams = make_streams(static_cast<std::size_t>(state.range(0)));
    constexpr std::size_t size = 1 << 20;
    std::size_t i = 0;
    for (auto _ : state) {
        const auto from = streams[i % streams.size()];
        const auto to = streams[(i + 1) % streams.size()];
        ++i;
        void* p = pool.allocate_async(size, 256, from);
        benchmark::DoNotOptimize(p);
        pool.deallocate_async(p, size, 256, to);
    }
    state.SetItemsProcessed(state.iterations() * 2);
}

void pipeline(benchmark::State& state) {
    poolkit::simulated_resource memory;
    simulated_caching pool{poolkit::ref(memory)};
    const auto streams = make_streams(static_cast<std::size_t>(state.range(0)));
    constexpr std::size_t sizes[] = {4096, 262144, 1 << 20, 4 << 20, 65536, 12288};
    void* held = nullptr;
    std::size_t held_size = 0;
    const auto step = [&](std::size_t i) {
        const auto on = streams[i % streams.size()];
        const std::size_t size = sizes[i % 6];
        void* p = pool.allocate_async(size, 256, on);
        benchmark::DoNotOptimize(p);
        if (held != nullptr) pool.deallocate_async(held, held_size, 256, on);
        held = p;
        held_size = size;
    };
    for (std::size_t i = 0; i < streams.size() * 12; ++i) step(i);
    std::size_t i = 0;
    for (auto _ : state) step(i++);
    state.SetItemsProcessed(state.iterations() * 2);
    state.counters["reserved_MiB"] = static_cast<double>(pool.reserved_bytes()) / (1 << 20);
    pool.deallocate_async(held, held_size, 256, streams.front());
}

}  // namespace

BENCHMARK(pairs_over_streams)->Arg(1)->Arg(4)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);
BENCHMARK(cross_stream_frees)->Arg(1)->Arg(4)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);
BENCHMARK(pipeline)->Arg(1)->Arg(4)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096);
