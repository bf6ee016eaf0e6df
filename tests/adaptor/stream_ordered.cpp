// stream_ordered over best_fit with simulated streams (host_events): the test decides when work
// completes, so every ordering rule is checked on a CPU.
#include "../support/instrumented.hpp"
#include "../support/stream_order_oracle.hpp"

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

using namespace poolkit;
using test::instrumented;

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

using upstream = ref<instrumented<>>;
using ordered = stream_ordered<best_fit<upstream>, host_events>;

// One chunk per request, sized to it: lanes hold exactly what they were asked for.
constexpr best_fit_options exact{.initial_size = 0, .growth = growth_policy::as_needed(4 * KiB), .granularity = 256};

struct fixture {
    instrumented<> memory;
    host_events events;
    stream_ref a = events.make_stream();
    stream_ref b = events.make_stream();
    ordered pool{upstream{memory}, exact, events};

    ~fixture() {
        pool.release();
        CHECK(memory.errors().empty());
    }
};

}  // namespace

static_assert(stream_resource<ordered>);
static_assert(!has_property<ordered, host_accessible> || has_property<instrumented<>, host_accessible>);
// Over a real strategy, what the header checks over its archetype pool.
static_assert(stream_resource_with<stream_ordered<best_fit<detail::resource_archetype<host_accessible>>, completed_events>,
                                   host_accessible>);
static_assert(has_release<stream_ordered<best_fit<detail::resource_archetype<>>, completed_events>> &&
              has_check_invariants<stream_ordered<best_fit<detail::resource_archetype<>>, completed_events>> &&
              has_owns<stream_ordered<best_fit<detail::resource_archetype<>>, completed_events>> &&
              walkable<stream_ordered<best_fit<detail::resource_archetype<>>, completed_events>>);

TEST_CASE("a block freed on a stream is reused on that stream at once, with no event") {
    fixture f;
    void* first = f.pool.allocate_async(100 * KiB, 256, f.a);
    f.events.submit(f.a);  // a kernel still uses it
    f.pool.deallocate_async(first, 100 * KiB, 256, f.a);
    void* second = f.pool.allocate_async(100 * KiB, 256, f.a);
    CHECK(second == first);
    CHECK(f.events.waits().empty());
    CHECK(f.pool.deferred_blocks() == 0);
    f.pool.deallocate_async(second, 100 * KiB, 256, f.a);
    f.pool.check_invariants();
}

TEST_CASE("another stream reuses a freed block only behind an event its lane records when asked") {
    fixture f;
    void* first_on_b = f.pool.allocate_async(4 * KiB, 256, f.b);
    void* block = f.pool.allocate_async(1 * MiB, 256, f.a);
    void* other_on_a = f.pool.allocate_async(8 * KiB, 256, f.a);
    const auto work_on_a = f.events.submit(f.a);
    f.pool.deallocate_async(block, 1 * MiB, 256, f.a);  // no event: most frees are reused on their stream
    CHECK(f.events.wait_count() == 0);

    // No event covers a's free yet: b does not take the block, asks a's lane for an event, grows.
    void* grown = f.pool.allocate_async(1 * MiB, 256, f.b);
    CHECK(grown != block);
    CHECK(f.memory.allocations() == 4);
    CHECK(f.events.synchronizations() == 0);

    const auto more_on_a = f.events.submit(f.a);
    f.pool.deallocate_async(other_on_a, 8 * KiB, 256, f.a);  // a's next call records the event
    void* taken = f.pool.allocate_async(1 * MiB, 256, f.b);  // b's lane has no free 1 MiB: a's block
    CHECK(taken == block);
    REQUIRE(f.events.waits().size() == 1);
    CHECK(f.events.waits()[0].waiter == f.b);
    CHECK(f.events.waits()[0].event.position >= more_on_a);
    CHECK(f.memory.allocations() == 4);  // no growth for `taken`

    // b's work on the block cannot finish before a's work on it did.
    f.events.submit(f.b);
    f.events.complete(f.b);
    CHECK(f.events.completed(f.a) >= work_on_a);
    CHECK(f.events.synchronizations() == 0);  // and the host never blocked
    f.pool.deallocate_async(taken, 1 * MiB, 256, f.b);  // a's block freed on b: parked on b
    CHECK(f.pool.parked_blocks() == 1);
    CHECK(f.pool.deferred_blocks() == 0);
    f.pool.deallocate_async(grown, 1 * MiB, 256, f.b);
    f.pool.deallocate_async(first_on_b, 4 * KiB, 256, f.b);
    f.pool.check_invariants();
}

