// caching_pool's placement rules and the caching_resource preset, over instrumented host memory.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/presets.hpp>

#include <doctest/doctest.h>

#include <random>
#include <thread>
#include <vector>

using namespace poolkit;
using test::instrumented;

namespace {
using poolkit::test::KiB;
using poolkit::test::MiB;
using upstream = ref<instrumented<>>;
}  // namespace

TEST_CASE("caching_pool rounds like PyTorch's allocator") {
    instrumented<> memory;
    caching_pool<upstream> plain{upstream{memory}};
    CHECK(plain.round(1) == 512);
    CHECK(plain.round(512) == 512);
    CHECK(plain.round(513) == 1024);
    CHECK_FALSE(plain.round(std::numeric_limits<std::size_t>::max()).has_value());

    caching_pool<upstream> divided{upstream{memory}, {.power2_divisions = 4}};
    CHECK(divided.round(1100) == 1536);  // at most 4 x 512: plain rounding
    CHECK(divided.round(3000) == 3072);  // 2048 + quarter steps of 512
    CHECK(divided.round(4096) == 4096);  // powers of two stay
    CHECK(divided.round(5 * MiB) == 5 * MiB);  // 4 MiB + 1 MiB steps
    CHECK(divided.round(5 * MiB + 1) == 6 * MiB);
    CHECK(divided.round(300) == 512);
    CHECK_THROWS_AS(caching_pool<upstream>(upstream{memory}, {.power2_divisions = 3}), std::invalid_argument);
}

TEST_CASE("small requests share 2 MiB chunks, large ones get chunks as needed, oversize ones are never split") {
    instrumented<> memory;
    caching_pool<upstream> pool{
        upstream{memory}, {.large_growth = growth_policy::as_needed(2 * MiB), .max_split_size = 64 * MiB, .release_before_growth = false}};
    std::vector<void*> small;
    for (int i = 0; i < 8; ++i) small.push_back(pool.allocate(100 * KiB));
    CHECK(memory.allocations() == 1);
    CHECK(memory.live_bytes() == 2 * MiB);

    void* large = pool.allocate(5 * MiB + 7);
    CHECK(memory.allocations() == 2);
    CHECK(memory.live_bytes() == 2 * MiB + 6 * MiB);  // 5 MiB rounded up to 2 MiB steps

    void* oversize = pool.allocate(100 * MiB);
    pool.deallocate(oversize, 100 * MiB);
    void* smaller = pool.allocate(70 * MiB);  // fits in the free 100 MiB block, which is not split
    CHECK(smaller == oversize);
    CHECK(pool.live_bytes() - 8 * 100 * KiB > 100 * MiB);  // the whole 100 MiB block is in use
    pool.deallocate(smaller, 70 * MiB);

    // A large free block splits only when more than 1 MiB would remain.
    pool.deallocate(large, 5 * MiB + 7);
    void* part = pool.allocate(5 * MiB);  // 1 MiB would remain: not split
    CHECK(part == large);
    pool.deallocate(part, 5 * MiB);
    void* piece = pool.allocate(2 * MiB);  // 4 MiB remain: split
    void* rest = pool.allocate(3 * MiB);
    CHECK(memory.allocations() == 3);
    pool.deallocate(piece, 2 * MiB);
    pool.deallocate(rest, 3 * MiB);

    for (void* p : small) pool.deallocate(p, 100 * KiB);
    pool.check_invariants();
    pool.release();  // empty_cache
    CHECK(memory.live_bytes() == 0);
    CHECK(memory.errors().empty());
}

TEST_CASE("release_before_growth returns wholly free large chunks before taking a new one") {
    instrumented<> memory;
    caching_pool<upstream> pool{upstream{memory}, {.large_growth = growth_policy::fixed_step(16 * MiB)}};
    void* first = pool.allocate(10 * MiB);
    pool.deallocate(first, 10 * MiB);
    CHECK(memory.live_bytes() == 16 * MiB);
    void* larger = pool.allocate(20 * MiB);  // does not fit the free 16 MiB chunk: it goes back first
    CHECK(memory.live_bytes() == 20 * MiB);
    void* fits = pool.allocate(1 * MiB + 512);  // a large request served from what is held: nothing released
    CHECK(memory.live_bytes() == 20 * MiB + 16 * MiB);
    pool.deallocate(fits, 1 * MiB + 512);
    pool.deallocate(larger, 20 * MiB);

    caching_pool<upstream> keeping{upstream{memory}, {.large_growth = growth_policy::fixed_step(16 * MiB), .release_before_growth = false}};
    void* a = keeping.allocate(10 * MiB);
    keeping.deallocate(a, 10 * MiB);
    void* b = keeping.allocate(20 * MiB);
    CHECK(keeping.reserved_bytes() == 36 * MiB);  // the free chunk stays cached
    keeping.deallocate(b, 20 * MiB);
    pool.release();
    keeping.release();
    CHECK(memory.live_bytes() == 0);
}

