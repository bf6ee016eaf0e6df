// host_events, the simulated streams that stream ordering is tested with: work completes in
// dependency order, memory stays bounded over long simulations, and the per-thread handle names a
// stream of its own on each host thread.
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>

#include <doctest/doctest.h>

#include <thread>

using namespace poolkit;

TEST_CASE("host_events: completing work completes what it waits for first, and nothing after") {
    host_events events;
    const stream_ref a = events.make_stream();
    const stream_ref b = events.make_stream();
    events.submit(a);
    events.submit(a);
    const auto after_two = events.record(a);
    events.submit(a);
    events.submit(b);  // before the wait: it does not depend on a
    events.wait(b, after_two);
    events.submit(b);
    CHECK_FALSE(events.done(after_two));
    events.complete(b);
    CHECK(events.done(after_two));
    CHECK(events.completed(a) == 2);  // the wait needed two items of a, not the third
    CHECK(events.completed(b) == 2);
    CHECK(events.wait_count() == 1);
    CHECK(events.pending_waits() == 0);
}

TEST_CASE("host_events: a long simulation holds only the waits its streams have not passed") {
    host_events events;
    const stream_ref a = events.make_stream();
    const stream_ref b = events.make_stream();
    for (int step = 0; step < 200000; ++step) {
        events.submit(a);
        events.wait(b, events.record(a));
        events.submit(b);
        if (step % 64 == 63) events.complete(b);
    }
    CHECK(events.pending_waits() <= 64);
    CHECK(events.wait_count() == 200000);
    CHECK(events.waits().size() <= host_events::log_limit);
    CHECK(events.waits().back().waiter == b);
    events.complete_all();
    CHECK(events.pending_waits() == 0);
    CHECK(events.completed(a) == 200000);
}

TEST_CASE("host_events: a wait on work already done holds nothing") {
    host_events events;
    const stream_ref a = events.make_stream();
    const stream_ref b = events.make_stream();
    events.submit(a);
    const auto event = events.record(a);
    events.complete(a);
    events.wait(b, event);
    CHECK(events.pending_waits() == 0);
    CHECK(events.wait_count() == 1);
}

TEST_CASE("host_events: the per-thread handle names a stream of its own on each thread") {
    host_events events;
    const stream_ref mine = host_events::per_thread_stream();
    CHECK(host_events::per_thread(mine));
    CHECK_FALSE(host_events::per_thread(events.make_stream()));
    CHECK_FALSE(host_events::per_thread(default_stream));
    const auto here = events.identity(mine);
    CHECK(events.identity(mine) == here);
    std::uint64_t there = here;
    std::uint64_t issued_there = 0;
    std::thread other([&] {
        there = events.identity(mine);
        events.submit(mine);
        events.submit(mine);
        issued_there = events.issued(mine);
    });
    other.join();
    CHECK(there != here);
    CHECK(issued_there == 2);
    CHECK(events.issued(mine) == 0);  // this thread's stream saw none of it
}

TEST_CASE("host_events: per-thread streams of stream_ordered stay apart by thread") {
    new_delete_resource memory;
    host_events events;
    stream_ordered<best_fit<ref<new_delete_resource>>, host_events> pool{ref(memory), {}, events};
    const stream_ref per_thread = host_events::per_thread_stream();
    void* here = pool.allocate_async(4096, 256, per_thread);
    std::thread other([&] {
        void* there = pool.allocate_async(4096, 256, per_thread);
        CHECK(there != here);
        pool.deallocate_async(there, 4096, 256, per_thread);
    });
    other.join();
    CHECK(pool.streams() == 2);
    pool.deallocate_async(here, 4096, 256, per_thread);
    events.complete_all();
    pool.release();
    pool.check_invariants();
}