TEST_CASE("frees no event covers are taken after settle_after misses skipped them, behind one wait for the device") {
    fixture f;
    f.pool.growth_slack(0);  // misses ask other lanes first, however little they hold
    using pool_type = decltype(f.pool);
    void* block = f.pool.allocate_async(1 * MiB, 256, f.a);
    const auto work_on_a = f.events.submit(f.a);
    f.pool.deallocate_async(block, 1 * MiB, 256, f.a);  // and a makes no call again
    std::vector<void*> on_b;
    for (std::size_t i = 1; i < pool_type::settle_after; ++i) on_b.push_back(f.pool.allocate_async(1 * MiB, 256, f.b));
    CHECK(std::find(on_b.begin(), on_b.end(), block) == on_b.end());
    CHECK(f.events.synchronizations() == 0);
    void* taken = f.pool.allocate_async(1 * MiB, 256, f.b);
    CHECK(taken == block);
    CHECK(f.events.synchronizations() == 1);
    CHECK(f.events.completed(f.a) >= work_on_a);
    on_b.push_back(taken);
    for (void* p : on_b) f.pool.deallocate_async(p, 1 * MiB, 256, f.b);
    f.pool.check_invariants();
}

TEST_CASE("a destroyed stream is never touched again: its blocks serve others after a wait for the device") {
    fixture f;
    f.pool.growth_slack(0);  // misses ask other lanes first, however little they hold
    using pool_type = decltype(f.pool);
    const stream_ref gone = f.events.make_stream();
    void* on_b = f.pool.allocate_async(4 * KiB, 256, f.b);
    void* block = f.pool.allocate_async(1 * MiB, 256, gone);
    void* second = f.pool.allocate_async(3 * MiB, 256, gone);
    const auto last_work = f.events.submit(gone);
    f.pool.deallocate_async(block, 1 * MiB, 256, gone);
    f.pool.deallocate_async(second, 3 * MiB, 256, gone);
    f.events.destroy_stream(gone);  // its work is still pending; any use of it now throws

    // Misses ask gone's lane for an event it will never record; then the host waits for the device.
    std::vector<void*> on_a;
    void* taken = nullptr;
    for (std::size_t i = 0; i < pool_type::settle_after && taken != block; ++i) {
        CHECK_NOTHROW(taken = f.pool.allocate_async(1 * MiB, 256, f.a));
        on_a.push_back(taken);
    }
    CHECK(taken == block);
    CHECK(f.events.synchronizations() == 1);
    CHECK(f.events.completed(gone) >= last_work);

    void* plain = nullptr;
    CHECK_NOTHROW(plain = f.pool.allocate(3 * MiB));  // settled: no wait
    CHECK(plain == second);
    CHECK(f.events.synchronizations() == 1);
    f.pool.deallocate(plain, 3 * MiB);
    for (void* p : on_a) f.pool.deallocate_async(p, 1 * MiB, 256, f.a);
    f.pool.deallocate_async(on_b, 4 * KiB, 256, f.b);
    CHECK_NOTHROW(f.pool.release());
    f.pool.check_invariants();
}

TEST_CASE("exhaustion after a stream was destroyed releases its lane without touching it") {
    fixture f;
    f.memory.limit(8 * MiB);
    const stream_ref gone = f.events.make_stream();
    void* on_b = f.pool.allocate_async(1 * MiB, 256, f.b);
    void* block = f.pool.allocate_async(6 * MiB, 256, gone);
    f.events.submit(gone);
    f.pool.deallocate_async(block, 6 * MiB, 256, gone);
    f.events.destroy_stream(gone);
    void* big = nullptr;
    CHECK_NOTHROW(big = f.pool.allocate_async(7 * MiB, 256, f.a));  // needs gone's chunk back
    CHECK(f.events.completed(gone) == f.events.issued(gone));
    f.pool.deallocate_async(big, 7 * MiB, 256, f.a);
    f.pool.deallocate_async(on_b, 1 * MiB, 256, f.b);
}

