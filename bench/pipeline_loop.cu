// pipeline.hpp's two shapes through the caching preset in a plain timed loop, with the memory it
// holds at the end: 10^6 steps (2 x 10^5 past 256 streams) after a warm-up, one resource per run.
// Built from two checkouts, the binaries compare two versions of the headers run by run:
//   build/bench/poolkit-bench-pipeline_loop [tag]     (arguments starting with -- are ignored)
// Prints, per shape and stream count: ns per allocate + free pair, MiB reserved, MiB freed and not yet in the pool.
#include "pipeline.hpp"

#include <chrono>
#include <string_view>

namespace {

void run(const char* tag, std::size_t count, bool pipeline, std::size_t steps) {
    auto streams = poolkit_bench::make_streams(count);
    {
        poolkit::caching_device_resource resource;
        void* held = nullptr;
        std::size_t held_size = 0;
        const auto step = [&](std::size_t i) {
            const poolkit::stream_ref on{streams[i % count]};
            const std::size_t size = poolkit_bench::sizes[i % poolkit_bench::size_count];
            void* p = resource.allocate_async(size, 256, on);
            if (!pipeline) {
                resource.deallocate_async(p, size, 256, on);
                return;
            }
            if (held != nullptr) resource.deallocate_async(held, held_size, 256, on);
            held = p;
            held_size = size;
        };
        const std::size_t warm = count * 48;
        for (std::size_t i = 0; i < warm; ++i) step(i);
        const auto start = std::chrono::steady_clock::now();
        for (std::size_t i = 0; i < steps; ++i) step(warm + i);
        const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / steps;
        std::printf("%s %-8s streams %-5zu %9.0f ns/pair  reserved %7zu MiB  pending %zu MiB\n", tag, pipeline ? "pipeline" : "pairs",
                    count, ns, resource.reserved_bytes() >> 20, resource.pending_bytes() >> 20);
        if (held != nullptr) resource.deallocate_async(held, held_size, 256, poolkit::stream_ref{streams.front()});
        cudaDeviceSynchronize();
    }
    for (auto s : streams) cudaStreamDestroy(s);
}

}  // namespace

int main(int argc, char** argv) {
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::fprintf(stderr, "%s: no CUDA device\n", argv[0]);
        return 1;
    }
    const char* tag = "";
    for (int i = 1; i < argc; ++i) {
        if (!std::string_view(argv[i]).starts_with("--")) tag = argv[i];
    }
    for (std::size_t count : {1, 4, 64, 256, 4096}) {
        run(tag, count, false, count >= 4096 ? 400000 : 1000000);
        run(tag, count, true, count >= 256 ? 200000 : 1000000);
    }
    return 0;
}
