// The parts of stream_ordered, each against its contract (adaptor/detail/): the stream table, the
// front cache, the waiting blocks, the pool tag, the open fronts, the fronts together and the
// blocks passed through.
#include "../support/instrumented.hpp"

#include <poolkit/adaptor/detail/capture_door.hpp>
#include <poolkit/adaptor/detail/due_fronts.hpp>
#include <poolkit/adaptor/detail/front_cache.hpp>
#include <poolkit/adaptor/detail/fronts.hpp>
#include <poolkit/adaptor/detail/open_fronts.hpp>
#include <poolkit/adaptor/detail/passed_through.hpp>
#include <poolkit/adaptor/detail/pending_walk.hpp>
#include <poolkit/adaptor/detail/pool_tag.hpp>
#include <poolkit/adaptor/detail/stream_table.hpp>
#include <poolkit/adaptor/detail/waiting_blocks.hpp>
#include <poolkit/adaptor/host_events.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <thread>
#include <unordered_map>
#include <vector>

using namespace poolkit;
using namespace poolkit::detail;

namespace {

void* at(std::uintptr_t address) { return reinterpret_cast<void*>(address); }

struct record {
    explicit record(stream_key k) : key(k) {}
    stream_key key;
    int calls = 0;
    std::size_t open_slot = 0;
    bool wanted = false;
    std::uint64_t asked_at = 0;
    std::uint64_t last_call = 0;
};

// A record as fronts<> wants it: open_fronts' members, a front cache and when it opened.
struct front_record : record {
    explicit front_record(stream_key k) : record(k) {}
    front_cache front{front_limits::blocks_per_front};
    std::uint64_t opened_at = 0;
    std::uint8_t busy_streak = 0;
    std::uint8_t idle_skips = 0;
};

}  // namespace

TEST_CASE("stream_table finds each stream's record by identity and thread, and erases what it is told") {
    stream_table<record> table;
    const std::thread::id other = [] {
        std::thread::id id;
        std::thread t([&] { id = std::this_thread::get_id(); });
        t.join();
        return id;
    }();
    std::unordered_map<std::uint64_t, record*> made;
    for (std::uint64_t id = 1; id <= 300; ++id) made[id] = &table.add(std::make_unique<record>(stream_key{id, {}}));
    record& per_thread = table.add(std::make_unique<record>(stream_key{7, other}));  // same identity, another thread
    record& zero = table.add(std::make_unique<record>(stream_key{0, {}}));  // not in the flat map
    CHECK(table.size() == 302);
    CHECK(table.consistent());
    for (const auto& [id, r] : made) CHECK(table.find({id, {}}) == r);
    CHECK(table.find({7, other}) == &per_thread);
    CHECK(table.find({7, {}}) == made[7]);
    CHECK(table.find({0, {}}) == &zero);
    CHECK(table.find({301, {}}) == nullptr);
    // Erase the even identities: the rest keep their addresses, the erased are gone.
    CHECK(table.erase_if([](const record& r) { return r.key.stream % 2 == 0 && r.key.thread == std::thread::id{}; }) == 151);
    CHECK(table.consistent());
    for (std::uint64_t id = 1; id <= 300; ++id) CHECK((table.find({id, {}}) == nullptr) == (id % 2 == 0));
    CHECK(table.find({7, other}) == &per_thread);
    CHECK(table.find({0, {}}) == nullptr);  // identity 0 is even
}

TEST_CASE("front_cache hands back exactly the size and alignment asked, newest first, and keeps count") {
    front_cache front(4);
    CHECK(front.take(256, 256) == nullptr);
    CHECK(front.push({at(0x1000), 256, 256}));
    CHECK(front.push({at(0x2000), 512, 256}));
    CHECK(front.push({at(0x3000), 256, 256}));
    CHECK(front.push({at(0x4000), 256, 4096}));
    CHECK(front.full());
    CHECK(front.bytes() == 1280);
    CHECK(front.take(256, 256) == at(0x3000));  // the newest of that size
    CHECK(front.take(256, 256) == at(0x1000));
    CHECK(front.take(256, 256) == nullptr);  // the one left of that size has another alignment
    CHECK(front.take(300, 256) == nullptr);
    CHECK(front.take(256, 4096) == at(0x4000));
    CHECK(front.consistent());
    CHECK(front.size() == 1);
    CHECK(front.bytes() == 512);
    front.clear();
    CHECK(front.empty());
    CHECK(front.consistent());
}