TEST_CASE("record_use delays reuse until the other stream's work is done") {
    fixture f;
    void* block = f.pool.allocate_async(64 * KiB, 256, f.a);
    f.pool.record_use(block, f.b);
    f.events.submit(f.b);  // b reads the block
    f.pool.deallocate_async(block, 64 * KiB, 256, f.a);
    CHECK(f.pool.deferred_blocks() == 1);

    void* meanwhile = f.pool.allocate_async(64 * KiB, 256, f.a);
    CHECK(meanwhile != block);  // b may still be reading it
    f.events.complete(f.b);
    void* after = f.pool.allocate_async(64 * KiB, 256, f.a);
    CHECK(after == block);
    CHECK(f.pool.deferred_blocks() == 0);
    f.pool.deallocate_async(meanwhile, 64 * KiB, 256, f.a);
    f.pool.deallocate_async(after, 64 * KiB, 256, f.a);
}

TEST_CASE("forget_stream drops a stream from record_use: the block's free touches it no more") {
    fixture f;
    stream_ref user = f.events.make_stream();
    void* block = f.pool.allocate_async(64 * KiB, 256, f.a);
    f.pool.record_use(block, user);
    f.events.submit(user);  // work on `user` reads the block
    f.pool.forget_stream(user);
    CHECK(f.events.completed(user) == 1);  // forgetting waited for it
    f.events.destroy_stream(user);
    f.pool.deallocate_async(block, 64 * KiB, 256, f.a);  // records nothing on `user` (it would throw)
    CHECK(f.pool.deferred_blocks() == 0);
    void* again = f.pool.allocate_async(64 * KiB, 256, f.a);
    CHECK(again == block);
    f.pool.deallocate_async(again, 64 * KiB, 256, f.a);
    f.pool.check_invariants();
}

TEST_CASE("a block freed on another stream is reused there at once; its own lane waits for that stream") {
    fixture f;
    void* block = f.pool.allocate_async(64 * KiB, 256, f.a);
    f.events.submit(f.b);  // b uses the block
    f.pool.deallocate_async(block, 64 * KiB, 256, f.b);
    CHECK(f.pool.parked_blocks() == 1);
    CHECK(f.pool.deferred_blocks() == 0);
    f.pool.check_invariants();
    void* other = f.pool.allocate_async(64 * KiB, 256, f.a);
    CHECK(other != block);  // b may still be using it
    void* smaller = f.pool.allocate_async(32 * KiB, 256, f.b);
    CHECK(smaller != block);  // parked blocks serve their exact size only
    void* again = f.pool.allocate_async(64 * KiB, 256, f.b);
    CHECK(again == block);  // b's own order covers it
    CHECK(f.events.waits().empty());
    CHECK(f.events.synchronizations() == 0);
    CHECK(f.pool.parked_blocks() == 0);
    CHECK(f.pool.owns(again));
    f.pool.deallocate_async(again, 64 * KiB, 256, f.a);  // its own stream: back in a's lane
    CHECK(f.pool.parked_blocks() == 0);
    void* reused = f.pool.allocate_async(64 * KiB, 256, f.a);
    CHECK(reused == block);
    f.pool.deallocate_async(other, 64 * KiB, 256, f.a);
    f.pool.deallocate_async(reused, 64 * KiB, 256, f.a);
    f.pool.deallocate_async(smaller, 32 * KiB, 256, f.b);
    f.pool.check_invariants();
}

