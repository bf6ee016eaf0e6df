// per_thread: each thread's cache in front of a shared pool — reuse without the shared pool,
// blocks that move between threads, the bounds, thread exit, release(), streams (their sets,
// eviction, a destroyed stream whose handle comes back), exhaustion, calls made after a thread's
// caches are gone (a thread_local or a global freeing at exit), and sixteen threads at once.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/per_thread.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

using namespace poolkit;
using test::instrumented;

namespace {

using upstream_ref = ref<instrumented<>>;
using shared_pool = synchronized<best_fit<upstream_ref>>;
using front = per_thread<shared_pool, completed_events>;
// A front over stream-ordered lanes on simulated streams, for the tests of stream semantics.
using ordered_front = per_thread<synchronized<stream_ordered<upstream_ref, lanes<best_fit>, host_events>>, host_events>;

// completed_events whose identity of a stream changes when the test says the stream was destroyed
// and another made with the same handle; it counts waits for the whole device.
struct relabeled_events : completed_events {
    std::shared_ptr<std::map<stream_handle, std::uint64_t>> generations = std::make_shared<std::map<stream_handle, std::uint64_t>>();
    std::shared_ptr<std::size_t> device_waits = std::make_shared<std::size_t>(0);
    [[nodiscard]] std::uint64_t identity(stream_ref stream) const noexcept {
        return (reinterpret_cast<std::uintptr_t>(stream.get()) << 16) + (*generations)[stream.get()];
    }
    void synchronize_all() noexcept { ++*device_waits; }
    void remake(stream_ref stream) { ++(*generations)[stream.get()]; }
};
static_assert(events_policy<relabeled_events>);

stream_ref stream_number(std::uintptr_t n) { return stream_ref{reinterpret_cast<stream_handle>(n)}; }

// Blocks a thread_local or static object holds and frees in its destructor, on `stream` where
// on_stream; first it allocates and frees one more of a size class. Made before its thread's
// first call to the pool, it is destroyed after that thread's caches. `then` runs last.
template <class Pool>
struct freed_at_destruction {
    Pool* pool = nullptr;
    bool on_stream = false;
    stream_ref stream = default_stream;
    std::vector<std::pair<void*, std::size_t>> blocks;
    std::function<void()> then;

    freed_at_destruction() = default;
    freed_at_destruction(const freed_at_destruction&) = delete;
    freed_at_destruction& operator=(const freed_at_destruction&) = delete;
    ~freed_at_destruction() {
        if (pool == nullptr) return;
        blocks.emplace_back(allocate(700), 700);
        for (const auto& [block, bytes] : blocks) deallocate(block, bytes);
        if (then) then();
    }
    void* allocate(std::size_t bytes) {
        if constexpr (stream_resource<Pool>) {
            if (on_stream) return pool->allocate_async(bytes, 256, stream);
        }
        return pool->allocate(bytes);
    }
    void deallocate(void* block, std::size_t bytes) {
        if constexpr (stream_resource<Pool>) {
            if (on_stream) return pool->deallocate_async(block, bytes, 256, stream);
        }
        pool->deallocate(block, bytes);
    }
};

}  // namespace

TEST_CASE("per_thread: a thread reuses the blocks it freed without asking the shared pool") {
    instrumented<> upstream;
    front pool{std::in_place, upstream_ref{upstream}};
    void* first = pool.allocate(1000);
    pool.deallocate(first, 1000);
    const std::size_t shared_calls = upstream.allocations();
    for (int i = 0; i < 100; ++i) {
        void* again = pool.allocate(900 + i);  // the same size class (1024 B)
        CHECK(again == first);
        pool.deallocate(again, 900 + i);
    }
    CHECK(upstream.allocations() == shared_calls);
    CHECK(pool.hits() == 100);
    CHECK(pool.misses() == 1);
    CHECK(pool.cached_bytes() == 1024);
    CHECK(pool.live_bytes() == 0);
    pool.check_invariants();
}

