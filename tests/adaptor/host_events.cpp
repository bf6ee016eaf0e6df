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

TEST_CASE("host_events: a stream is idle once every item issued on it completed") {
    host_events events;
    const stream_ref s = events.make_stream();
    CHECK(events.idle(s));
    const auto first = events.submit(s);
    events.submit(s);
    CHECK_FALSE(events.idle(s));
    events.complete(s, first);
    CHECK_FALSE(events.idle(s));
    events.complete(s);
    CHECK(events.idle(s));
    CHECK(events.query_count() == 4);  // each a driver call on a GPU
    events.destroy_stream(s);
    CHECK_THROWS_AS(static_cast<void>(events.idle(s)), std::logic_error);
}

TEST_CASE("host_events: a stream declared lasting says so and may not be destroyed, and the default stream is lasting") {
    host_events events;
    const stream_ref kept = events.make_stream();
    const stream_ref other = events.make_stream();
    CHECK(events.lasting(default_stream));
    CHECK_FALSE(events.lasting(host_events::per_thread_stream()));
    CHECK_FALSE(events.lasting(kept));
    events.declare_lasting(kept);
    CHECK(events.lasting(kept));
    CHECK_FALSE(events.lasting(other));
    CHECK_THROWS_AS(events.destroy_stream(kept), std::logic_error);
    CHECK(events.idle(kept));  // still alive
    events.destroy_stream(other);
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
    stream_ordered<ref<new_delete_resource>, lanes<best_fit>, host_events> pool{ref(memory), {}, events};
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

TEST_CASE("host_events capture: work goes into the graph, and a captured event may not be asked about") {
    host_events events;
    const stream_ref s = events.make_stream();
    events.submit(s);
    const std::uint64_t id = events.begin_capture(s);
    CHECK(events.capture_of(s) == id);
    CHECK(events.capture_of(default_stream) == 0);
    CHECK(events.submit(s) == 0);  // into the capture, not the timeline
    CHECK(events.issued(s) == 1);
    const auto captured = events.record(s);
    CHECK(captured.capture == id);
    SUBCASE("a clean capture") {
        events.submit(s);
        const auto graph = events.end_capture(s);
        CHECK((graph.valid && graph.id == id && graph.items == 2));
        CHECK(events.capture_of(s) == 0);
        CHECK(events.launch(graph, s) == 2);  // one item on the timeline
    }
    SUBCASE("querying a captured event breaks the capture") {
        CHECK_THROWS_AS(static_cast<void>(events.done(captured)), capture_error);
        CHECK_THROWS_AS(events.synchronize(captured), capture_error);
        const auto graph = events.end_capture(s);
        CHECK_FALSE(graph.valid);
        CHECK_THROWS_AS(events.launch(graph, s), capture_error);
        CHECK(events.capture_errors() == 2);
    }
    SUBCASE("so does asking whether a stream in capture is idle") {
        CHECK_THROWS_AS(static_cast<void>(events.idle(s)), capture_error);
        CHECK_FALSE(events.end_capture(s).valid);
    }
    SUBCASE("so does waiting for the whole device") {
        CHECK_THROWS_AS(events.synchronize_all(), capture_error);
        CHECK_FALSE(events.end_capture(s).valid);
    }
    SUBCASE("and a stream in capture waiting on an event from outside it") {
        const stream_ref other = events.make_stream();
        events.submit(other);
        CHECK_THROWS_AS(events.wait(s, events.record(other)), capture_error);
        CHECK_FALSE(events.end_capture(s).valid);
    }
    CHECK_FALSE(events.capturing());
}

TEST_CASE("host_events capture: a stream that waits on a captured event joins the capture until it ends") {
    host_events events;
    const stream_ref origin = events.make_stream(), forked = events.make_stream();
    const std::uint64_t id = events.begin_capture(origin, capture_mode::local);
    events.wait(forked, events.record(origin));
    CHECK(events.capture_of(forked) == id);
    events.submit(forked);
    events.wait(origin, events.record(forked));  // joined back: an edge of the graph
    CHECK_THROWS_AS(events.end_capture(forked), capture_error);  // only the stream that began it ends it
    const auto graph = events.end_capture(origin);
    CHECK((graph.valid && graph.items == 1));
    CHECK(events.capture_of(forked) == 0);
    CHECK(events.wait_count() == 0);  // edges, not waits on the timeline
}

TEST_CASE("host_events capture: the modes prohibit potentially unsafe calls of the threads CUDA says") {
    host_events events;
    const stream_ref s = events.make_stream(), eager = events.make_stream();
    events.submit(eager);
    const auto outside = events.record(eager);
    const auto from_other_thread = [&](auto call) {
        bool threw = false;
        std::thread other([&] {
            try {
                call();
            } catch (const capture_error&) {
                threw = true;
            }
        });
        other.join();
        return threw;
    };
    SUBCASE("global: every thread in global mode") {
        events.begin_capture(s, capture_mode::global);
        CHECK(from_other_thread([&] { events.unsafe_call("cudaMalloc"); }));
        CHECK_FALSE(from_other_thread([&] { events.unprohibited([&] { events.unsafe_call("cudaMalloc"); }); }));
        CHECK_FALSE(from_other_thread([&] {
            events.exchange_mode(capture_mode::local);
            events.unsafe_call("cudaMalloc");  // its own thread captures nothing
        }));
        CHECK_FALSE(events.end_capture(s).valid);
    }
    SUBCASE("local: the capturing thread only") {
        events.begin_capture(s, capture_mode::local);
        CHECK_FALSE(from_other_thread([&] { events.unsafe_call("cudaMalloc"); }));
        CHECK_THROWS_AS(events.unsafe_call("cudaMalloc"), capture_error);
        CHECK_FALSE(events.end_capture(s).valid);
    }
    SUBCASE("queries and host waits of work outside the capture: allowed in every mode, as cuda_events makes them") {
        for (const capture_mode mode : {capture_mode::global, capture_mode::local, capture_mode::relaxed}) {
            CAPTURE(static_cast<int>(mode));
            events.submit(eager);
            const auto pending = events.record(eager);
            events.begin_capture(s, mode);
            CHECK_FALSE(events.done(pending));
            CHECK_FALSE(events.idle(eager));
            CHECK_FALSE(from_other_thread([&] { static_cast<void>(events.done(pending)); }));
            events.synchronize(pending);
            CHECK(events.idle(eager));
            CHECK(events.end_capture(s).valid);
        }
        CHECK(events.capture_errors() == 0);
    }
    SUBCASE("relaxed: none, though cudaFree still may not synchronize the device") {
        events.begin_capture(s, capture_mode::relaxed);
        events.unsafe_call("cudaMalloc");
        CHECK(events.done(outside) == false);
        CHECK_THROWS_AS(events.synchronizing_call("cudaFree"), capture_error);
        CHECK_FALSE(events.end_capture(s).valid);
    }
    SUBCASE("after the capture, anything goes") {
        const auto graph = (events.begin_capture(s), events.end_capture(s));
        CHECK(graph.valid);
        events.unsafe_call("cudaMalloc");
        events.synchronizing_call("cudaFree");
        events.synchronize_all();
    }
}

TEST_CASE("host_events: on_graph_gone runs once the graph is destroyed and its launches completed, at once for an invalidated capture") {
    host_events events;
    const stream_ref s = events.make_stream(), other = events.make_stream();
    int gone = 0;
    CHECK_THROWS_AS(events.on_graph_gone(s, [&] { ++gone; }), std::logic_error);  // not in capture
    events.begin_capture(s);
    events.on_graph_gone(s, [&] { ++gone; });
    events.submit(s);
    const auto graph = events.end_capture(s);
    REQUIRE(graph.valid);
    events.launch(graph, other);
    events.destroy_graph(graph);
    CHECK(gone == 0);  // its launch still runs
    CHECK_THROWS_AS(events.launch(graph, other), std::logic_error);
    events.complete(other);
    CHECK(gone == 1);

    events.begin_capture(s, capture_mode::global);
    events.on_graph_gone(s, [&] { ++gone; });
    CHECK_THROWS_AS(events.synchronize_all(), capture_error);  // invalidates the capture
    CHECK_FALSE(events.end_capture(s).valid);
    CHECK(gone == 2);  // no graph came out to hold it

    events.begin_capture(s);
    events.on_graph_gone(s, [&] { ++gone; });
    const auto never_launched = events.end_capture(s);
    events.destroy_graph(never_launched);
    CHECK(gone == 3);
}
