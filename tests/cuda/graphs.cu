// CUDA graphs on a real GPU: every stream-ordered preset serves a captured stream from a graph
// pool, in every capture mode; the graph is launched many times between eager allocations on another
// stream, which never receive the graph's memory, and the graph's own checks see only its writes.
#include "support.hpp"
#include "late_kernels.cuh"
#include "../support/spans.hpp"

#include <poolkit/interop/thrust_allocator.hpp>
#include <poolkit/presets.hpp>

#include <cub/device/device_reduce.cuh>
#include <thrust/copy.h>
#include <thrust/device_vector.h>
#include <thrust/fill.h>
#include <thrust/functional.h>
#include <thrust/sort.h>
#include <thrust/tabulate.h>

#include <concepts>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace poolkit;
using namespace poolkit::test;

namespace {

std::uint64_t capture_id(cudaStream_t stream) {
    cudaStreamCaptureStatus status{};
    unsigned long long id = 0;
    REQUIRE(cudaStreamGetCaptureInfo(stream, &status, &id) == cudaSuccess);
    return id;
}
// The graph-pool calls of a preset: stream_ordered's own, under the lock of a synchronized<>, or
// its upstream's (per_thread over synchronized<>).
template <class Pool>
std::size_t graph_pools(Pool& pool) {
    if constexpr (requires { pool.graph_pools(); }) {
        return pool.graph_pools();
    } else if constexpr (requires { pool.locked([](auto&) {}); }) {
        return pool.locked([](auto& p) { return p.graph_pools(); });
    } else {
        return graph_pools(pool.upstream_resource());
    }
}
template <class Pool>
void release_graph_pool(Pool& pool, std::uint64_t id) {
    if constexpr (requires { pool.release_graph_pool(id); }) {
        pool.release_graph_pool(id);
    } else if constexpr (requires { pool.locked([](auto&) {}); }) {
        pool.locked([&](auto& p) { p.release_graph_pool(id); });
    } else {
        release_graph_pool(pool.upstream_resource(), id);
    }
}

// Ends the capture on `stream` into `graph` and instantiates it.
cudaGraphExec_t end_and_instantiate(cudaStream_t stream, cudaGraph_t& graph) {
    REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
    cudaGraphExec_t exec{};
    REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
    return exec;
}

// 1,000 launches on `stream` of `execs` in turn, each followed by an eager block of
// `count(launch)` uint32s on `eager`, written at once (it would break the graph's checks if
// shared). Returns how many eager blocks overlapped `graph_memory`.
template <class Pool, class Count>
int launch_beside_eager(Pool& pool, const std::vector<cudaGraphExec_t>& execs, cudaStream_t stream, const scoped_stream& eager,
                        const std::vector<span>& graph_memory, Count&& count) {
    int overlapping = 0;
    for (int launch = 0; launch < 1000; ++launch) {
        REQUIRE(cudaGraphLaunch(execs[static_cast<std::size_t>(launch) % execs.size()], stream) == cudaSuccess);
        const std::size_t n = count(launch);
        auto* e = static_cast<std::uint32_t*>(pool.allocate_async(n * 4, 256, eager));
        overlapping += overlaps(e, n * 4, graph_memory);
        slow_fill<<<grid, block, 0, eager.handle>>>(e, n, 9, 0);
        pool.deallocate_async(e, n * 4, 256, eager);
    }
    return overlapping;
}

}  // namespace