TEST_CASE("a request takes a block parked on its stream before a free block of its own pool") {
    fixture f;
    void* own = f.pool.allocate_async(64 * KiB, 256, f.b);
    f.pool.deallocate_async(own, 64 * KiB, 256, f.b);  // b's pool now holds a fitting free block
    void* foreign = f.pool.allocate_async(64 * KiB, 256, f.a);
    f.events.submit(f.b);
    f.pool.deallocate_async(foreign, 64 * KiB, 256, f.b);  // parked on b
    REQUIRE(f.pool.parked_blocks() == 1);
    void* taken = f.pool.allocate_async(64 * KiB, 256, f.b);
    CHECK(taken == foreign);  // reused where it was freed: it need not go home behind an event
    CHECK(f.pool.parked_blocks() == 0);
    void* next = f.pool.allocate_async(64 * KiB, 256, f.b);
    CHECK(next == own);  // then b's own pool
    CHECK(f.events.waits().empty());
    f.pool.deallocate_async(taken, 64 * KiB, 256, f.a);
    f.pool.deallocate_async(next, 64 * KiB, 256, f.b);
    f.pool.check_invariants();
}

TEST_CASE("past its bound a lane's parked blocks go back to their lanes behind one event on the freeing stream") {
    fixture f;
    using pool_type = decltype(f.pool);
    std::vector<void*> blocks;
    for (std::size_t i = 0; i <= pool_type::max_parked_blocks; ++i) blocks.push_back(f.pool.allocate_async(4 * KiB, 256, f.a));
    const auto work_on_b = f.events.submit(f.b);
    for (void* block : blocks) f.pool.deallocate_async(block, 4 * KiB, 256, f.b);
    CHECK(f.pool.parked_blocks() == 0);
    CHECK(f.pool.deferred_blocks() == blocks.size());
    f.pool.check_invariants();
    void* meanwhile = f.pool.allocate_async(4 * KiB, 256, f.a);
    CHECK(std::find(blocks.begin(), blocks.end(), meanwhile) == blocks.end());  // b's work is pending
    f.events.complete(f.b);
    CHECK(f.events.completed(f.b) >= work_on_b);
    void* reused = f.pool.allocate_async(4 * KiB, 256, f.a);
    CHECK(std::find(blocks.begin(), blocks.end(), reused) != blocks.end());
    CHECK(f.pool.deferred_blocks() == 0);
    f.pool.deallocate_async(meanwhile, 4 * KiB, 256, f.a);
    f.pool.deallocate_async(reused, 4 * KiB, 256, f.a);
    f.pool.check_invariants();
}

TEST_CASE("blocks parked over many lanes stay under max_parked_bytes in all") {
    fixture f;
    using pool_type = decltype(f.pool);
    constexpr std::size_t size = 64 * MiB;
    constexpr std::size_t lanes = pool_type::max_parked_bytes / size + 4;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < lanes; ++i) blocks.push_back(f.pool.allocate_async(size, 256, f.a));
    // Each block freed on a stream of its own: one block parked per lane, never past the bound.
    for (void* block : blocks) {
        f.pool.deallocate_async(block, size, 256, f.events.make_stream());
        CHECK(f.pool.parked_blocks() * size <= pool_type::max_parked_bytes);
        f.pool.check_invariants();
    }
    CHECK(f.pool.parked_blocks() + f.pool.deferred_blocks() == lanes);
    CHECK(f.pool.deferred_blocks() >= 4);
}

TEST_CASE("blocks a lane took from another and freed on its own stream stay parked there, past max_parked_bytes") {
    fixture f;
    using pool_type = decltype(f.pool);
    constexpr std::size_t size = 64 * MiB;
    constexpr std::size_t count = pool_type::max_parked_bytes / size + 2;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < count; ++i) blocks.push_back(f.pool.allocate_async(size, 256, f.a));
    f.pool.growth_slack(0);  // b's misses take from a rather than grow
    for (void* block : blocks) f.pool.deallocate_async(block, size, 256, f.a);
    f.pool.forget_stream(f.a);  // idle: b takes a's blocks with no wait
    for (void*& block : blocks) block = f.pool.allocate_async(size, 256, f.b);
    CHECK(f.pool.pool_of(f.b)->reserved_bytes() == 0);
    for (void* block : blocks) f.pool.deallocate_async(block, size, 256, f.b);
    CHECK(f.pool.parked_blocks() == count);  // b's working set, not a free on a third stream
    CHECK(f.pool.deferred_blocks() == 0);
    f.pool.check_invariants();
    void* again = f.pool.allocate_async(size, 256, f.b);
    CHECK(std::find(blocks.begin(), blocks.end(), again) != blocks.end());
    CHECK(f.pool.parked_blocks() == count - 1);
    f.pool.deallocate_async(again, size, 256, f.b);
    f.pool.check_invariants();
}

