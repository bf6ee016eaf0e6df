// per_thread_caching_device_resource on a real GPU: threads on their own streams write and check
// every byte of their blocks with late writes and late checks while blocks move between threads
// and streams, and while threads destroy and remake their streams; a block handed out before its
// earlier users finished shows up as a mismatch count above zero.
#include "support.hpp"
#include "late_kernels.cuh"

#include <poolkit/presets.hpp>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {

using namespace poolkit;
using namespace poolkit::test;

struct handed {
    std::uint32_t* data;
    std::size_t count;
    std::uint32_t value;
    cudaEvent_t written;  // recorded on the sender's stream after its check
};

}  // namespace

TEST_CASE("per_thread: eight threads on their own streams keep every byte while blocks move between threads and streams") {
    counter bad;
    per_thread_caching_device_resource pool;
    constexpr int threads_count = 8;
    std::vector<std::deque<handed>> mailboxes(threads_count);
    std::vector<std::mutex> locks(threads_count);
    std::atomic<int> failures{0};
    std::atomic<int> finished{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_count; ++t) {
        threads.emplace_back([&, t] {
            cudaStream_t stream{};
            if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
                ++failures;
                return;
            }
            const stream_ref on{stream};
            std::mt19937_64 random(static_cast<std::uint64_t>(t) + 1);
            // A block from another thread: wait for its sender's work, check it on this stream
            // (late), free it here: it joins this thread's cache for this stream.
            const auto receive = [&](const handed& h) {
                cudaStreamWaitEvent(stream, h.written, 0);
                cudaEventDestroy(h.written);
                count_other<<<grid, block, 0, stream>>>(h.data, h.count, h.value, random() % 2 ? slow / 4 : 0, bad.device);
                pool.deallocate_async(h.data, h.count * 4, 256, on);
            };
            const auto drain = [&] {
                std::deque<handed> arrived;
                {
                    std::lock_guard lock(locks[static_cast<std::size_t>(t)]);
                    arrived.swap(mailboxes[static_cast<std::size_t>(t)]);
                }
                for (const handed& h : arrived) receive(h);
            };
            for (int round = 0; round < 300; ++round) {
                const std::size_t count = 64 + random() % (std::size_t{256} << 10);  // 256 B .. 1 MiB
                auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, on));
                const auto value = static_cast<std::uint32_t>((t << 24) | round);
                slow_fill<<<grid, block, 0, stream>>>(data, count, value, random() % 2 ? slow / 4 : 0);
                count_other<<<grid, block, 0, stream>>>(data, count, value, random() % 2 ? slow / 4 : 0, bad.device);
                if (random() % 3 == 0) {
                    handed h{data, count, value, nullptr};
                    cudaEventCreateWithFlags(&h.written, cudaEventDisableTiming);
                    cudaEventRecord(h.written, stream);
                    const auto to = static_cast<std::size_t>(random() % threads_count);
                    std::lock_guard lock(locks[to]);
                    mailboxes[to].push_back(h);
                } else {
                    pool.deallocate_async(data, count * 4, 256, on);
                }
                if (round % 16 == 0) drain();
            }
            ++finished;
            while (finished.load() < threads_count) std::this_thread::yield();
            drain();
            if (cudaGetLastError() != cudaSuccess) ++failures;
            cudaStreamSynchronize(stream);
            cudaStreamDestroy(stream);
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(failures.load() == 0);
    CHECK(bad.read() == 0);
    CHECK(pool.live_bytes() == 0);
    CHECK(pool.cached_bytes() == 0);  // the threads gave their caches back as they exited
    MESSAGE("hits " << pool.hits() << ", misses " << pool.misses());
    CHECK(pool.hits() > pool.misses());
    pool.release();
}

TEST_CASE("per_thread: threads that destroy and remake their streams never see another stream's writes") {
    counter bad;
    per_thread_caching_device_resource pool;
    constexpr int threads_count = 8;
    std::atomic<int> failures{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < threads_count; ++t) {
        threads.emplace_back([&, t] {
            std::mt19937_64 random(static_cast<std::uint64_t>(t) + 1);
            for (int round = 0; round < 30; ++round) {
                cudaStream_t stream{};
                if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
                    ++failures;
                    return;
                }
                for (int piece = 0; piece < 4; ++piece) {
                    const std::size_t count = 64 + random() % (std::size_t{128} << 10);
                    auto* data = static_cast<std::uint32_t*>(pool.allocate_async(count * 4, 256, stream_ref{stream}));
                    const auto value = static_cast<std::uint32_t>((t << 20) | (round << 4) | piece);
                    slow_fill<<<grid, block, 0, stream>>>(data, count, value, random() % 2 ? slow / 2 : 0);
                    count_other<<<grid, block, 0, stream>>>(data, count, value, random() % 2 ? slow / 2 : 0, bad.device);
                    pool.deallocate_async(data, count * 4, 256, stream_ref{stream});
                }
                if (cudaGetLastError() != cudaSuccess) ++failures;
                cudaStreamDestroy(stream);  // its work still running; a later stream may get its handle
            }
        });
    }
    for (auto& thread : threads) thread.join();
    CHECK(failures.load() == 0);
    CHECK(bad.read() == 0);
    CHECK(pool.live_bytes() == 0);
    pool.release();
}