TEST_CASE("per_thread: requests too large or too aligned for a size class pass straight through") {
    instrumented<> upstream;
    front pool{std::in_place, {.max_size = 64 << 10}, completed_events{}, upstream_ref{upstream}};
    void* large = pool.allocate(100 << 10);
    void* aligned = pool.allocate(512, 4096);
    CHECK(is_aligned(aligned, 4096));
    CHECK(pool.live_bytes() == (100 << 10) + 512);
    pool.deallocate(large, 100 << 10);
    pool.deallocate(aligned, 512, 4096);
    CHECK(pool.cached_bytes() == 0);
    CHECK(pool.live_bytes() == 0);
    CHECK(pool.hits() + pool.misses() == 0);
}

TEST_CASE("per_thread: a cache past max_cached_bytes gives blocks back until it holds half") {
    instrumented<> upstream;
    front pool{std::in_place, {.max_cached_bytes = 64 << 10, .max_blocks_per_class = 1000}, completed_events{}, upstream_ref{upstream}};
    std::vector<void*> blocks;
    for (int i = 0; i < 100; ++i) blocks.push_back(pool.allocate(4096));
    for (void* block : blocks) {
        pool.deallocate(block, 4096);
        CHECK(pool.cached_bytes() <= std::size_t{64} << 10);
    }
    CHECK(pool.cached_bytes() >= std::size_t{32} << 10);
    CHECK(pool.live_bytes() == 0);
    pool.check_invariants();
    // One size class of one stream holds at most max_blocks_per_class.
    front small{std::in_place, {.max_blocks_per_class = 3}, completed_events{}, upstream_ref{upstream}};
    blocks.clear();
    for (int i = 0; i < 10; ++i) blocks.push_back(small.allocate(700));
    for (void* block : blocks) small.deallocate(block, 700);
    CHECK(small.cached_bytes() == 3 * 768);
}