TEST_CASE("front_cache agrees with a plain list through random pushes and takes") {
    front_cache front(64);
    std::vector<free_block> model;
    std::mt19937_64 random(5);
    std::uintptr_t next = 0x10000;
    for (int step = 0; step < 20000; ++step) {
        const std::size_t bytes = 256 * (1 + random() % 12);
        if (!front.full() && random() % 2 == 0) {
            const free_block b{at(next += 0x1000), bytes, 256};
            REQUIRE(front.push(b));
            model.push_back(b);
            continue;
        }
        const auto newest = std::find_if(model.rbegin(), model.rend(), [&](const free_block& b) { return b.bytes == bytes; });
        void* taken = front.take(bytes, 256);
        if (newest == model.rend()) {
            CHECK(taken == nullptr);
        } else {
            CHECK(taken == newest->pointer);
            model.erase(std::next(newest).base());
        }
        if (step % 97 == 0) REQUIRE(front.consistent());
    }
    CHECK(front.size() == model.size());
}

TEST_CASE("waiting_blocks gives a batch only once every event of it is done, oldest first") {
    host_events events;
    const stream_ref a = events.make_stream(), b = events.make_stream();
    waiting_blocks<host_events> waiting(events);
    std::vector<void*> given;
    const auto give = [&](const free_block& x) { given.push_back(x.pointer); };
    events.submit(a);
    const free_block first[] = {{at(0x1000), 256, 256}, {at(0x2000), 512, 256}};
    const host_events::event_type on_a = events.record(a);
    waiting.add(first, std::span(&on_a, 1));
    events.submit(b);
    const free_block used[] = {{at(0x3000), 256, 256}};
    const host_events::event_type both[] = {events.record(a), events.record(b)};  // a record_use'd block
    waiting.add(used, both);
    CHECK(waiting.blocks() == 3);
    CHECK(waiting.bytes() == 1024);
    CHECK(waiting.drain(8, give) == 0);  // nothing done
    events.complete(b);
    CHECK(waiting.drain(8, give) == 0);  // the second batch still waits for a
    events.complete(a);
    CHECK(waiting.drain(8, give) == 3);
    CHECK(given == std::vector<void*>{at(0x1000), at(0x2000), at(0x3000)});
    CHECK(waiting.empty());
    CHECK(waiting.consistent());
}

TEST_CASE("waiting_blocks polls no more than its patience of batches that are not done") {
    host_events events;
    std::vector<stream_ref> streams;
    waiting_blocks<host_events> waiting(events);
    for (std::uintptr_t i = 0; i < 6; ++i) {
        streams.push_back(events.make_stream());
        events.submit(streams.back());
        const free_block b{at(0x1000 * (i + 1)), 256, 256};
        const auto event = events.record(streams.back());
        waiting.add(std::span(&b, 1), std::span(&event, 1));
    }
    events.complete(streams[5]);  // only the newest is done, behind five that are not
    std::size_t given = 0;
    const auto give = [&](const free_block&) { ++given; };
    CHECK(waiting.drain(2, give) == 0);  // gave up after two not done
    CHECK(waiting.drain(5, give) == 0);  // and after five: the sixth was not polled
    CHECK(waiting.drain(6, give) == 1);
    CHECK(waiting.blocks() == 5);
    events.complete_all();
    CHECK(waiting.drain(1, give) == 5);
    CHECK(waiting.consistent());
}

TEST_CASE("waiting_blocks::take orders the taker after the block's batch, and takes nothing if that throws") {
    host_events events;
    const stream_ref a = events.make_stream(), taker = events.make_stream();
    waiting_blocks<host_events> waiting(events);
    events.submit(a);
    const free_block blocks[] = {{at(0x1000), 256, 256}, {at(0x2000), 4096, 256}};
    const auto event = events.record(a);
    waiting.add(blocks, std::span(&event, 1));
    CHECK(waiting.take(1024, 256, [](auto) { FAIL("no block of that size"); }) == nullptr);
    CHECK_THROWS(static_cast<void>(waiting.take(4096, 256, [](auto) { throw std::runtime_error("no wait"); })));
    CHECK(waiting.blocks() == 2);
    const std::size_t waits = events.wait_count();
    void* taken = waiting.take(4096, 256, [&](std::span<const host_events::event_type> batch) {
        for (const auto& e : batch) events.wait(taker, e);
    });
    CHECK(taken == at(0x2000));
    CHECK(events.wait_count() == waits + 1);
    CHECK(waiting.take(256, 256, [&](auto batch) {
        for (const auto& e : batch) events.wait(taker, e);
    }) == at(0x1000));
    CHECK(waiting.empty());  // the spent batch is gone and its event recycled
    CHECK(waiting.consistent());
}

