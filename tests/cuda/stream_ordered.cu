// Stream-ordered reuse on a real GPU: kernels on several streams write and check patterns in
// blocks the caching allocator reuses, so a block handed out before its earlier users finished
// shows up as a mismatch count above zero.
#include "support.hpp"
#include "late_kernels.cuh"

#include <poolkit/adaptor/cuda_events.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/best_fit.hpp>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace poolkit;
using namespace poolkit::test;

// Stream a writes late and checks, then frees; a's next call (freeing a scratch block) records
// the event b asked for when it could not take a's block; b then takes the same size, writes at once
// and checks late. b keeps its blocks, so it must borrow. Unordered, b's block is a's: a's late
// writes land before b's check, which counts them. Returns how many of b's blocks were a's.
template <class Pool>
int ping_pong(Pool& pool, cudaStream_t a, cudaStream_t b, counter& bad, int rounds) {
    constexpr std::size_t count = std::size_t{4} << 20;
    constexpr std::size_t bytes = count * sizeof(std::uint32_t);
    int reused = 0;
    std::vector<std::uint32_t*> on_b;
    const auto take_on_b = [&](std::uint32_t value) {
        auto* taken = static_cast<std::uint32_t*>(pool.allocate_async(bytes, 256, stream_ref{b}));
        slow_fill<<<grid, block, 0, b>>>(taken, count, value, 0);
        count_other<<<grid, block, 0, b>>>(taken, count, value, 2 * slow, bad.device);
        on_b.push_back(taken);
        return taken;
    };
    for (int round = 0; round < rounds; ++round) {
        const auto value = static_cast<std::uint32_t>(3 * round + 1);
        void* scratch = pool.allocate_async(256, 256, stream_ref{a});
        auto* first = static_cast<std::uint32_t*>(pool.allocate_async(bytes, 256, stream_ref{a}));
        slow_fill<<<grid, block, 0, a>>>(first, count, value, slow);
        count_other<<<grid, block, 0, a>>>(first, count, value, 0, bad.device);
        pool.deallocate_async(first, bytes, 256, stream_ref{a});
        reused += take_on_b(value + 1) == first;  // asks a's lane for an event
        pool.deallocate_async(scratch, 256, 256, stream_ref{a});  // a's next call records it
        reused += take_on_b(value + 2) == first;
    }
    for (auto* p : on_b) pool.deallocate_async(p, bytes, 256, stream_ref{b});
    REQUIRE(cudaGetLastError() == cudaSuccess);
    return reused;
}

}  // namespace

TEST_CASE("a block freed on one stream is reused on another only after the first stream's work") {
    streams s(2);
    counter bad;
    // Chunks of just the request: b's lane holds nothing spare, so it borrows.
    caching_device_resource pool{cuda_device_resource{}, caching_options{.large_growth = growth_policy::as_needed(2 << 20)}};
    const int reused = ping_pong(pool, s.handles[0], s.handles[1], bad, 20);
    CHECK(bad.read() == 0);
    CHECK(reused > 0);  // the test did exercise cross-stream reuse
    MESSAGE("cross-stream reuses: " << reused << " of 20");
    pool.release();
}

TEST_CASE("a lasting stream's large frees, covered during another stream's call, reach it only after their work") {
    // Declared lasting, so never destroyed (a destroyed one would lend its id to a new stream).
    static cudaStream_t a = [] {
        cudaStream_t made{};
        REQUIRE(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking) == cudaSuccess);
        REQUIRE(cuda_events::declare_lasting(stream_ref{made}));
        return made;
    }();
    REQUIRE(cuda_events::lasting(stream_ref{a}));
    scoped_stream b;
    CHECK_FALSE(cuda_events::lasting(b));
    counter bad;
    // a's large free is left for the next allocation, b's, which finds a busy: b waits on an event.
    caching_device_resource caching{cuda_device_resource{}, caching_options{.large_growth = growth_policy::as_needed(2 << 20)}};
    const int reused = ping_pong(caching, a, b.handle, bad, 20);
    expandable_device_resource expandable;
    const int reused_expandable = ping_pong(expandable, a, b.handle, bad, 20);
    CHECK(bad.read() == 0);
    CHECK(reused > 0);
    CHECK(reused_expandable > 0);
    MESSAGE("cross-stream reuses: " << reused << " and " << reused_expandable << " of 20");
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    caching.release();
    expandable.release();
}