TEST_CASE_TEMPLATE("a preset under stream capture, in every mode: graph memory never serves eager work", Pool, caching_device_resource,
                   synchronized_caching_device_resource, expandable_device_resource, synchronized_expandable_device_resource,
                   per_thread_caching_device_resource) {
    for (const cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeThreadLocal, cudaStreamCaptureModeRelaxed}) {
        CAPTURE(static_cast<int>(mode));
        Pool pool;
        scoped_stream capturing, eager;
        counter bad;
        // uint32 counts: 4 MiB blocks (per_thread's largest cached class) and 16 MiB ones (past it)
        constexpr std::size_t small = std::size_t{1} << 20, large = std::size_t{4} << 20;
        for (int i = 0; i < 4; ++i) {  // a warm shared pool
            void* p = pool.allocate_async(small * 4, 256, eager);
            pool.deallocate_async(p, small * 4, 256, eager);
        }
        REQUIRE(cudaStreamSynchronize(eager.handle) == cudaSuccess);

        REQUIRE(cudaStreamBeginCapture(capturing.handle, mode) == cudaSuccess);
        const std::uint64_t graph_pool = capture_id(capturing.handle);  // each capture's own pool by default
        auto* a = static_cast<std::uint32_t*>(pool.allocate_async(small * 4, 256, capturing));
        slow_fill<<<grid, block, 0, capturing.handle>>>(a, small, 7, 0);
        count_other<<<grid, block, 0, capturing.handle>>>(a, small, 7, 0, bad.device);
        // Eager work on another stream of this thread meanwhile: none of its calls may break the
        // capture, and it gets none of the graph's memory.
        auto* during = static_cast<std::uint32_t*>(pool.allocate_async(small * 4, 256, eager));
        CHECK_FALSE(overlaps(during, small * 4, {span_of(a, small * 4)}));
        slow_fill<<<grid, block, 0, eager.handle>>>(during, small, 6, 0);
        pool.deallocate_async(during, small * 4, 256, eager);
        pool.deallocate_async(a, small * 4, 256, capturing);
        auto* b = static_cast<std::uint32_t*>(pool.allocate_async(large * 4, 256, capturing));  // grows the graph pool
        slow_fill<<<grid, block, 0, capturing.handle>>>(b, large, 8, slow / 4);
        count_other<<<grid, block, 0, capturing.handle>>>(b, large, 8, 0, bad.device);
        pool.deallocate_async(b, large * 4, 256, capturing);
        cudaGraph_t graph{};
        const cudaGraphExec_t exec = end_and_instantiate(capturing.handle, graph);
        const std::vector<span> graph_memory{span_of(a, small * 4), span_of(b, large * 4)};

        std::mt19937_64 random(11);
        const int overlapping =
            launch_beside_eager(pool, {exec}, capturing.handle, eager, graph_memory, [&](int) { return (1 + random() % 8) * (small / 4); });
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(overlapping == 0);
        CHECK(bad.read() == 0);
        REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
        REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
        CHECK(graph_pools(pool) == 1);
        release_graph_pool(pool, graph_pool);
        CHECK(graph_pools(pool) == 0);
        pool.check_invariants();
        REQUIRE(cudaGetLastError() == cudaSuccess);
    }
}

TEST_CASE("a capture over two streams: a block freed on the forked stream serves the origin only behind the graph's edge") {
    for (const cudaStreamCaptureMode mode : {cudaStreamCaptureModeGlobal, cudaStreamCaptureModeRelaxed}) {
        CAPTURE(static_cast<int>(mode));
        caching_device_resource pool;
        scoped_stream origin, forked, eager;
        counter bad;
        cudaEvent_t fork{}, join{};
        REQUIRE(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming) == cudaSuccess);
        REQUIRE(cudaEventCreateWithFlags(&join, cudaEventDisableTiming) == cudaSuccess);
        constexpr std::size_t count = std::size_t{1} << 20;

        REQUIRE(cudaStreamBeginCapture(origin.handle, mode) == cudaSuccess);
        const std::uint64_t graph_pool = pool.graph_pool_of(origin);
        auto* a = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, origin));
        slow_fill<<<grid, block, 0, origin.handle>>>(a, count, 7, 0);
        REQUIRE(cudaEventRecord(fork, origin.handle) == cudaSuccess);
        REQUIRE(cudaStreamWaitEvent(forked.handle, fork, 0) == cudaSuccess);  // joins the capture
        count_other<<<grid, block, 0, forked.handle>>>(a, count, 7, slow, bad.device);  // reads late
        pool.deallocate_async(a, count * 4, 256, forked);
        auto* b = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, origin));  // may be a's block
        slow_fill<<<grid, block, 0, origin.handle>>>(b, count, 8, 0);  // must follow the late read
        count_other<<<grid, block, 0, origin.handle>>>(b, count, 8, 0, bad.device);
        REQUIRE(cudaEventRecord(join, forked.handle) == cudaSuccess);
        REQUIRE(cudaStreamWaitEvent(origin.handle, join, 0) == cudaSuccess);
        pool.deallocate_async(b, count * 4, 256, origin);
        cudaGraph_t graph{};
        const cudaGraphExec_t exec = end_and_instantiate(origin.handle, graph);
        const std::vector<span> graph_memory{span_of(a, count * 4), span_of(b, count * 4)};

        const int overlapping = launch_beside_eager(pool, {exec}, origin.handle, eager, graph_memory, [&](int) { return count; });
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(overlapping == 0);
        CHECK(bad.read() == 0);
        MESSAGE(std::string(a == b ? "the forked stream's block served" : "another block served") << " the origin's next request");
        REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
        REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
        REQUIRE(cudaEventDestroy(fork) == cudaSuccess);
        REQUIRE(cudaEventDestroy(join) == cudaSuccess);
        pool.release_graph_pool(graph_pool);
        pool.check_invariants();
        REQUIRE(cudaGetLastError() == cudaSuccess);
    }
}