TEST_CASE("pool_tag: the home takes at once, another stream after the cover, by waiting or once it is done") {
    host_events events;
    const stream_ref home_stream = events.make_stream(), other_stream = events.make_stream();
    record home{{1, {}}}, other{{2, {}}};
    pool_tag<host_events, record> tag(events);
    std::uint64_t seen = 0;
    CHECK(tag.ready_for(&other, seen));  // untagged: ready for all
    CHECK(tag.ready_for(nullptr, seen));
    events.submit(home_stream);
    tag.note_home_free(home);
    CHECK(tag.ready_for(&home, 0));
    CHECK_FALSE(tag.ready_for(&other, seen));
    CHECK_FALSE(tag.ready_for(nullptr, seen));
    CHECK_FALSE(tag.make_ready(&other_stream, seen));  // uncovered: only the device would do
    tag.cover(home_stream);
    CHECK_FALSE(tag.ready_for(&other, seen));
    const std::size_t waits = events.wait_count();
    CHECK(tag.make_ready(&other_stream, seen));  // waits on the cover, on the GPU
    CHECK(events.wait_count() == waits + 1);
    CHECK(tag.ready_for(&other, seen));
    CHECK(tag.home() == &home);  // still tagged: a plain allocate must wait on the host
    CHECK(tag.make_ready(nullptr, seen));
    CHECK(events.done(events.record(home_stream)));  // the host waited for the home's work
    CHECK(tag.home() == nullptr);
}

TEST_CASE("pool_tag::wait_for_all records on the home's stream when the call is on it, else needs the device") {
    host_events events;
    const stream_ref home_stream = events.make_stream();
    record home{{1, {}}};
    pool_tag<host_events, record> tag(events);
    tag.note_home_free(home);
    events.submit(home_stream);
    CHECK_FALSE(tag.wait_for_all(nullptr));  // not on its stream, nothing covers it
    CHECK(tag.home() == &home);
    CHECK(tag.wait_for_all(&home_stream));
    CHECK(tag.home() == nullptr);
    CHECK(events.done(events.record(home_stream)));
}

TEST_CASE("open_fronts asks every other open front and says when one asked long ago is still open") {
    open_fronts<record> open;
    record a{{1, {}}}, b{{2, {}}}, c{{3, {}}};
    for (record* r : {&a, &b, &c}) {
        open.reserve_one();
        open.open(*r);
    }
    CHECK(open.size() == 3);
    CHECK(open.ask_all(&a));
    CHECK_FALSE(a.wanted);
    CHECK((b.wanted && c.wanted));
    open.close(b);  // b covered its front at its next call
    CHECK_FALSE(b.wanted);
    CHECK(open.consistent());
    for (int i = 0; i < 10; ++i) open.ask_all(&a);
    CHECK_FALSE(open.stale(10));
    open.ask_all(&a);
    CHECK(open.stale(10));  // c was asked eleven misses ago: its stream may be gone
    open.close(c);
    open.close(a);
    CHECK(open.empty());
    CHECK_FALSE(open.ask_all(nullptr));
}

TEST_CASE("due_fronts lists a stream once, unlists it on drop, and hands every listed one over oldest first") {
    struct due_record {
        int id;
        bool cover_due = false;
    };
    due_fronts<due_record> due;
    due.reserve(3);
    due_record a{1}, b{2}, c{3};
    CHECK(due.add(b));
    CHECK(due.add(a));
    CHECK_FALSE(due.add(b));  // listed already
    CHECK(due.add(c));
    CHECK(due.consistent(3));
    CHECK_FALSE(due.consistent(2));
    due.drop(a);
    CHECK_FALSE(a.cover_due);
    due.drop(a);  // not listed: nothing
    CHECK(due.size() == 2);
    std::vector<int> taken;
    due.take_all([&](due_record& r) {
        CHECK_FALSE(r.cover_due);
        taken.push_back(r.id);
    });
    CHECK(taken == std::vector<int>{2, 3});
    CHECK(due.empty());
    CHECK((!b.cover_due && !c.cover_due));
    CHECK(due.consistent(0));
}