TEST_CASE("per_thread: blocks move between threads, a thread's exit gives its cache back, the figures stay exact") {
    instrumented<> upstream;
    front pool{std::in_place, upstream_ref{upstream}};
    std::vector<void*> made;
    std::thread maker([&] {
        for (int i = 0; i < 50; ++i) made.push_back(pool.allocate(3000));
    });
    maker.join();  // its cache was empty: nothing to give back
    CHECK(pool.live_bytes() == 50 * 3072);
    CHECK(pool.thread_caches() == 0);
    std::thread freer([&] {
        for (void* block : made) pool.deallocate(block, 3000);  // into this thread's cache
        CHECK(pool.cached_bytes() == 50 * 3072);
        CHECK(pool.live_bytes() == 0);
        void* again = pool.allocate(3000);
        CHECK(std::find(made.begin(), made.end(), again) != made.end());
        pool.deallocate(again, 3000);
    });
    freer.join();
    CHECK(pool.cached_bytes() == 0);  // the exit gave it back
    CHECK(pool.live_bytes() == 0);
    CHECK(pool.hits() == 1);
    CHECK(pool.misses() == 50);
    pool.upstream_resource().release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: release() gives back the caller's cache now and the other threads' at their next call") {
    instrumented<> upstream;
    front pool{std::in_place, upstream_ref{upstream}};
    std::mutex m;
    std::condition_variable turn;
    int step = 0;
    std::thread other([&] {
        void* block = pool.allocate(2000);
        pool.deallocate(block, 2000);
        {
            std::unique_lock lock(m);
            step = 1;
            turn.notify_all();
            turn.wait(lock, [&] { return step == 2; });
        }
        void* next = pool.allocate(100000);  // its next call catches up with the release
        CHECK(pool.cached_bytes() == 0);
        pool.deallocate(next, 100000);
    });
    {
        std::unique_lock lock(m);
        turn.wait(lock, [&] { return step == 1; });
    }
    void* mine = pool.allocate(5000);
    pool.deallocate(mine, 5000);
    CHECK(pool.cached_bytes() == 2048 + 5120);
    pool.release();
    CHECK(pool.cached_bytes() == 2048);  // the other thread's, until it calls
    {
        std::lock_guard lock(m);
        step = 2;
        turn.notify_all();
    }
    other.join();
    CHECK(pool.cached_bytes() == 0);
    pool.release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: a block freed on one stream is reused from the cache on that stream only") {
    instrumented<> upstream;
    host_events events;
    const stream_ref a = events.make_stream(), b = events.make_stream();
    ordered_front pool{std::in_place, {}, events, upstream_ref{upstream}, best_fit_options{}, events};
    void* on_a = pool.allocate_async(1000, 256, a);
    events.submit(a);  // work that uses it, not yet done
    pool.deallocate_async(on_a, 1000, 256, a);
    void* on_b = pool.allocate_async(1000, 256, b);
    CHECK(on_b != on_a);  // a's free is not ordered before b's work: not from the cache
    CHECK(pool.hits() == 0);
    void* again_a = pool.allocate_async(1000, 256, a);
    CHECK(again_a == on_a);  // behind a's work on a: from the cache
    CHECK(pool.hits() == 1);
    pool.deallocate_async(again_a, 1000, 256, a);
    pool.deallocate_async(on_b, 1000, 256, b);
    CHECK(events.synchronizations() == 0);
    events.complete_all();
    pool.release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: a block used on other streams (record_use) goes back to the shared pool at its free, not to a cache") {
    instrumented<> upstream;
    host_events events;
    const stream_ref a = events.make_stream(), b = events.make_stream();
    ordered_front pool{std::in_place, {}, events, upstream_ref{upstream}, best_fit_options{}, events};
    void* block = pool.allocate_async(1000, 256, a);
    pool.record_use(block, b);
    events.submit(b);  // b's work uses it
    pool.deallocate_async(block, 1000, 256, a);
    CHECK(pool.cached_bytes() == 0);
    void* next = pool.allocate_async(1000, 256, a);
    CHECK(next != block);  // the shared pool holds it back until b's work is done
    pool.deallocate_async(next, 1000, 256, a);
    CHECK(pool.cached_bytes() == 1024);  // an ordinary block is cached
    events.complete_all();
    pool.release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: a thread on more streams than streams_per_thread gives the oldest set back after waiting for the device") {
    instrumented<> upstream;
    host_events events;
    std::vector<stream_ref> streams;
    for (int i = 0; i < 3; ++i) streams.push_back(events.make_stream());
    ordered_front pool{std::in_place, {.streams_per_thread = 2}, events, upstream_ref{upstream}, best_fit_options{}, events};
    for (stream_ref s : streams) {
        void* block = pool.allocate_async(4000, 256, s);
        events.submit(s);
        pool.deallocate_async(block, 4000, 256, s);
    }
    CHECK(events.synchronizations() == 1);  // the first stream's set went back
    CHECK(pool.cached_bytes() == 2 * 4096);
    events.complete_all();
    pool.release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: a stream destroyed and remade with the same handle never reuses the old stream's blocks") {
    instrumented<> upstream;
    relabeled_events events;
    using shared = synchronized<stream_ordered<upstream_ref, lanes<best_fit>, completed_events>>;
    per_thread<shared, relabeled_events> pool{std::in_place, {.max_cached_bytes = 16 << 10}, events, upstream_ref{upstream}};
    const stream_ref s = stream_number(0x40);
    std::vector<void*> old_blocks;
    for (int i = 0; i < 4; ++i) old_blocks.push_back(pool.allocate_async(3000, 256, s));
    pool.deallocate_async(old_blocks.back(), 3000, 256, s);
    old_blocks.pop_back();
    events.remake(s);  // destroyed with its work pending; a new stream got the same handle
    std::vector<void*> fresh;
    for (int i = 0; i < 4; ++i) {
        fresh.push_back(pool.allocate_async(3000, 256, s));
        CHECK(std::find(old_blocks.begin(), old_blocks.end(), fresh.back()) == old_blocks.end());
    }
    CHECK(pool.hits() == 0);  // the old stream's cached block was not handed to the new one
    for (void* block : fresh) pool.deallocate_async(block, 3000, 256, s);
    for (void* block : old_blocks) pool.deallocate_async(block, 3000, 256, s);
    CHECK(*events.device_waits == 0);
    pool.release();  // the old stream's set goes back only after a wait for the device
    CHECK(*events.device_waits == 1);
    CHECK(pool.cached_bytes() == 0);
    pool.upstream_resource().release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: exhaustion gives the caches back and tries once more, then throws out_of_memory") {
    instrumented<> upstream;
    front pool{std::in_place, {.max_blocks_per_class = 1000}, completed_events{}, upstream_ref{upstream}};
    std::vector<void*> blocks;
    for (int i = 0; i < 64; ++i) blocks.push_back(pool.allocate(64 << 10));
    for (void* block : blocks) pool.deallocate(block, 64 << 10);
    REQUIRE(pool.cached_bytes() == std::size_t{4} << 20);
    upstream.limit(upstream.live_bytes());  // the shared pool can grow no more
    std::vector<void*> more;
    CHECK_THROWS_AS(
        [&] {
            for (;;) more.push_back(pool.allocate(1 << 20));
        }(),
        out_of_memory);
    CHECK(pool.cached_bytes() == 0);  // given back before the request failed
    CHECK(more.size() >= 2);  // and the 4 MiB it held served larger blocks
    for (void* block : more) pool.deallocate(block, 1 << 20);
    pool.release();
    pool.upstream_resource().release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: a thread_local object destroyed after its thread's caches frees and allocates through the shared pool") {
    instrumented<> upstream;
    front pool{std::in_place, upstream_ref{upstream}};
    std::thread worker([&] {
        thread_local freed_at_destruction<front> held;  // made before the thread's first call
        held.pool = &pool;
        for (std::size_t bytes : {300, 3000, 3000, 100000, 8 << 20}) held.blocks.emplace_back(pool.allocate(bytes), bytes);
        void* cached = pool.allocate(3000);
        pool.deallocate(cached, 3000);  // the cache holds a block when the thread exits
    });
    worker.join();
    CHECK(pool.thread_caches() == 0);
    CHECK(pool.cached_bytes() == 0);
    CHECK(pool.live_bytes() == 0);  // the frees after the exit were counted
    CHECK(pool.misses() == 6);  // the allocation after the exit took its block from the shared pool
    CHECK(upstream.errors().empty());
    pool.upstream_resource().release();
    CHECK(upstream.live_bytes() == 0);
}