TEST_CASE("two graphs share one pool: launched in turn between eager work, each sees only its own bytes") {
    caching_device_resource pool;
    scoped_stream capturing, eager;
    counter bad;
    constexpr std::size_t count = std::size_t{1} << 20;
    constexpr std::uint64_t shared = 4242;
    std::vector<span> graph_memory;
    cudaGraph_t graphs[2]{};
    std::vector<cudaGraphExec_t> execs(2);
    for (int g = 0; g < 2; ++g) {
        REQUIRE(cudaStreamBeginCapture(capturing.handle, cudaStreamCaptureModeGlobal) == cudaSuccess);
        pool.capture_into(capturing, shared);
        CHECK(pool.graph_pool_of(capturing) == shared);
        const auto value = static_cast<std::uint32_t>(10 + g);
        auto* a = static_cast<std::uint32_t*>(pool.allocate_async(count * 4 * (g + 1), 256, capturing));
        slow_fill<<<grid, block, 0, capturing.handle>>>(a, count * (g + 1), value, 0);
        count_other<<<grid, block, 0, capturing.handle>>>(a, count * (g + 1), value, 0, bad.device);
        pool.deallocate_async(a, count * 4 * (g + 1), 256, capturing);
        graph_memory.push_back(span_of(a, count * 4 * (g + 1)));
        execs[g] = end_and_instantiate(capturing.handle, graphs[g]);
    }
    CHECK(graph_pools(pool) == 1);  // one pool: the second graph grew it or reused the first's block
    std::mt19937_64 random(5);
    // In turn, in capture order, as graphs that share a pool must run.
    const int overlapping =
        launch_beside_eager(pool, execs, capturing.handle, eager, graph_memory, [&](int) { return (1 + random() % 4) * (count / 4); });
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(overlapping == 0);
    CHECK(bad.read() == 0);
    for (int g = 0; g < 2; ++g) {
        REQUIRE(cudaGraphExecDestroy(execs[g]) == cudaSuccess);
        REQUIRE(cudaGraphDestroy(graphs[g]) == cudaSuccess);
    }
    pool.release_graph_pool(shared);
    CHECK(graph_pools(pool) == 0);
    pool.check_invariants();
    REQUIRE(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("a block of the shared pool a graph used serves eager work again once the graph's pool is released") {
    caching_device_resource pool;
    scoped_stream capturing, eager;
    counter bad;
    constexpr std::size_t count = std::size_t{1} << 20;
    auto* input = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, eager));
    slow_fill<<<grid, block, 0, eager.handle>>>(input, count, 5, 0);
    REQUIRE(cudaStreamSynchronize(eager.handle) == cudaSuccess);
    REQUIRE(cudaStreamBeginCapture(capturing.handle, cudaStreamCaptureModeGlobal) == cudaSuccess);
    const std::uint64_t id = pool.graph_pool_of(capturing);
    count_other<<<grid, block, 0, capturing.handle>>>(input, count, 5, slow, bad.device);  // the graph reads it
    pool.deallocate_async(input, count * 4, 256, capturing);  // freed in the capture: the graph keeps it
    cudaGraph_t graph{};
    const cudaGraphExec_t exec = end_and_instantiate(capturing.handle, graph);
    for (int launch = 0; launch < 20; ++launch) {
        REQUIRE(cudaGraphLaunch(exec, capturing.handle) == cudaSuccess);
        auto* e = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, eager));
        CHECK(e != input);
        pool.deallocate_async(e, count * 4, 256, eager);
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    CHECK(bad.read() == 0);
    REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    pool.release_graph_pool(id);
    std::vector<void*> taken;
    bool reused = false;
    for (int i = 0; i < 4 && !reused; ++i) {
        taken.push_back(pool.allocate_async(count * 4, 256, eager));
        reused = taken.back() == input;
    }
    CHECK(reused);  // back in the shared pool
    for (void* p : taken) pool.deallocate_async(p, count * 4, 256, eager);
    pool.check_invariants();
    REQUIRE(cudaGetLastError() == cudaSuccess);
}