TEST_CASE("pool_tag: blocks put in the pool behind events are ready for the stream that waited, and for others once they wait") {
    host_events events;
    const stream_ref freeing = events.make_stream(), taker = events.make_stream(), other = events.make_stream();
    record taker_record{{2, {}}}, other_record{{3, {}}};
    pool_tag<host_events, record> tag(events);
    events.submit(freeing);
    const host_events::event_type covers[] = {events.record(freeing)};
    events.wait(taker, covers[0]);  // what stream_ordered does before add_covers
    std::uint64_t taker_seen = 0, other_seen = 0;
    tag.reserve(1);
    tag.add_covers(covers, taker_seen);
    CHECK_FALSE(tag.clean());
    CHECK(tag.ready_for(&taker_record, taker_seen));
    CHECK_FALSE(tag.ready_for(&other_record, other_seen));
    CHECK_FALSE(tag.ready_for(nullptr, 0));
    const std::size_t waits = events.wait_count();
    CHECK(tag.make_ready(&other, other_seen));  // waits on the cover, on the GPU
    CHECK(events.wait_count() == waits + 1);
    CHECK(tag.ready_for(&other_record, other_seen));
    events.complete_all();
    std::uint64_t plain_seen = 0;
    CHECK(tag.make_ready(nullptr, plain_seen));  // done: dropped, and the tag is clean
    CHECK(tag.clean());
}

TEST_CASE("fronts: a push opens a front, a cover moves it behind one event among the waiting blocks") {
    host_events events;
    const stream_ref a = events.make_stream();
    waiting_blocks<host_events> waiting(events);
    fronts<host_events, front_record> all(events, waiting);
    front_record r{{1, {}}};
    all.reserve(r);
    CHECK(all.push(r, {at(0x1000), 4096, 256}, 10));
    CHECK(all.open().size() == 1);
    CHECK(r.opened_at == 10);
    all.reserve(r);
    CHECK(all.push(r, {at(0x2000), 512, 256}, 11));
    CHECK(all.bytes() == 4608);
    CHECK(r.front.take(512, 256) == at(0x2000));  // a request on a's stream, at once
    all.took(r, 512);
    CHECK(all.bytes() == 4096);
    CHECK_FALSE(all.due(r, 10 + front_limits::age));
    CHECK(all.due(r, 11 + front_limits::age));  // its oldest block aged
    const std::uint64_t records = events.record_count();
    events.submit(a);
    all.cover(r, a);
    CHECK(events.record_count() == records + 1);  // one event for the whole front
    CHECK((r.front.empty() && all.open().empty() && all.bytes() == 0));
    CHECK(waiting.blocks() == 1);
    CHECK(waiting.drain(1, [](const free_block&) { FAIL("a's work is not done"); }) == 0);
    events.complete(a);
    std::vector<void*> given;
    waiting.drain(1, [&](const free_block& b) { given.push_back(b.pointer); });
    CHECK(given == std::vector<void*>{at(0x1000)});
}