TEST_CASE("a miss grows its own pool first while the lanes hold little beside what is out of them") {
    for (const std::size_t kept : {1, 2}) {
        CAPTURE(kept);
        fixture f;
        CHECK(f.pool.growth_slack() == decltype(f.pool)::default_growth_slack);
        constexpr std::size_t size = 64 * MiB;
        std::vector<void*> blocks;
        for (int i = 0; i < 3; ++i) blocks.push_back(f.pool.allocate_async(size, 256, f.a));
        for (std::size_t i = kept; i < blocks.size(); ++i) f.pool.deallocate_async(blocks[i], size, 256, f.a);
        f.pool.forget_stream(f.a);
        // 192 MiB reserved: with 64 MiB out b takes a free block of a; with 128 MiB out it grows.
        const bool grows = 3 * size < f.pool.growth_slack() * kept * size;
        void* taken = f.pool.allocate_async(size, 256, f.b);
        CHECK(f.pool.pool_of(f.b)->reserved_bytes() == (grows ? size : 0));
        f.pool.check_invariants();
        f.pool.deallocate_async(taken, size, 256, f.b);
        for (std::size_t i = 0; i < kept; ++i) f.pool.deallocate_async(blocks[i], size, 256, f.a);
    }
}

TEST_CASE("a lane that failed a small request still serves a large one: caching_pool keeps sizes apart") {
    instrumented<simulated_resource> memory;
    host_events events;
    using simulated_upstream = ref<instrumented<simulated_resource>>;
    stream_ordered<caching_pool<simulated_upstream>, host_events> pool{simulated_upstream{memory}};
    const stream_ref a = events.make_stream(), b = events.make_stream(), c = events.make_stream();
    // Lane a holds a large chunk, wholly free and idle, and no small chunk.
    void* large = pool.allocate_async(4 * MiB, 256, a);
    pool.deallocate_async(large, 4 * MiB, 256, a);
    pool.forget_stream(a);
    const std::size_t reserved = pool.reserved_bytes();
    // Lane c's small request fails in a's (small) pool; c grows a small chunk of its own.
    void* small = pool.allocate_async(256 * KiB, 256, c);
    CHECK(pool.pool_of(c)->reserved_bytes() > 0);
    // Lane b's large request is served from a's large chunk: nothing grows.
    void* taken = pool.allocate_async(4 * MiB, 256, b);
    CHECK(pool.pool_of(b)->reserved_bytes() == 0);
    CHECK(pool.reserved_bytes() == reserved + pool.pool_of(c)->reserved_bytes());
    pool.check_invariants();
    pool.deallocate_async(taken, 4 * MiB, 256, b);
    pool.deallocate_async(small, 256 * KiB, 256, c);
    pool.release();
    CHECK(memory.errors().empty());
}

TEST_CASE("parked blocks of a destroyed stream go back at exhaustion, after the whole device") {
    fixture f;
    f.memory.limit(8 * MiB);
    const stream_ref gone = f.events.make_stream();
    void* block = f.pool.allocate_async(6 * MiB, 256, f.a);
    f.events.submit(gone);
    f.pool.deallocate_async(block, 6 * MiB, 256, gone);  // parked on `gone`
    f.events.destroy_stream(gone);                        // with its work pending
    CHECK(f.pool.parked_blocks() == 1);
    void* big = nullptr;
    CHECK_NOTHROW(big = f.pool.allocate_async(7 * MiB, 256, f.b));  // needs the parked block's chunk
    CHECK(f.pool.parked_blocks() == 0);
    CHECK(f.events.completed(gone) == f.events.issued(gone));
    f.pool.deallocate_async(big, 7 * MiB, 256, f.b);
}

