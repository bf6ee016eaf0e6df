// The C ABI's cost per call (include/poolkit/interop/c_api.h: what PyTorch's and CuPy's allocator
// hooks call): the pool and every layer the plugin puts around it (the check of each free against
// the blocks handed out, statistics, the lock, the history's hook). poolkit-bench-c_api runs the
// simulated plugin (no GPU), poolkit-bench-c_api_cuda the CUDA one (device 0, its default stream:
// the capture check and the device's events too). Sizes as python/checks/programs.py's alloc_free draws them, 16 blocks alive,
// beside `resident` long-lived blocks (a model's parameters and optimizer state).
//   POOLKIT_ALLOCATOR=expandable|caching build-release/bench/poolkit-bench-c_api[_cuda]   (expandable when unset)
#include <poolkit/interop/c_api.h>

#include <benchmark/benchmark.h>

#include <array>
#include <cstdlib>
#include <random>
#include <vector>

namespace {

struct block {
    void* pointer = nullptr;
    ssize_t bytes = 0;
};

void c_api_pairs(benchmark::State& state) {
    static const bool chosen = [] {
        const char* kind = std::getenv("POOLKIT_ALLOCATOR");
        return poolkit_set_allocator(kind != nullptr && *kind != '\0' ? kind : "expandable") == 0;
    }();
    if (!chosen) {
        state.SkipWithError(poolkit_last_error());
        return;
    }
    std::mt19937 draw(2);
    const std::array<ssize_t, 5> sizes{512, 4096, 65536, 1 << 20, 8 << 20};
    const auto next_size = [&] { return sizes[draw() % sizes.size()] + 512 * static_cast<ssize_t>(draw() % 8); };
    std::vector<block> resident(static_cast<std::size_t>(state.range(0)));
    for (block& b : resident) {
        b.bytes = sizes[draw() % 4] + 512 * static_cast<ssize_t>(draw() % 8);
        b.pointer = poolkit_alloc(b.bytes, 0, nullptr);
        if (b.pointer == nullptr) {  // no device, say: said, not timed
            state.SkipWithError(poolkit_last_error());
            for (block& made : resident) {
                if (made.pointer != nullptr) poolkit_free(made.pointer, made.bytes, 0, nullptr);
            }
            return;
        }
    }
    std::vector<ssize_t> drawn(10000);
    for (ssize_t& bytes : drawn) bytes = next_size();
    std::array<block, 16> alive{};
    std::size_t i = 0;
    for (auto _ : state) {
        block& slot = alive[i % alive.size()];
        if (slot.pointer != nullptr) poolkit_free(slot.pointer, slot.bytes, 0, nullptr);
        slot.bytes = drawn[i % drawn.size()];
        slot.pointer = poolkit_alloc(slot.bytes, 0, nullptr);
        if (slot.pointer == nullptr) {
            state.SkipWithError(poolkit_last_error());
            break;
        }
        benchmark::DoNotOptimize(slot.pointer);
        ++i;
    }
    for (block& b : alive) {
        if (b.pointer != nullptr) poolkit_free(b.pointer, b.bytes, 0, nullptr);
    }
    for (block& b : resident) poolkit_free(b.pointer, b.bytes, 0, nullptr);
    state.SetItemsProcessed(state.iterations());  // allocate + free pairs
}

}  // namespace

BENCHMARK(c_api_pairs)->ArgName("resident")->Arg(0)->Arg(5000);