TEST_CASE(
    "fronts: a front is crowded when full, by a large free, past the byte budget, or among too many open fronts of streams that call") {
    host_events events;
    waiting_blocks<host_events> waiting(events);
    fronts<host_events, front_record> all(events, waiting);
    CHECK(all.budget(0) == front_limits::min_budget);
    CHECK(all.budget(std::size_t{1} << 30) == (std::size_t{1} << 30) / front_limits::budget_share);
    CHECK(all.large(0) == front_limits::min_large);
    CHECK(all.large(std::size_t{1} << 34) == (std::size_t{1} << 34) / front_limits::large_share);
    std::vector<std::unique_ptr<front_record>> records;
    for (std::uint64_t i = 0; i <= front_limits::max_open; ++i) records.push_back(std::make_unique<front_record>(stream_key{i + 1, {}}));
    front_record& first = *records.front();
    for (std::size_t i = 0; i < front_limits::blocks_per_front; ++i) {
        all.reserve(first);
        CHECK(all.push(first, {at(0x1000 * (i + 1)), 256, 256}, 0));
        CHECK(all.crowded(first, 256, 0, 0) == (i + 1 == front_limits::blocks_per_front));
    }
    CHECK_FALSE(all.push(first, {at(0x100000), 256, 256}, 0));  // full: refused, nothing changed
    CHECK(all.bytes() == front_limits::blocks_per_front * 256);
    all.empty_into(first, [](const free_block&) {});
    // A free of large(reserved) bytes or more crowds its front at once; so do fronts past
    // budget(reserved).
    const std::size_t reserved = 0, large = all.large(reserved);  // the least bounds: 1 MiB, 4 MiB
    all.reserve(first);
    CHECK(all.push(first, {at(0x1000), large - 256, 256}, 0));
    CHECK_FALSE(all.crowded(first, large - 256, reserved, 0));
    CHECK(all.crowded(first, large, reserved, 0));
    while (all.bytes() <= all.budget(reserved)) {
        CHECK_FALSE(all.crowded(first, large - 256, reserved, 0));
        REQUIRE(all.push(first, {at(0x1000 * (first.front.size() + 1)), large - 256, 256}, 0));
    }
    CHECK(all.crowded(first, large - 256, reserved, 0));  // past the budget
    all.empty_into(first, [](const free_block&) {});
    CHECK(all.bytes() == 0);
    // max_open fronts of streams that called lately are fine; one more crowds them, unless quiet.
    for (std::size_t i = 0; i < records.size(); ++i) {
        front_record& r = *records[i];
        r.last_call = 1000;
        all.reserve(r);
        CHECK(all.push(r, {at(0x1000 * (i + 1)), 256, 256}, 1000));
        CHECK(all.crowded(r, 256, 0, 1000) == (i == front_limits::max_open));
    }
    records.front()->last_call = 0;  // went quiet: its front no longer counts
    CHECK_FALSE(all.crowded(*records.back(), 256, 0, 1000));
    for (auto& r : records) all.empty_into(*r, [](const free_block&) {});
    CHECK(all.open().empty());
}

TEST_CASE("passed_through: blocks from the upstream go back to it, and nothing else does") {
    test::instrumented<> upstream;
    passed_through<test::instrumented<>> passed;
    CHECK(passed.empty());
    void* a = passed.take(upstream, 4096, 256);
    REQUIRE(a != nullptr);
    CHECK(passed.holds(a));
    CHECK(upstream.live_bytes() == 4096);
    int other = 0;
    CHECK_FALSE(passed.give_back(upstream, {&other, 4, 4}));  // not passed through
    CHECK(passed.give_back(upstream, {a, 4096, 256}));
    CHECK_FALSE(passed.holds(a));
    CHECK(upstream.live_bytes() == 0);
    upstream.fail_after(0);
    CHECK(passed.take(upstream, 4096, 256) == nullptr);  // the upstream had none: no block, no error
    CHECK(passed.empty());
    CHECK(upstream.errors().empty());
}

TEST_CASE("fronts::idle_first asks a stream at once while it is found idle, and a busy one after 1, 3, 7 ... 63 covers") {
    host_events events;
    const stream_ref a = events.make_stream();
    waiting_blocks<host_events> waiting(events);
    fronts<host_events, front_record> all(events, waiting);
    front_record r{{1, {}}};
    CHECK(all.idle_first(r, a));
    CHECK(all.idle_first(r, a));
    CHECK(events.query_count() == 2);
    events.submit(a);
    std::vector<int> asked_at;  // the covers at which a was asked
    for (int cover = 1; cover <= 200; ++cover) {
        const std::uint64_t before = events.query_count();
        CHECK_FALSE(all.idle_first(r, a));
        if (events.query_count() != before) asked_at.push_back(cover);
    }
    CHECK(asked_at == std::vector<int>{1, 3, 7, 15, 31, 63, 127, 191});  // then every 64
    events.complete(a);
    int covers = 0;
    while (!all.idle_first(r, a)) ++covers;
    CHECK(covers < 64);
    CHECK(all.idle_first(r, a));  // idle again: asked at once
}

namespace {
// A pool of fixed blocks, each its own chunk, for walk_pending.
struct listed_pool {
    std::vector<block_view> blocks;
    template <class Visitor>
    void for_each_block(Visitor&& visit) const {
        for (const block_view& b : blocks) visit(chunk_view{b.address, b.bytes}, b);
    }
};
}  // namespace

