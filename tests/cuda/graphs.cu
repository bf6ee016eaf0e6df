// CUDA graphs on a real GPU: the caching preset serves a captured stream from a graph pool, in
// every capture mode; the graph is launched many times between eager allocations on another
// stream, which never receive the graph's memory, and the graph's own checks see only its writes.
#include "support.hpp"
#include "late_kernels.cuh"
#include "../support/spans.hpp"

#include <poolkit/presets.hpp>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

using namespace poolkit;
using namespace poolkit::test;

TEST_CASE("the caching preset under stream capture, in every mode: graph memory never serves eager work") {
    for (const cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed}) {
        CAPTURE(static_cast<int>(mode));
        caching_device_allocator pool;
        scoped_stream capturing, eager;
        counter bad;
        constexpr std::size_t small = std::size_t{1} << 20, large = std::size_t{4} << 20;  // uint32 counts
        for (int i = 0; i < 4; ++i) {  // a warm shared pool
            void* p = pool.allocate_async(small * 4, 256, eager);
            pool.deallocate_async(p, small * 4, 256, eager);
        }
        REQUIRE(cudaStreamSynchronize(eager.handle) == cudaSuccess);

        REQUIRE(cudaStreamBeginCapture(capturing.handle, mode) == cudaSuccess);
        const std::uint64_t graph_pool = pool.graph_pool_of(capturing);
        CHECK(graph_pool != 0);
        auto* a = static_cast<std::uint32_t*>(pool.allocate_async(small * 4, 256, capturing));
        slow_fill<<<grid, block, 0, capturing.handle>>>(a, small, 7, 0);
        count_other<<<grid, block, 0, capturing.handle>>>(a, small, 7, 0, bad.device);
        pool.deallocate_async(a, small * 4, 256, capturing);
        auto* b = static_cast<std::uint32_t*>(pool.allocate_async(large * 4, 256, capturing));  // grows the graph pool
        slow_fill<<<grid, block, 0, capturing.handle>>>(b, large, 8, slow / 4);
        count_other<<<grid, block, 0, capturing.handle>>>(b, large, 8, 0, bad.device);
        pool.deallocate_async(b, large * 4, 256, capturing);
        cudaGraph_t graph{};
        REQUIRE(cudaStreamEndCapture(capturing.handle, &graph) == cudaSuccess);
        cudaGraphExec_t exec{};
        REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
        const std::vector<span> graph_memory{span_of(a, small * 4), span_of(b, large * 4)};

        std::mt19937_64 random(11);
        int overlapping = 0;
        for (int launch = 0; launch < 1000; ++launch) {
            REQUIRE(cudaGraphLaunch(exec, capturing.handle) == cudaSuccess);
            const std::size_t count = (1 + random() % 8) * (small / 4);
            auto* e = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, eager));
            overlapping += overlaps(e, count * 4, graph_memory);
            slow_fill<<<grid, block, 0, eager.handle>>>(e, count, 9, 0);  // would break the graph's checks if shared
            pool.deallocate_async(e, count * 4, 256, eager);
        }
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(overlapping == 0);
        CHECK(bad.read() == 0);
        REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
        REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
        CHECK(pool.graph_pools() == 1);
        pool.release_graph_pool(graph_pool);
        CHECK(pool.graph_pools() == 0);
        pool.check_invariants();
        REQUIRE(cudaGetLastError() == cudaSuccess);
    }
}