TEST_CASE("per_thread: a free on a stream after the thread's caches are gone goes to the shared pool on that stream") {
    instrumented<> upstream;
    host_events events;
    const stream_ref a = events.make_stream(), b = events.make_stream();
    ordered_front pool{std::in_place, {}, events, upstream_ref{upstream}, best_fit_options{}, events};
    void* used_on_a = nullptr;
    std::thread worker([&] {
        thread_local freed_at_destruction<ordered_front> held;
        held.pool = &pool;
        held.on_stream = true;
        held.stream = a;
        used_on_a = pool.allocate_async(1000, 256, a);
        held.blocks.emplace_back(used_on_a, 1000);
        events.submit(a);  // work that uses it, not yet done when the thread_local frees it
    });
    worker.join();
    CHECK(pool.live_bytes() == 0);
    void* on_b = pool.allocate_async(1000, 256, b);
    CHECK(on_b != used_on_a);  // the shared pool holds it behind a's work
    pool.deallocate_async(on_b, 1000, 256, b);
    CHECK(events.synchronizations() == 0);
    events.complete_all();
    pool.release();
    CHECK(upstream.errors().empty());
    CHECK(upstream.live_bytes() == 0);
}

// exit() destroys the main thread's thread_locals (its caches among them) before static objects,
// so a global container of blocks declared after a global per_thread frees them with the
// thread's caches gone. A forked child stands for the process, its statics for the globals.
TEST_CASE("per_thread: a global container destroyed at exit frees its blocks through a global per_thread") {
    const auto outcome = test::run_in_child([] {
        static instrumented<> upstream;
        static front pool{std::in_place, upstream_ref{upstream}};
        static freed_at_destruction<front> held;
        held.pool = &pool;
        for (std::size_t bytes : {300, 3000, 100000, 8 << 20}) held.blocks.emplace_back(pool.allocate(bytes), bytes);
        void* cached = pool.allocate(3000);
        pool.deallocate(cached, 3000);
        held.then = [] {
            std::fprintf(stderr, "live %zu, cached %zu, misuses %zu\n", pool.live_bytes(), pool.cached_bytes(), upstream.errors().size());
        };
        std::exit(0);
    });
    INFO("the child ended with signal " << outcome.signal << ", exit code " << outcome.exit_code << ":\n" << outcome.error_output);
    CHECK(outcome.exited_cleanly());
    CHECK(outcome.said("live 0, cached 0, misuses 0"));
    CHECK(!outcome.said("still live"));  // every block was back in the shared pool when it was destroyed
}