TEST_CASE("memory freed on a stream that went idle serves another stream: nothing is stranded") {
    fixture f;
    f.memory.limit(8 * MiB);
    void* big = f.pool.allocate_async(8 * MiB, 256, f.a);
    f.pool.deallocate_async(big, 8 * MiB, 256, f.a);
    // a never allocates again; b asks for pieces of what a holds.
    void* piece = f.pool.allocate_async(3 * MiB, 256, f.b);
    void* another = f.pool.allocate_async(3 * MiB, 256, f.b);
    CHECK(f.memory.live_bytes() <= 8 * MiB);  // a's chunk went back upstream, after a's work
    CHECK(f.events.completed(f.a) == f.events.issued(f.a));
    f.pool.deallocate_async(piece, 3 * MiB, 256, f.b);
    f.pool.deallocate_async(another, 3 * MiB, 256, f.b);
}

TEST_CASE("when the upstream is exhausted every lane releases its free chunks and the request is retried") {
    fixture f;
    f.memory.limit(8 * MiB);
    void* on_a = f.pool.allocate_async(6 * MiB, 256, f.a);
    f.events.submit(f.a);
    f.pool.deallocate_async(on_a, 6 * MiB, 256, f.a);
    void* on_b = f.pool.allocate_async(8 * MiB, 256, f.b);  // 6 MiB cached on a cannot hold it
    CHECK(on_b != nullptr);
    CHECK(f.memory.live_bytes() == 8 * MiB);
    CHECK(f.events.synchronizations() >= 1);  // a's chunk went back only after a's work
    CHECK(f.events.completed(f.a) == f.events.issued(f.a));
    try {
        static_cast<void>(f.pool.allocate_async(1 * MiB, 256, f.a));
        FAIL("allocate past the upstream's limit succeeded");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().reserved_bytes == 8 * MiB);
        CHECK(error.figures().live_bytes == 8 * MiB);
        CHECK(std::string(error.what()).find("stream_ordered") != std::string::npos);
    }
    f.pool.deallocate_async(on_b, 8 * MiB, 256, f.b);
}

TEST_CASE("plain allocate takes a stream's block only after the host waited for that stream") {
    fixture f;
    void* block = f.pool.allocate_async(1 * MiB, 256, f.a);
    void* other = f.pool.allocate_async(8 * KiB, 256, f.a);
    f.events.submit(f.a);
    f.pool.deallocate_async(block, 1 * MiB, 256, f.a);
    void* first = f.pool.allocate(1 * MiB);  // no event covers a's free yet: the plain lane grows
    CHECK(first != block);
    f.pool.deallocate_async(other, 8 * KiB, 256, f.a);  // a's next call records the event asked for
    f.pool.deallocate(first, 1 * MiB);
    void* in_use = f.pool.allocate(1 * MiB);  // the plain lane's own block again
    CHECK(in_use == first);
    void* plain = f.pool.allocate(1 * MiB);
    CHECK(plain == block);
    CHECK(f.events.synchronizations() == 1);
    CHECK(f.events.completed(f.a) == f.events.issued(f.a));
    f.pool.deallocate(in_use, 1 * MiB);
    f.pool.deallocate(plain, 1 * MiB);  // back to a's lane, idle

    // Blocks of the plain lane are idle: a stream takes them without waiting on anything.
    void* idle = f.pool.allocate(3 * MiB);  // grows the plain lane
    f.pool.deallocate(idle, 3 * MiB);
    const auto waits = f.events.waits().size();
    void* again = f.pool.allocate_async(3 * MiB, 256, f.b);
    CHECK(again == idle);
    CHECK(f.events.waits().size() == waits);
    f.pool.deallocate_async(again, 3 * MiB, 256, f.b);
}

TEST_CASE("a forgotten stream's lane is idle: others take from it without an event") {
    fixture f;
    void* block = f.pool.allocate_async(1 * MiB, 256, f.a);
    f.events.submit(f.a);
    f.pool.deallocate_async(block, 1 * MiB, 256, f.a);
    f.pool.forget_stream(f.a);
    CHECK(f.events.completed(f.a) == f.events.issued(f.a));
    void* taken = f.pool.allocate_async(1 * MiB, 256, f.b);
    CHECK(taken == block);
    CHECK(f.events.waits().empty());
    f.pool.deallocate_async(taken, 1 * MiB, 256, f.b);
}