TEST_CASE("walk_pending shows the owner's pending blocks as pending_free with their stream, and dresses each chunk") {
    listed_pool pool;
    for (std::uintptr_t address : {0x1000, 0x2000, 0x3000, 0x4000}) pool.blocks.push_back({address, 4096, 100, address != 0x4000});
    const std::vector<pending_block> pending{{0x2000, 7}, {0x3000, 0}, {0x4000, 9}};  // 0x4000 is free already
    std::vector<std::pair<chunk_view, block_view>> seen;
    walk_pending(
        pool, pending, [&](const chunk_view& c, const block_view& b) { seen.emplace_back(c, b); },
        [](const chunk_view& c) {
            chunk_view dressed = c;
            dressed.pool = 5;
            return dressed;
        });
    REQUIRE(seen.size() == 4);
    CHECK((seen[0].second.live && !seen[0].second.pending_free));
    CHECK((!seen[1].second.live && seen[1].second.pending_free && seen[1].second.stream == 7));
    CHECK((!seen[2].second.live && seen[2].second.pending_free && seen[2].second.stream == 0));
    CHECK((!seen[3].second.live && !seen[3].second.pending_free));
    for (const auto& [chunk, block] : seen) CHECK(chunk.pool == 5);
}

namespace {
// Graph pools as capture_door sees them: whether a capture may run, and what is gone.
struct fake_graphs {
    bool running_now = true;
    bool gone = false;
    std::vector<free_block> gone_blocks;
    [[nodiscard]] bool running() const noexcept { return running_now; }
    bool running_after(const stream_key*) noexcept { return running_now; }
    [[nodiscard]] bool graphs_gone() const noexcept { return gone; }
    template <class GiveBack>
    std::size_t release_gone(GiveBack&& give_back) {
        for (const free_block& b : std::exchange(gone_blocks, {})) give_back(b);
        gone = false;
        return 1;
    }
};
}  // namespace

TEST_CASE("capture_door asks about captures as told, and runs eager calls capture-safe, holding returns, while one may run") {
    host_events events;
    const stream_ref a = events.make_stream(), b = events.make_stream();
    capture_door<host_events, fake_graphs> door(events);
    CHECK(door.capture_of(a) == 0);
    const std::uint64_t capture = events.begin_capture(a, capture_mode::global);
    CHECK(door.capture_of(a) == capture);
    door.checks(capture_check::never);
    CHECK(door.capture_of(a) == 0);
    CHECK(door.capture_of(a, capture_check::every_call) == capture);
    door.checks(capture_check::announced);
    CHECK(door.capture_of(a) == 0);
    {
        const announced_capture announce;
        CHECK(door.capture_of(a) == capture);
    }
    // No graph pools yet: an eager call runs as it is, in the thread's own (global) mode.
    std::vector<free_block> pooled, given_back;
    const auto into_pool = [&](const free_block& block) { pooled.push_back(block); };
    const auto give_back = [&](const free_block& block) { given_back.push_back(block); };
    CHECK(door.graphs() == nullptr);
    CHECK_FALSE(door.running());
    CHECK_THROWS_AS(door.eager(
                        nullptr, [&] { events.unsafe_call("cudaMalloc"); }, into_pool, give_back),
                    capture_error);
    fake_graphs& graphs = door.graphs([] { return std::make_unique<fake_graphs>(); });
    CHECK(door.running());
    graphs.gone = true;
    graphs.gone_blocks.push_back({at(0x5000), 256, 256});
    const stream_key key{2, {}};
    const bool safe = door.eager(
        &key,
        [&] {
            door.hold({at(0x6000), 4096, 256});  // what the pool's gate does meanwhile
            events.unsafe_call("cudaMalloc");  // relaxed: growth is allowed
            CHECK(events.idle(b));
            return door.safe();
        },
        into_pool, give_back);
    CHECK(safe);
    CHECK_FALSE(door.safe());
    CHECK(pooled.size() == 1);  // the gone graph's block, released first
    CHECK(given_back.empty());  // held while the capture may run
    graphs.running_now = false;
    CHECK_FALSE(door.eager(
        &key, [&] { return door.safe(); }, into_pool, give_back));
    REQUIRE(given_back.size() == 1);  // the first call that found none running gave it back
    CHECK(given_back[0].pointer == at(0x6000));
    CHECK(door.take_held().empty());
    CHECK_FALSE(events.end_capture(a).valid);  // the thread's own growth above broke it
}