// PyTorch's pattern: a capture's first calls free blocks made before it on other streams
// (zero_grad), before the pool has seen the capture. Those frees, large ones covered at once, their
// streams busy or idle, and eager requests served from the pool, make no call the global-mode
// capture forbids (a query of an eager stream or event, in global mode, would invalidate it).
TEST_CASE_TEMPLATE("eager frees at a global-mode capture's start, before the pool saw it, break nothing", Pool, caching_device_resource,
                   synchronized_caching_device_resource, expandable_device_resource, per_thread_caching_device_resource) {
    scoped_stream capturing, side, eager;
    for (const bool busy : {false, true}) {
        CAPTURE(busy);
        Pool pool;
        counter bad;
        std::vector<std::pair<std::uint32_t*, std::size_t>> before;  // uint32 counts
        for (std::size_t i = 0; i < 24; ++i) {
            const std::size_t count = (i % 3 == 0 ? std::size_t{1} << 20 : std::size_t{24} << 10) + i * 256;
            const scoped_stream& on = i % 2 == 0 ? side : eager;
            auto* p = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, on));
            slow_fill<<<grid, block, 0, on.handle>>>(p, count, 5, busy ? slow : 0);
            before.emplace_back(p, count);
        }
        if (!busy) REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(cudaStreamBeginCapture(capturing.handle, cudaStreamCaptureModeGlobal) == cudaSuccess);
        for (std::size_t i = 0; i < before.size(); ++i) {
            pool.deallocate_async(before[i].first, before[i].second * 4, 256, i % 2 == 0 ? side : eager);
            if (i % 4 == 3) pool.deallocate_async(pool.allocate_async(64 << 10, 256, eager), 64 << 10, 256, eager);
        }
        constexpr std::size_t count = std::size_t{1} << 18;
        auto* a = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, capturing));
        slow_fill<<<grid, block, 0, capturing.handle>>>(a, count, 7, 0);
        count_other<<<grid, block, 0, capturing.handle>>>(a, count, 7, 0, bad.device);
        pool.deallocate_async(a, count * 4, 256, capturing);
        cudaGraph_t graph{};
        const cudaGraphExec_t exec = end_and_instantiate(capturing.handle, graph);
        for (int launch = 0; launch < 4; ++launch) REQUIRE(cudaGraphLaunch(exec, capturing.handle) == cudaSuccess);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(bad.read() == 0);
        REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
        REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
        pool.check_invariants();
        REQUIRE(cudaGetLastError() == cudaSuccess);
    }
}

TEST_CASE("a capture the user's own error invalidates leaves the pool consistent and serving") {
    caching_device_resource pool;
    scoped_stream capturing, eager;
    constexpr std::size_t bytes = std::size_t{4} << 20;
    REQUIRE(cudaStreamBeginCapture(capturing.handle, cudaStreamCaptureModeGlobal) == cudaSuccess);
    void* a = pool.allocate_async(bytes, 256, capturing);
    void* mistake = nullptr;
    CHECK(cudaMalloc(&mistake, bytes) != cudaSuccess);  // forbidden in a global-mode capture: it is invalidated
    pool.deallocate_async(a, bytes, 256, capturing);
    void* b = pool.allocate_async(bytes, 256, capturing);  // still served, from the capture's own pool
    pool.deallocate_async(b, bytes, 256, capturing);
    cudaGraph_t graph{};
    CHECK(cudaStreamEndCapture(capturing.handle, &graph) == cudaErrorStreamCaptureInvalidated);
    CHECK(graph == nullptr);
    static_cast<void>(cudaGetLastError());  // the user's error, seen
    pool.check_invariants();
    for (int i = 0; i < 8; ++i) {  // eager work goes on, on both streams
        for (const scoped_stream* s : {&eager, &capturing}) {
            void* p = pool.allocate_async(bytes, 256, *s);
            REQUIRE(cudaMemsetAsync(p, i, bytes, s->handle) == cudaSuccess);
            pool.deallocate_async(p, bytes, 256, *s);
        }
    }
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    pool.release();
    pool.check_invariants();
    REQUIRE(cudaGetLastError() == cudaSuccess);
}

namespace {
struct scramble {  // a permutation of 0 .. 65,535
    __host__ __device__ unsigned operator()(unsigned i) const { return (i * 40503u) & 0xffffu; }
};
}  // namespace