TEST_CASE("a forgotten stream that frees again is ordered again: its new frees are not idle") {
    fixture f;
    void* kept = f.pool.allocate_async(1 * MiB, 256, f.a);
    void* on_b = f.pool.allocate_async(4 * KiB, 256, f.b);
    f.pool.forget_stream(f.a);
    const auto work_on_a = f.events.submit(f.a);  // a is used again without allocating
    f.pool.deallocate_async(kept, 1 * MiB, 256, f.a);
    void* taken = f.pool.allocate_async(1 * MiB, 256, f.b);
    CHECK(taken != kept);  // no event covers a's free: b may not take it as idle
    f.events.submit(f.b);
    f.events.complete(f.b);
    CHECK(f.events.completed(f.a) < work_on_a);
    f.pool.deallocate_async(taken, 1 * MiB, 256, f.b);
    f.pool.deallocate_async(on_b, 4 * KiB, 256, f.b);
    f.pool.check_invariants();
}

TEST_CASE("the wait for the whole device after skipped misses also returns parked blocks") {
    fixture f;
    f.pool.growth_slack(0);  // misses ask other lanes first, however little they hold
    using pool_type = decltype(f.pool);
    const stream_ref gone = f.events.make_stream();
    void* block = f.pool.allocate_async(64 * KiB, 256, f.a);
    f.events.submit(gone);
    f.pool.deallocate_async(block, 64 * KiB, 256, gone);  // parked on `gone`
    void* on_gone = f.pool.allocate_async(8 * KiB, 256, gone);
    f.pool.deallocate_async(on_gone, 8 * KiB, 256, gone);  // uncovered
    f.events.destroy_stream(gone);
    CHECK(f.pool.parked_blocks() == 1);
    std::vector<void*> on_b;
    for (std::size_t i = 0; i < pool_type::settle_after; ++i) on_b.push_back(f.pool.allocate_async(8 * KiB, 256, f.b));
    CHECK(f.events.synchronizations() == 1);
    CHECK(f.pool.parked_blocks() == 0);
    for (void* p : on_b) f.pool.deallocate_async(p, 8 * KiB, 256, f.b);
    f.pool.check_invariants();
}

namespace {
// Handles 1 and 2 name one stream, as 0 and cudaStreamLegacy do with CUDA.
struct aliased_events : completed_events {
    [[nodiscard]] static std::uint64_t identity(stream_ref stream) noexcept {
        const auto id = stream_id(stream);
        return id == 2 ? 1 : id;
    }
};
stream_ref handle(std::uintptr_t value) { return stream_ref{reinterpret_cast<stream_handle>(value)}; }
}  // namespace

TEST_CASE("a free on another handle of the lane's own stream goes back to the lane, not parked") {
    instrumented<> memory;
    stream_ordered<best_fit<upstream>, aliased_events> pool{upstream{memory}, exact};
    void* on_other = pool.allocate_async(4 * KiB, 256, handle(3));  // two lanes from here on
    void* block = pool.allocate_async(64 * KiB, 256, handle(1));
    pool.deallocate_async(block, 64 * KiB, 256, handle(2));
    CHECK(pool.parked_blocks() == 0);
    CHECK(pool.deferred_blocks() == 0);
    CHECK(pool.lanes() == 2);
    pool.check_invariants();
    void* again = pool.allocate_async(64 * KiB, 256, handle(2));
    CHECK(again == block);
    pool.deallocate_async(again, 64 * KiB, 256, handle(1));
    pool.deallocate_async(on_other, 4 * KiB, 256, handle(3));
    pool.release();
    CHECK(memory.live_bytes() == 0);
}

TEST_CASE("release returns every wholly free chunk once all work is done") {
    fixture f;
    std::vector<void*> blocks;
    for (stream_ref s : {f.a, f.b}) blocks.push_back(f.pool.allocate_async(2 * MiB, 256, s));
    f.pool.deallocate_async(blocks[0], 2 * MiB, 256, f.a);
    f.pool.deallocate_async(blocks[1], 2 * MiB, 256, f.a);  // b's block, freed on a: parked on a
    CHECK(f.pool.parked_blocks() == 1);
    f.pool.release();
    CHECK(f.pool.parked_blocks() == 0);
    CHECK(f.memory.live_bytes() == 0);
}