TEST_CASE("control: the same traffic through an unordered pool is caught by the pattern check") {
    streams s(2);
    counter bad;
    best_fit<cuda_device_resource> unordered;
    struct adapter {  // stream calls straight to a pool that ignores streams
        best_fit<cuda_device_resource>& pool;
        void* allocate_async(std::size_t n, std::size_t a, stream_ref) { return pool.allocate(n, a); }
        void deallocate_async(void* p, std::size_t n, std::size_t a, stream_ref) { pool.deallocate(p, n, a); }
    } racy{unordered};
    ping_pong(racy, s.handles[0], s.handles[1], bad, 20);
    const auto mismatches = bad.read();
    // b's check starts a millisecond after a's writes land: the race is not a matter of luck.
    CHECK(mismatches > 0);
    MESSAGE("mismatches seen without stream ordering: " << mismatches);
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("record_use keeps a block from reuse until the other stream's reads are done") {
    streams s(2);
    cudaStream_t a = s.handles[0], b = s.handles[1];
    counter bad;
    caching_device_resource pool;
    constexpr std::size_t count = std::size_t{1} << 20;
    constexpr std::size_t bytes = count * sizeof(std::uint32_t);
    cudaEvent_t written{};
    REQUIRE(cudaEventCreateWithFlags(&written, cudaEventDisableTiming) == cudaSuccess);
    int reused = 0;
    for (int round = 0; round < 10; ++round) {
        auto* shared = static_cast<std::uint32_t*>(pool.allocate_async(bytes, 256, stream_ref{a}));
        slow_fill<<<grid, block, 0, a>>>(shared, count, 7, 0);
        REQUIRE(cudaEventRecord(written, a) == cudaSuccess);
        REQUIRE(cudaStreamWaitEvent(b, written, 0) == cudaSuccess);
        count_other<<<grid, block, 0, b>>>(shared, count, 7, slow, bad.device);  // b reads late
        pool.record_use(shared, stream_ref{b});
        pool.deallocate_async(shared, bytes, 256, stream_ref{a});
        auto* next = static_cast<std::uint32_t*>(pool.allocate_async(bytes, 256, stream_ref{a}));
        reused += next == shared;
        slow_fill<<<grid, block, 0, a>>>(next, count, 9, 0);  // would clobber b's reads if it were shared
        pool.deallocate_async(next, bytes, 256, stream_ref{a});
    }
    CHECK(bad.read() == 0);
    MESSAGE("immediate reuses despite record_use (must be 0 while b reads): " << reused);
    cudaEventDestroy(written);
}

TEST_CASE("eight streams of random traffic with occasional frees on another stream") {
    streams s(8);
    counter bad;
    caching_device_resource pool;
    std::mt19937_64 random(5);
    struct live {
        std::uint32_t* data;
        std::size_t count;
        std::uint32_t value;
        cudaStream_t stream;
    };
    std::vector<live> blocks;
    for (int step = 0; step < 2000; ++step) {
        cudaStream_t stream = s.handles[random() % s.handles.size()];
        if (blocks.empty() || random() % 2 == 0) {
            const std::size_t count = 64 + random() % (random() % 4 == 0 ? (std::size_t{8} << 20) : 65536);
            auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{stream}));
            const auto value = static_cast<std::uint32_t>(step);
            slow_fill<<<grid, block, 0, stream>>>(data, count, value, random() % 4 == 0 ? slow / 10 : 0);
            blocks.push_back({data, count, value, stream});
        } else {
            const std::size_t index = random() % blocks.size();
            const live b = blocks[index];
            blocks[index] = blocks.back();
            blocks.pop_back();
            count_other<<<grid, block, 0, b.stream>>>(b.data, b.count, b.value, 0, bad.device);
            // A free on another stream must first order itself after the block's own stream.
            cudaStream_t freeing = b.stream;
            if (random() % 5 == 0) {
                freeing = stream;
                cudaEvent_t done{};
                REQUIRE(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess);
                REQUIRE(cudaEventRecord(done, b.stream) == cudaSuccess);
                REQUIRE(cudaStreamWaitEvent(freeing, done, 0) == cudaSuccess);
                cudaEventDestroy(done);
            }
            pool.deallocate_async(b.data, b.count * 4, 256, stream_ref{freeing});
        }
    }
    for (const auto& b : blocks) {
        count_other<<<grid, block, 0, b.stream>>>(b.data, b.count, b.value, 0, bad.device);
        pool.deallocate_async(b.data, b.count * 4, 256, stream_ref{b.stream});
    }
    CHECK(bad.read() == 0);
    pool.check_invariants();
    pool.release();
}