TEST_CASE("Thrust and CUB in a captured region take their temporaries from the capture's graph pool") {
    caching_device_resource pool;
    scoped_stream capturing, eager;
    constexpr std::size_t n = std::size_t{1} << 16;
    thrust::device_vector<unsigned> source(n), keys(n), other(n);  // cudaMalloc'ed, outside the pool
    thrust::tabulate(source.begin(), source.end(), scramble{});
    thrust::device_vector<unsigned> sum(1);
    unsigned* const k = thrust::raw_pointer_cast(keys.data());
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);

    REQUIRE(cudaStreamBeginCapture(capturing.handle, cudaStreamCaptureModeGlobal) == cudaSuccess);
    const std::uint64_t graph_pool = capture_id(capturing.handle);
    REQUIRE(cudaMemcpyAsync(k, thrust::raw_pointer_cast(source.data()), n * 4, cudaMemcpyDeviceToDevice, capturing.handle) == cudaSuccess);
    thrust::sort(thrust_policy_nosync(pool, capturing), keys.begin(), keys.end());
    std::size_t temporary = 0;
    REQUIRE(cub::DeviceReduce::Sum(nullptr, temporary, k, thrust::raw_pointer_cast(sum.data()), static_cast<int>(n), capturing.handle) ==
            cudaSuccess);
    void* scratch = pool.allocate_async(temporary, 256, capturing);
    REQUIRE(cub::DeviceReduce::Sum(scratch, temporary, k, thrust::raw_pointer_cast(sum.data()), static_cast<int>(n), capturing.handle) ==
            cudaSuccess);
    pool.deallocate_async(scratch, temporary, 256, capturing);
    cudaGraph_t graph{};
    const cudaGraphExec_t exec = end_and_instantiate(capturing.handle, graph);
    CHECK(pool.graph_pools() == 1);

    for (int launch = 0; launch < 20; ++launch) {
        thrust::fill(keys.begin(), keys.end(), 0u);
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        REQUIRE(cudaGraphLaunch(exec, capturing.handle) == cudaSuccess);
        // An eager sort through the same pool meanwhile, on another stream.
        thrust::copy(source.begin(), source.end(), other.begin());
        thrust::sort(thrust_policy_nosync(pool, eager), other.begin(), other.end(), thrust::greater<unsigned>());
        REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
        CHECK(thrust::is_sorted(keys.begin(), keys.end()));
        CHECK(keys[0] == 0u);
        CHECK(keys[n - 1] == n - 1);
        CHECK(sum[0] == static_cast<unsigned>(n * (n - 1) / 2));
        CHECK(other[0] == n - 1);
    }
    REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    pool.release_graph_pool(graph_pool);
    CHECK(pool.graph_pools() == 0);
    pool.check_invariants();
    REQUIRE(cudaGetLastError() == cudaSuccess);
}

// cuda_events tells graph pools when a graph is gone (graph_pools::watch needs this shape).
static_assert(requires(cuda_events& e, stream_ref s, std::function<void()> f) {
    { e.on_graph_gone(s, f) } -> std::convertible_to<bool>;
});

TEST_CASE("a graph pool releases itself once the graph and its executable are destroyed and their launches are done") {
    caching_device_resource pool;
    scoped_stream capturing, eager;
    constexpr std::size_t count = std::size_t{1} << 20;
    REQUIRE(cudaStreamBeginCapture(capturing.handle, cudaStreamCaptureModeGlobal) == cudaSuccess);
    auto* a = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, capturing));
    slow_fill<<<grid, block, 0, capturing.handle>>>(a, count, 7, slow);
    pool.deallocate_async(a, count * 4, 256, capturing);
    cudaGraph_t graph{};
    const cudaGraphExec_t exec = end_and_instantiate(capturing.handle, graph);
    REQUIRE(cudaGraphLaunch(exec, capturing.handle) == cudaSuccess);
    REQUIRE(cudaGraphExecDestroy(exec) == cudaSuccess);  // its launch still runs: the release waits for it
    REQUIRE(cudaGraphDestroy(graph) == cudaSuccess);
    CHECK(pool.graph_pools() == 1);
    // CUDA tells from a thread of its own once the launch is done; each call looks.
    int calls = 0;
    for (; calls < 20000 && pool.graph_pools() != 0; ++calls) {
        pool.deallocate_async(pool.allocate_async(4096, 256, eager), 4096, 256, eager);
        if (calls % 100 == 99) REQUIRE(cudaStreamSynchronize(capturing.handle) == cudaSuccess);
    }
    MESSAGE("released after " << calls << " eager calls");
    CHECK(pool.graph_pools() == 0);
    pool.check_invariants();
    REQUIRE(cudaGetLastError() == cudaSuccess);
}