TEST_CASE("the caching allocator serves a repeated training-step pattern from its cache") {
    instrumented<> memory;
    host_events events;
    const stream_ref compute = events.make_stream();
    caching_resource<upstream, host_events> pool{upstream{memory}, {}, events};
    std::mt19937_64 random(3);
    std::vector<std::size_t> step_sizes;
    for (int i = 0; i < 200; ++i) step_sizes.push_back(512 + random() % (random() % 3 == 0 ? 64 * MiB : 256 * KiB));
    std::size_t allocations_after_first_step = 0;
    for (int step = 0; step < 5; ++step) {
        std::vector<void*> blocks;
        for (std::size_t bytes : step_sizes) blocks.push_back(pool.allocate_async(bytes, 256, compute));
        events.submit(compute);
        for (std::size_t i = 0; i < blocks.size(); ++i) pool.deallocate_async(blocks[i], step_sizes[i], 256, compute);
        if (step == 0) allocations_after_first_step = memory.allocations();
    }
    CHECK(memory.allocations() == allocations_after_first_step);  // warm: no upstream calls
    pool.release();
    CHECK(memory.live_bytes() == 0);
}

TEST_CASE("retried_on_oom calls back and retries a bounded number of times") {
    instrumented<> memory;
    memory.limit(4 * MiB);
    void* hog = memory.allocate(3 * MiB);
    int calls = 0;
    retried_on_oom<upstream> retrying{upstream{memory},
                                      {.callback =
                                           [&](const oom_event& event) {
                                               ++calls;
                                               CHECK(event.bytes == 2 * MiB);
                                               if (event.attempt == 2) {
                                                   memory.deallocate(hog, 3 * MiB);  // the second call frees something
                                                   hog = nullptr;
                                                   return true;
                                               }
                                               return true;
                                           },
                                       .max_retries = 3}};
    void* block = retrying.allocate(2 * MiB);
    CHECK(calls == 2);
    CHECK(retrying.retries() == 2);
    retrying.deallocate(block, 2 * MiB);

    retried_on_oom<upstream> giving_up{upstream{memory}, {.callback = [&](const oom_event&) {
                                           ++calls;
                                           return false;
                                       }}};
    CHECK_THROWS_AS(static_cast<void>(giving_up.allocate(8 * MiB)), out_of_memory);
    CHECK(calls == 3);
    CHECK(giving_up.retries() == 0);
    retried_on_oom<upstream> bounded{upstream{memory},
                                     {.callback =
                                          [&](const oom_event&) {
                                              ++calls;
                                              return true;
                                          },
                                      .max_retries = 2}};
    CHECK_THROWS_AS(static_cast<void>(bounded.allocate(8 * MiB)), out_of_memory);
    CHECK(calls == 5);
}

TEST_CASE("synchronized caching allocator shared by threads" * doctest::test_suite("concurrency")) {
    instrumented<> memory;
    synchronized<caching_resource<upstream, host_events>> pool{std::in_place, upstream{memory}};
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
        threads.emplace_back([&pool, t] {
            std::mt19937_64 random(static_cast<unsigned>(t));
            std::vector<std::pair<void*, std::size_t>> live;
            for (int i = 0; i < 2000; ++i) {
                if (live.empty() || random() % 2 == 0) {
                    const std::size_t bytes = 1 + random() % (2 * MiB);
                    live.emplace_back(pool.allocate(bytes), bytes);
                } else {
                    pool.deallocate(live.back().first, live.back().second);
                    live.pop_back();
                }
            }
            for (auto [p, bytes] : live) pool.deallocate(p, bytes);
        });
    }
    for (auto& thread : threads) thread.join();
    pool.check_invariants();
    pool.release();
    CHECK(memory.live_bytes() == 0);
    CHECK(memory.errors().empty());
}