// Sixteen threads allocate, write, check and free; a third of the blocks are handed to another
// thread, which checks and frees them. Run under TSan in CI.
TEST_CASE("per_thread: sixteen threads with blocks moving between them keep every byte and exact figures") {
    new_delete_resource host;
    using host_pool = per_thread<synchronized<best_fit<ref<new_delete_resource>>>, completed_events>;
    host_pool pool{std::in_place, {.max_cached_bytes = 256 << 10}, completed_events{}, ref<new_delete_resource>(host)};
    constexpr int threads = 16;
    struct handed {
        unsigned char* data;
        std::size_t bytes;
        unsigned char value;
    };
    std::vector<std::deque<handed>> mailboxes(threads);
    std::vector<std::mutex> locks(threads);
    std::atomic<int> bad{0};
    std::atomic<int> done{0};
    const auto check_and_free = [&](const handed& h) {
        for (std::size_t i = 0; i < h.bytes; ++i) bad += h.data[i] != h.value;
        pool.deallocate(h.data, h.bytes);
    };
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&, t] {
            std::mt19937_64 random(static_cast<std::uint64_t>(t) + 1);
            std::vector<handed> mine;
            for (int step = 0; step < 3000; ++step) {
                if (mine.empty() || random() % 100 < 55) {
                    const std::size_t bytes = 1 + random() % (random() % 16 == 0 ? 200000 : 4000);
                    auto* data = static_cast<unsigned char*>(pool.allocate(bytes));
                    const auto value = static_cast<unsigned char>(random());
                    std::memset(data, value, bytes);
                    mine.push_back({data, bytes, value});
                } else {
                    const std::size_t index = random() % mine.size();
                    const handed h = mine[index];
                    mine[index] = mine.back();
                    mine.pop_back();
                    if (random() % 3 == 0) {
                        const auto to = static_cast<std::size_t>(random() % threads);
                        std::lock_guard lock(locks[to]);
                        mailboxes[to].push_back(h);
                    } else {
                        check_and_free(h);
                    }
                }
                if (step % 64 == 0) {
                    std::deque<handed> arrived;
                    {
                        std::lock_guard lock(locks[static_cast<std::size_t>(t)]);
                        arrived.swap(mailboxes[static_cast<std::size_t>(t)]);
                    }
                    for (const handed& h : arrived) check_and_free(h);
                }
            }
            for (const handed& h : mine) check_and_free(h);
            ++done;
            while (done.load() < threads) std::this_thread::yield();  // mail may still arrive
            for (;;) {
                std::deque<handed> arrived;
                {
                    std::lock_guard lock(locks[static_cast<std::size_t>(t)]);
                    arrived.swap(mailboxes[static_cast<std::size_t>(t)]);
                }
                if (arrived.empty()) break;
                for (const handed& h : arrived) check_and_free(h);
            }
            pool.check_invariants();
        });
    }
    for (auto& worker : workers) worker.join();
    CHECK(bad.load() == 0);
    CHECK(pool.live_bytes() == 0);
    CHECK(pool.cached_bytes() == 0);  // every thread gave its cache back at exit
    CHECK(pool.hits() > pool.misses());
    MESSAGE("hits " << pool.hits() << ", misses " << pool.misses());
    pool.upstream_resource().release();
    CHECK(pool.upstream_resource().upstream_resource().live_bytes() == 0);
}