// A pipeline: stage k's buffer is written late on stream k, handed to stream k + 1 behind an event,
// checked late there and freed there; later buffers reuse the freed ones (from the freeing
// stream's front, or behind its event) and are written at once. A block reused before the free's
// stream got past its late check would show that check the new writes.
TEST_CASE("a pipeline reuses blocks freed on other streams only after the freeing stream's work") {
    constexpr int stages = 4;
    streams s(stages);
    counter bad;
    caching_device_resource pool;
    // 768 KiB: under a large free (1 MiB at least), so frees wait in their stream's front and are
    // reused from there; large ones would be covered at once and the pool would serve the rest of
    // its first chunk before reusing any.
    constexpr std::size_t count = std::size_t{3} << 16;
    constexpr std::size_t bytes = count * sizeof(std::uint32_t);
    static_assert(bytes < decltype(pool)::min_large_free);
    std::uint32_t* held = nullptr;
    std::uint32_t held_value = 0;
    int reused = 0;
    std::vector<void*> freed;
    for (int step = 0; step < 64; ++step) {
        cudaStream_t here = s.handles[static_cast<std::size_t>(step % stages)];
        auto* data = static_cast<std::uint32_t*>(pool.allocate_async(bytes, 256, stream_ref{here}));
        if (std::find(freed.begin(), freed.end(), data) != freed.end()) ++reused;
        const auto value = static_cast<std::uint32_t>(step + 1);
        slow_fill<<<grid, block, 0, here>>>(data, count, value, step % 2 ? slow / 4 : 0);
        if (held != nullptr) {  // the last stage's buffer, handed on behind its stream's work
            cudaStream_t from = s.handles[static_cast<std::size_t>((step + stages - 1) % stages)];
            cudaEvent_t written{};
            REQUIRE(cudaEventCreateWithFlags(&written, cudaEventDisableTiming) == cudaSuccess);
            REQUIRE(cudaEventRecord(written, from) == cudaSuccess);
            REQUIRE(cudaStreamWaitEvent(here, written, 0) == cudaSuccess);
            cudaEventDestroy(written);
            count_other<<<grid, block, 0, here>>>(held, count, held_value, slow / 2, bad.device);
            pool.deallocate_async(held, bytes, 256, stream_ref{here});
            freed.push_back(held);
        }
        held = data;
        held_value = value;
    }
    cudaStream_t last = s.handles[static_cast<std::size_t>(63 % stages)];
    count_other<<<grid, block, 0, last>>>(held, count, held_value, 0, bad.device);
    pool.deallocate_async(held, bytes, 256, stream_ref{last});
    CHECK(bad.read() == 0);
    CHECK(reused > 32);
    MESSAGE("allocations served by a block freed before: " << reused << "; reserved " << (pool.reserved_bytes() >> 20) << " MiB");
    pool.check_invariants();
    pool.release();
    CHECK(pool.pending_bytes() == 0);
}

TEST_CASE("cudaStreamPerThread: threads share the handle but not their stream records") {
    counter bad;
    synchronized_caching_device_resource pool;
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&pool, &bad, t] {
            constexpr std::size_t count = std::size_t{2} << 20;
            for (int round = 0; round < 20; ++round) {
                auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{cudaStreamPerThread}));
                const auto value = static_cast<std::uint32_t>(t * 1000 + round);
                slow_fill<<<grid, block, 0, cudaStreamPerThread>>>(data, count, value, round % 2 ? slow / 4 : 0);
                count_other<<<grid, block, 0, cudaStreamPerThread>>>(data, count, value, 0, bad.device);
                pool.deallocate_async(data, count * 4, 256, stream_ref{cudaStreamPerThread});
            }
            cudaStreamSynchronize(cudaStreamPerThread);
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(bad.read() == 0);
    CHECK(pool.locked([](auto& p) { return p.streams(); }) == 4);
}

// cuda_events takes the driver's entry points for created streams and the runtime's for the
// special handles: both must see the same work pending, and a wait must hold the waiter back.
TEST_CASE("cuda_events answers alike through the driver and the runtime: created streams and the special handles") {
    scoped_stream created, waiter;
    cuda_events events;
    std::uint32_t* data = nullptr;
    REQUIRE(cudaMalloc(&data, 32 * sizeof *data) == cudaSuccess);
    for (const cudaStream_t stream : {created.handle, cudaStream_t{}, cudaStreamLegacy, cudaStreamPerThread}) {
        CAPTURE(reinterpret_cast<std::uintptr_t>(stream));
        slow_fill<<<1, 32, 0, stream>>>(data, 32, 1, 20 * slow);  // about 20 ms: the host asks while it runs
        const cuda_events::event_type event = events.record(stream_ref{stream});
        events.wait(stream_ref{waiter.handle}, event);
        CHECK_FALSE(cuda_events::idle(stream_ref{stream}));
        CHECK_FALSE(events.done(event));
        CHECK_FALSE(cuda_events::idle(waiter));
        REQUIRE(cudaStreamSynchronize(waiter.handle) == cudaSuccess);
        CHECK(events.done(event));
        CHECK(cuda_events::idle(stream_ref{stream}));
        CHECK(cuda_events::idle(waiter));
        events.recycle(event);
    }
    REQUIRE(cudaFree(data) == cudaSuccess);
}