// Random traffic on up to eight streams, some destroyed (with work pending) and replaced as servers
// do, through the stream-order oracle of support/stream_order_oracle.hpp: no block is handed to a
// stream before every earlier use of its bytes is ordered before that stream's work, and no
// destroyed stream is touched (host_events throws).
TEST_CASE("random multi-stream traffic never hands out a block before its earlier users are done") {
    instrumented<simulated_resource> memory;
    host_events events;
    using simulated_upstream = ref<instrumented<simulated_resource>>;
    const best_fit_options options{.initial_size = 1 * MiB, .growth = growth_policy::as_needed(256 * KiB)};
    stream_ordered<best_fit<simulated_upstream>, host_events> pool{simulated_upstream{memory}, options, events};
    const test::oracle_report report = test::stream_order_oracle(pool, events, {.seed = 11, .streams = 8, .steps = 12000, .largest = 2 * MiB});
    MESSAGE(report.describe());
    CHECK(report.violations == 0);
    CHECK(report.overlaps == 0);
    CHECK(report.checked > 100);
    pool.release();
    CHECK(memory.live_bytes() == 0);
    CHECK(memory.errors().empty());
}

TEST_CASE("blocks of a single lane are found again once a second stream arrives") {
    fixture f;
    std::vector<void*> on_a;
    for (int i = 0; i < 6; ++i) on_a.push_back(f.pool.allocate_async((i + 1) * 64 * KiB, 256, f.a));
    f.pool.check_invariants();
    // b has no lane yet: it gets one to park the block in, and tracking starts.
    f.pool.deallocate_async(on_a[0], 64 * KiB, 256, f.b);
    CHECK(f.pool.lanes() == 2);
    CHECK(f.pool.parked_blocks() == 1);
    CHECK(f.pool.live_blocks() == 5);
    CHECK(f.pool.owns(on_a[1]));
    CHECK_FALSE(f.pool.owns(on_a[0]));  // parked, not live
    f.pool.check_invariants();

    void* on_b = f.pool.allocate_async(32 * KiB, 256, f.b);
    CHECK(f.pool.lanes() == 2);
    f.pool.check_invariants();
    CHECK(f.pool.owns(on_a[3]));
    CHECK(f.pool.live_blocks() == 6);
    f.pool.record_use(on_a[2], f.b);
    f.events.submit(f.b);
    for (int i = 1; i < 6; ++i) f.pool.deallocate_async(on_a[i], (i + 1) * 64 * KiB, 256, f.a);
    CHECK(f.pool.deferred_blocks() == 1);  // on_a[2] behind b's work
    CHECK(f.pool.parked_blocks() == 1);    // on_a[0], until b asks for 64 KiB or the pool is released
    f.pool.deallocate_async(on_b, 32 * KiB, 256, f.b);
    f.events.complete_all();
    f.pool.check_invariants();
    CHECK(f.pool.live_blocks() == 0);
}

TEST_CASE("best_fit::try_allocate_cached serves only from free blocks it holds") {
    instrumented<> memory;
    best_fit<upstream> pool{upstream{memory}, exact};
    CHECK(pool.try_allocate_cached(1 * KiB) == nullptr);  // nothing held: no growth
    CHECK(memory.allocations() == 0);
    void* block = pool.allocate(64 * KiB);
    pool.deallocate(block, 64 * KiB);
    void* cached = pool.try_allocate_cached(16 * KiB, 4096);
    const auto offset = static_cast<char*>(cached) - static_cast<char*>(block);
    CHECK(is_aligned(cached, 4096));
    CHECK((offset >= 0 && offset + 16 * KiB <= 64 * KiB));  // inside the freed block
    CHECK(pool.try_allocate_cached(64 * KiB) == nullptr);  // less than 64 KiB is left free
    CHECK(pool.try_allocate_cached(0) == nullptr);
    CHECK(pool.try_allocate_cached(16, 3) == nullptr);
    CHECK(memory.allocations() == 1);
    pool.deallocate(cached, 16 * KiB, 4096);
    pool.check_invariants();
}