// Servers make a stream per request and destroy it as soon as the work is issued. Blocks freed on
// a destroyed stream go to other threads' streams behind the event of their last free, and a new
// stream that gets a destroyed one's handle gets a record of its own: no stream is touched after
// its destruction, and no block is reused before the work of the destroyed stream is done.
TEST_CASE("threads that create, use and destroy streams in a loop never see another's writes") {
    counter bad;
    synchronized_caching_device_resource pool;
    constexpr int threads_count = 8;
    constexpr int rounds = 40;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_count; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937_64 random(static_cast<std::uint64_t>(t) + 1);
            for (int round = 0; round < rounds; ++round) {
                cudaStream_t stream{};
                if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
                    ++failures;
                    return;
                }
                for (int piece = 0; piece < 3; ++piece) {
                    const std::size_t count = 64 + random() % (std::size_t{512} << 10);  // 256 B .. 2 MiB
                    auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{stream}));
                    const auto value = static_cast<std::uint32_t>((t << 20) | (round << 4) | piece);
                    // Late writes catch a taker that did not wait; late checks catch a writer that ran late.
                    const long long write_delay = random() % 2 ? slow / 2 : 0;
                    const long long check_delay = random() % 2 ? slow / 2 : 0;
                    slow_fill<<<grid, block, 0, stream>>>(data, count, value, write_delay);
                    count_other<<<grid, block, 0, stream>>>(data, count, value, check_delay, bad.device);
                    pool.deallocate_async(data, count * 4, 256, stream_ref{stream});
                }
                if (cudaGetLastError() != cudaSuccess) ++failures;
                cudaStreamDestroy(stream);  // its work is still running
            }
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(failures.load() == 0);
    CHECK(bad.read() == 0);
    const auto reserved = pool.locked([](auto& p) { return p.reserved_bytes(); });
    // Destroyed without forget_stream, their frees still come back to the one pool (after their
    // events, or a settle). The late kernels keep many frees pending at once, and blocks of random
    // sizes are reused by exact size only while pending: an H200 reserved 582 MiB of the ~960 MiB
    // allocated over the test (at most 48 MiB live at once). Frees stranded for good would keep it all.
    CHECK(reserved <= (std::size_t{768} << 20));
    MESSAGE("streams with a record: " << pool.locked([](auto& p) { return p.streams(); }) << "; reserved " << (reserved >> 20) << " MiB");
    pool.locked([](auto& p) { p.check_invariants(); });
    pool.release();
}

TEST_CASE("caching_pinned_resource reuses a buffer only after the copies that used it") {
    streams s(1);
    cudaStream_t copy = s.handles[0];
    caching_pinned_resource pinned;
    cuda_device_resource device;
    constexpr int rounds = 6;
    constexpr std::size_t bytes = std::size_t{8} << 20;
    std::vector<void*> targets;
    for (int round = 0; round < rounds; ++round) targets.push_back(device.allocate(bytes));
    void* scratch = device.allocate(4096);
    // Hold the copy stream back, so every copy below is still pending when its buffer is freed.
    slow_fill<<<1, 1, 0, copy>>>(static_cast<std::uint32_t*>(scratch), 1, 0, slow * 20);
    int reused = 0;
    void* previous = nullptr;
    for (int round = 0; round < rounds; ++round) {
        auto* staging = static_cast<unsigned char*>(pinned.allocate(bytes));
        reused += staging == previous;
        std::memset(staging, round + 1, bytes);  // would clobber a pending copy if reused too early
        REQUIRE(cudaMemcpyAsync(targets[round], staging, bytes, cudaMemcpyHostToDevice, copy) == cudaSuccess);
        pinned.record_use(staging, stream_ref{copy});
        pinned.deallocate(staging, bytes);
        previous = staging;
    }
    REQUIRE(cudaStreamSynchronize(copy) == cudaSuccess);
    std::vector<unsigned char> check(bytes);
    for (int round = 0; round < rounds; ++round) {
        REQUIRE(cudaMemcpy(check.data(), targets[round], bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
        CHECK(check[0] == round + 1);
        CHECK(check[bytes - 1] == round + 1);
        device.deallocate(targets[round], bytes);
    }
    CHECK(reused == 0);
    // Once the copies are done, the cached buffers serve new requests without cudaHostAlloc.
    void* again = pinned.allocate(bytes);
    pinned.deallocate(again, bytes);
    device.deallocate(scratch, 4096);
    pinned.release();
}
