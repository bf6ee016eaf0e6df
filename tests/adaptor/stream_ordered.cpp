// stream_ordered over best_fit with simulated streams (host_events): the test decides when work
// completes, so every ordering rule of the shared pool, the fronts and the waiting blocks is
// checked on a CPU.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"
#include "../support/stream_order_oracle.hpp"

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/detail/archetype.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/core/walk.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

using namespace poolkit;
using test::instrumented;

namespace {

using poolkit::test::KiB;
using poolkit::test::MiB;

// host_events that also counts each record or wait on a destroyed stream: host_events throws
// then, but the adaptor's noexcept paths would swallow that. Copies share the count.
class watched_events : public host_events {
public:
    event_type record(stream_ref stream) {
        ++*recorded_;
        return watched([&] { return host_events::record(stream); });
    }
    void wait(stream_ref waiter, const event_type& event) {
        watched([&] { host_events::wait(waiter, event); });
    }
    [[nodiscard]] bool idle(stream_ref stream) {
        ++*asked_idle_;
        return watched([&] { return host_events::idle(stream); });
    }
    [[nodiscard]] std::size_t touched() const noexcept { return *touched_; }
    [[nodiscard]] std::size_t recorded() const noexcept { return *recorded_; }
    [[nodiscard]] std::size_t asked_idle() const noexcept { return *asked_idle_; }

private:
    template <class Call>
    std::invoke_result_t<Call> watched(Call&& call) {
        try {
            return call();
        } catch (const std::logic_error&) {
            ++*touched_;
            throw;
        }
    }
    std::shared_ptr<std::size_t> touched_ = std::make_shared<std::size_t>(0);
    std::shared_ptr<std::size_t> recorded_ = std::make_shared<std::size_t>(0);
    std::shared_ptr<std::size_t> asked_idle_ = std::make_shared<std::size_t>(0);
};

using upstream = ref<instrumented<>>;
using ordered = stream_ordered<upstream, lanes<best_fit>, watched_events>;

// One chunk per request, sized to it: which block serves a request is plain to see.
constexpr best_fit_options exact{.initial_size = 0, .growth = growth_policy::as_needed(4 * KiB), .granularity = 256};

struct fixture {
    instrumented<> memory;
    watched_events events;
    stream_ref a = events.make_stream();
    stream_ref b = events.make_stream();
    ordered pool{upstream{memory}, exact, events};
    std::vector<std::pair<void*, stream_ref>> known;

    void* get(std::size_t bytes, stream_ref s) { return pool.allocate_async(bytes, 256, s); }
    void put(void* p, std::size_t bytes, stream_ref s) { pool.deallocate_async(p, bytes, 256, s); }
    // A 256-byte block on `s`, kept to the end: the pool knows `s` (two known: no home).
    void know(stream_ref s) { known.emplace_back(get(256, s), s); }
    // a declared lasting, both streams known.
    void lasting_a() {
        events.declare_lasting(a);
        know(b);
        know(a);
    }
    // A large block allocated and freed on `s`; returns where it was.
    void* freed_large(stream_ref s) {
        void* block = get(ordered::min_large_free, s);
        put(block, ordered::min_large_free, s);
        return block;
    }

    ~fixture() {
        for (const auto& [p, s] : known) put(p, 256, s);
        if (std::uncaught_exceptions() == 0) pool.check_invariants();
        CHECK(pool.live_blocks() == 0);
        pool.release();
        CHECK(pool.pending_bytes() == 0);
        CHECK(memory.live_bytes() == 0);
        CHECK(events.touched() == 0);
        CHECK(memory.errors().empty());
    }
};

}  // namespace

static_assert(stream_resource<ordered>);
static_assert(!has_property<ordered, host_accessible> || has_property<instrumented<>, host_accessible>);
// Over a real strategy, what the header checks over its archetype pool.
static_assert(
    stream_resource_with<stream_ordered<detail::resource_archetype<host_accessible>, lanes<best_fit>, completed_events>, host_accessible>);
static_assert(has_release<stream_ordered<detail::resource_archetype<>, lanes<best_fit>, completed_events>> &&
              has_check_invariants<stream_ordered<detail::resource_archetype<>, lanes<best_fit>, completed_events>> &&
              has_owns<stream_ordered<detail::resource_archetype<>, lanes<best_fit>, completed_events>> &&
              walkable<stream_ordered<detail::resource_archetype<>, lanes<best_fit>, completed_events>>);

TEST_CASE("a stream used alone frees straight into the pool and reuses the memory at once, any size, with no event") {
    fixture f;
    void* first = f.get(100 * KiB, f.a);
    f.events.submit(f.a);  // a kernel still uses it
    f.put(first, 100 * KiB, f.a);
    CHECK(f.pool.streams() == 1);
    CHECK(f.pool.pending_bytes() == 0);  // no front, nothing waiting
    void* second = f.get(100 * KiB, f.a);
    CHECK(second == first);
    f.put(second, 100 * KiB, f.a);
    void* part = f.get(40 * KiB, f.a);  // the pool's free block, not an exact match
    CHECK(part == first);
    CHECK(f.events.wait_count() == 0);
    CHECK(f.events.synchronizations() == 0);
    CHECK(f.events.completed(f.a) == 0);
    f.put(part, 40 * KiB, f.a);
}

TEST_CASE("with several streams a free goes to its stream's front, a request there of its exact size and alignment takes it at once") {
    fixture f;
    f.know(f.b);
    f.know(f.a);
    void* first = f.get(100 * KiB, f.a);
    f.events.submit(f.a);
    f.put(first, 100 * KiB, f.a);
    CHECK(f.pool.front_blocks_held() == 1);
    CHECK(f.pool.pending_bytes() == 100 * KiB);
    void* smaller = f.get(40 * KiB, f.a);
    void* aligned = f.pool.allocate_async(100 * KiB, 4096, f.a);
    CHECK(smaller != first);
    CHECK(aligned != first);
    void* second = f.get(100 * KiB, f.a);
    CHECK(second == first);
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.events.wait_count() == 0);
    CHECK(f.events.synchronizations() == 0);
    // Freed on b, a block allocated on a is b's to reuse at once.
    f.events.submit(f.b);
    f.put(second, 100 * KiB, f.b);
    void* on_b = f.get(100 * KiB, f.b);
    CHECK(on_b == first);
    CHECK(f.events.wait_count() == 0);
    f.put(on_b, 100 * KiB, f.b);
    f.put(smaller, 40 * KiB, f.a);
    f.pool.deallocate_async(aligned, 100 * KiB, 4096, f.a);
}

TEST_CASE("another stream takes a freed block only after the freeing stream's next call covered it, and waits on that event") {
    fixture f;
    f.know(f.b);
    f.know(f.a);
    void* block = f.get(512 * KiB, f.a);
    void* other = f.get(8 * KiB, f.a);
    const auto work_on_a = f.events.submit(f.a);
    f.put(block, 512 * KiB, f.a);
    // No event covers a's free: b grows, and asks a's front to be covered at a's next call.
    const auto grown_before = f.memory.allocations();
    void* grown = f.get(512 * KiB, f.b);
    CHECK(grown != block);
    CHECK(f.memory.allocations() == grown_before + 1);
    CHECK(f.pool.front_blocks_held() == 1);
    const auto more_on_a = f.events.submit(f.a);
    f.put(other, 8 * KiB, f.a);  // a's next call: one event covers its front
    CHECK(f.pool.waiting_blocks() == 1);
    CHECK(f.pool.front_blocks_held() == 1);  // `other`, freed after the cover
    void* taken = f.get(512 * KiB, f.b);  // a waiting block of its size: b waits on the GPU
    CHECK(taken == block);
    CHECK(f.memory.allocations() == grown_before + 1);
    REQUIRE(f.events.waits().size() == 1);
    CHECK(f.events.waits()[0].waiter == f.b);
    CHECK(f.events.waits()[0].event.position >= more_on_a);
    CHECK(f.events.synchronizations() == 0);
    CHECK(f.events.completed(f.a) < work_on_a);
    f.events.submit(f.b);
    f.events.complete(f.b);  // b's work cannot finish before a's work on the block did
    CHECK(f.events.completed(f.a) >= work_on_a);
    f.put(taken, 512 * KiB, f.b);
    f.put(grown, 512 * KiB, f.b);
}

TEST_CASE("a front covered while its stream's work is all done goes into the pool with no event") {
    fixture f;
    f.know(f.b);
    f.know(f.a);
    void* small = f.get(8 * KiB, f.a);
    void* block = f.get(512 * KiB, f.a);
    f.put(block, 512 * KiB, f.a);  // a has no work pending
    void* grown = f.get(2 * MiB, f.b);  // asks a's front
    const std::size_t recorded = f.events.recorded();
    f.put(small, 8 * KiB, f.a);  // a's call: a is idle, its front goes into the pool
    CHECK(f.events.asked_idle() == 1);
    CHECK(f.events.recorded() == recorded);
    CHECK(f.pool.front_blocks_held() == 1);  // `small`, freed after the cover
    CHECK(f.pool.waiting_blocks() == 0);
    void* taken = f.get(512 * KiB, f.b);
    CHECK(taken == block);
    CHECK(f.events.wait_count() == 0);
    CHECK(f.events.synchronizations() == 0);
    f.put(taken, 512 * KiB, f.b);
    f.put(grown, 2 * MiB, f.b);
}

TEST_CASE("a stream found busy at a cover is asked again after 1, 3, 7 ... covers, its fronts wait behind events meanwhile") {
    fixture f;
    f.know(f.b);
    f.know(f.a);
    std::vector<std::pair<void*, std::size_t>> kept;  // on b
    std::vector<void*> on_a;
    // One cover of a's front: a free on a, a miss on b that asks for a's front, a's next call.
    const auto cover_a = [&](bool busy) {
        void* block = f.get(512 * KiB, f.a);
        if (busy) f.events.submit(f.a);
        f.put(block, 512 * KiB, f.a);
        kept.emplace_back(f.get(2 * MiB, f.b), 2 * MiB);
        on_a.push_back(f.get(8 * KiB, f.a));
    };
    std::vector<std::size_t> asked;  // idle questions after each cover
    for (int i = 0; i < 7; ++i) {
        cover_a(true);
        asked.push_back(f.events.asked_idle());
    }
    CHECK(asked == std::vector<std::size_t>{1, 1, 2, 2, 2, 2, 3});  // asked at covers 1, 3 and 7
    CHECK(f.pool.waiting_blocks() > 0);
    // Its work done, a is still not asked for the 7 covers after the third busy answer; then it is
    // found idle and its front goes into the pool with no event.
    f.events.complete(f.a);
    for (int i = 0; i < 7; ++i) cover_a(false);
    CHECK(f.events.asked_idle() == 3);
    const std::size_t recorded = f.events.recorded();
    cover_a(false);
    CHECK(f.events.asked_idle() == 4);
    CHECK(f.events.recorded() == recorded);
    CHECK(f.pool.front_blocks_held() == 0);
    for (const auto& [p, bytes] : kept) f.put(p, bytes, f.b);
    for (void* p : on_a) f.put(p, 8 * KiB, f.a);
}

TEST_CASE("with internal_dependencies(false) a miss grows rather than wait on another stream's event") {
    fixture f;
    CHECK(f.pool.internal_dependencies());
    f.pool.internal_dependencies(false);
    CHECK_FALSE(f.pool.internal_dependencies());
    f.know(f.b);
    void* block = f.get(512 * KiB, f.a);
    void* other = f.get(8 * KiB, f.a);
    f.events.submit(f.a);
    f.put(block, 512 * KiB, f.a);
    void* grown = f.get(512 * KiB, f.b);  // asks a
    f.put(other, 8 * KiB, f.a);  // covered
    REQUIRE(f.pool.waiting_blocks() == 1);
    void* again = f.get(512 * KiB, f.b);
    CHECK(again != block);
    CHECK(f.events.wait_count() == 0);
    CHECK(f.pool.waiting_blocks() == 1);
    // Once a's work is done the next miss moves the block into the pool and takes it, no wait.
    f.events.complete(f.a);
    void* drained = f.get(512 * KiB, f.b);
    CHECK(drained == block);
    CHECK(f.pool.waiting_blocks() == 0);
    CHECK(f.events.wait_count() == 0);
    for (void* p : {grown, again, drained}) f.put(p, 512 * KiB, f.b);
}

TEST_CASE("fronts of streams gone quiet do not make a live stream cover at every free") {
    fixture f;
    f.know(f.b);  // two streams in use: frees go to fronts
    for (int i = 0; i < 12; ++i) {
        const stream_ref s = f.events.make_stream();
        void* p = f.get(4 * KiB, s);
        f.events.submit(s);
        f.put(p, 4 * KiB, s);  // an open front that its stream never covers
        f.events.destroy_stream(s);
    }
    const std::size_t recorded = f.events.recorded();
    for (int i = 0; i < 4096; ++i) f.put(f.get(8 * KiB, f.a), 8 * KiB, f.a);
    // Once the gone streams' fronts are past front_age calls, a's frees stay in its front: a
    // handful of events, not one per free, and no wait for the device.
    CHECK(f.events.recorded() - recorded < ordered::front_age);
    CHECK(f.events.synchronizations() == 0);
    CHECK(f.pool.pending_bytes() <= 12 * 4 * KiB + 8 * KiB);  // held until a miss settles them
}

TEST_CASE("a block a lone stream freed into the pool goes to a second stream only after its work: upstream memory until then") {
    fixture f;
    const stream_ref gone = f.events.make_stream();
    void* block = f.get(512 * KiB, gone);
    const auto last_work = f.events.submit(gone);
    f.put(block, 512 * KiB, gone);  // alone: into the pool with no event
    f.events.destroy_stream(gone);  // with its work pending: the pool cannot record on it now
    // The pool is not ready for a: its misses take memory straight from the upstream, with no
    // wait, settle_after times; the next one waits for the device once and takes the block.
    std::vector<void*> taken;
    while (taken.empty() || taken.back() != block) {
        REQUIRE(taken.size() <= ordered::settle_after);
        CHECK_NOTHROW(taken.push_back(f.get(512 * KiB, f.a)));
        if (taken.back() != block) CHECK(f.events.synchronizations() == 0);
    }
    CHECK(taken.size() == ordered::settle_after + 1);
    CHECK(f.events.synchronizations() == 1);
    CHECK(f.events.completed(gone) >= last_work);
    for (void* p : taken) f.put(p, 512 * KiB, f.a);
}

TEST_CASE("memory passed through from the upstream goes back there only after the freeing stream's work") {
    fixture f;
    const stream_ref lone = f.events.make_stream();
    void* block = f.get(512 * KiB, lone);
    f.events.submit(lone);
    f.put(block, 512 * KiB, lone);  // alone: into the pool, uncovered
    void* passed = f.get(512 * KiB, f.b);  // the pool is not ready for b: straight from the upstream
    CHECK(passed != block);
    const auto work = f.events.submit(f.b);  // work on b uses it
    const std::size_t live = f.memory.live_bytes();
    f.put(passed, 512 * KiB, f.b);
    CHECK(f.memory.live_bytes() < live);  // back upstream at once...
    CHECK(f.events.completed(f.b) >= work);  // ...after the host waited for b's work
    CHECK(f.pool.pending_bytes() == 0);
    f.put(f.get(4 * KiB, lone), 4 * KiB, lone);  // lone covers the pool, as asked
}

TEST_CASE("a lone stream covers the pool at its next call once a second stream comes, that stream waits on the cover once") {
    fixture f;
    void* block = f.get(512 * KiB, f.a);
    void* later = f.get(8 * KiB, f.a);
    void* lent = f.get(4 * KiB, f.a);
    const auto work_on_a = f.events.submit(f.a);
    f.put(block, 512 * KiB, f.a);  // alone: into the pool
    f.put(lent, 4 * KiB, f.b);  // b comes, through a free on its front
    CHECK(f.pool.streams() == 2);
    f.put(later, 8 * KiB, f.a);  // a's next call records the cover
    void* taken = f.get(512 * KiB, f.b);
    CHECK(taken == block);
    REQUIRE(f.events.waits().size() == 1);
    CHECK(f.events.waits()[0].waiter == f.b);
    CHECK(f.events.waits()[0].event.position >= work_on_a);
    CHECK(f.events.synchronizations() == 0);
    void* next = f.get(2 * MiB, f.b);  // the pool is ready for b now: no second wait
    CHECK(f.events.wait_count() == 1);
    f.events.submit(f.b);
    f.events.complete(f.b);
    CHECK(f.events.completed(f.a) >= work_on_a);
    f.put(taken, 512 * KiB, f.b);
    f.put(next, 2 * MiB, f.b);
}

TEST_CASE("a stream alone again for rehome_after calls is the pool's home again, until another stream's call, which doubles the wait") {
    fixture f;
    f.know(f.b);
    f.know(f.a);
    // An allocate and a free on `a`, behind work: the cycles until its free stays out of its front.
    const auto cycles_until_home = [&] {
        for (std::size_t cycles = 1; cycles <= 4 * ordered::rehome_after; ++cycles) {
            void* p = f.get(8 * KiB, f.a);
            f.events.submit(f.a);
            f.put(p, 8 * KiB, f.a);
            if (f.pool.front_blocks_held() == 0) return cycles;
        }
        return std::size_t{0};
    };
    const std::size_t first = cycles_until_home();
    CHECK(2 * first >= ordered::rehome_after);  // two calls a cycle
    CHECK(2 * first <= ordered::rehome_after + 4);
    // At home: no front, no event, no query.
    const std::size_t recorded = f.events.recorded(), asked = f.events.asked_idle();
    for (int i = 0; i < 1000; ++i) {
        void* p = f.get(8 * KiB, f.a);
        f.events.submit(f.a);
        f.put(p, 8 * KiB, f.a);
        REQUIRE(f.pool.front_blocks_held() == 0);
    }
    void* large = f.get(4 * MiB, f.a);
    const auto work_on_large = f.events.submit(f.a);
    f.put(large, 4 * MiB, f.a);  // a large free too: into the pool, uncovered
    CHECK(f.pool.pending_bytes() == 0);
    CHECK(f.events.recorded() == recorded);
    CHECK(f.events.asked_idle() == asked);
    // b comes back: the pool is not ready for it, and a may not call again soon. b's first miss
    // waits for the whole device once (no memory from the upstream meanwhile) and takes the block.
    const auto grown_before = f.memory.allocations();
    const auto synchronized_before = f.events.synchronizations();
    void* on_b = f.get(4 * MiB, f.b);
    CHECK(on_b == large);
    CHECK(f.events.synchronizations() == synchronized_before + 1);
    CHECK(f.events.completed(f.a) >= work_on_large);
    CHECK(f.memory.allocations() == grown_before);
    f.put(on_b, 4 * MiB, f.b);
    // That ended a home whose frees were uncovered: the next takes twice as many calls.
    const std::size_t second = cycles_until_home();
    CHECK(2 * second >= 2 * ordered::rehome_after);
    CHECK(2 * second <= 2 * ordered::rehome_after + 4);
}

TEST_CASE("a stream alone for rehome_after calls is no home while the pool holds a gone home's uncovered frees") {
    fixture f;
    void* block = f.get(512 * KiB, f.a);
    void* lent = f.get(8 * KiB, f.a);
    const auto work_on_a = f.events.submit(f.a);
    f.put(block, 512 * KiB, f.a);  // a alone: into the pool, uncovered; a calls no more
    f.put(lent, 8 * KiB, f.b);
    // b's requests hit its front; a miss now and then (an aged front went into the pool) is passed
    // through from the upstream, too few to settle.
    for (std::size_t i = 0; i < ordered::rehome_after; ++i) f.put(f.get(8 * KiB, f.b), 8 * KiB, f.b);
    CHECK(f.pool.homes_regained() == 0);
    void* on_b = f.get(512 * KiB, f.b);
    if (on_b == block) CHECK(f.events.completed(f.a) >= work_on_a);
    f.put(on_b, 512 * KiB, f.b);
}

TEST_CASE("past front_blocks blocks a front is covered by one event, its blocks reach the pool once that is done") {
    fixture f;
    constexpr std::size_t count = ordered::front_blocks;
    f.know(f.b);
    std::vector<void*> blocks;
    for (std::size_t i = 0; i <= count; ++i) blocks.push_back(f.get(4 * KiB, f.a));
    f.events.submit(f.a);
    for (std::size_t i = 0; i + 1 < count; ++i) f.put(blocks[i], 4 * KiB, f.a);
    CHECK(f.pool.front_blocks_held() == count - 1);
    CHECK(f.pool.waiting_blocks() == 0);
    f.put(blocks[count - 1], 4 * KiB, f.a);
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.pool.waiting_blocks() == count);
    f.put(blocks[count], 4 * KiB, f.a);
    CHECK(f.pool.front_blocks_held() == 1);
    f.pool.internal_dependencies(false);
    void* meanwhile = f.get(4 * KiB, f.b);
    CHECK(std::find(blocks.begin(), blocks.end(), meanwhile) == blocks.end());  // a's work is pending
    f.events.complete(f.a);
    void* reused = f.get(4 * KiB, f.b);
    CHECK(std::find(blocks.begin(), blocks.end(), reused) != blocks.end());
    CHECK(f.pool.waiting_blocks() == 0);
    CHECK(f.events.wait_count() == 0);
    f.put(meanwhile, 4 * KiB, f.b);
    f.put(reused, 4 * KiB, f.b);
}

TEST_CASE("past max_open_fronts streams with an open front, a free covers its own stream's front at once") {
    fixture f;
    constexpr std::size_t count = ordered::max_open_fronts + 1;
    std::vector<stream_ref> streams;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < count; ++i) {
        streams.push_back(f.events.make_stream());
        blocks.push_back(f.get(64 * KiB, streams.back()));
    }
    for (std::size_t i = 0; i < count; ++i) {
        f.events.submit(streams[i]);
        f.put(blocks[i], 64 * KiB, streams[i]);
        CHECK(f.pool.front_blocks_held() == std::min(i + 1, ordered::max_open_fronts));
    }
    CHECK(f.pool.waiting_blocks() == 1);
}

TEST_CASE("fronts holding more than the byte budget are covered") {
    fixture f;
    f.know(f.b);
    constexpr std::size_t bytes = 512 * KiB;  // under a large free's least
    constexpr std::size_t count = ordered::min_front_budget / bytes + 1;
    std::vector<void*> blocks;
    for (std::size_t i = 0; i < count; ++i) blocks.push_back(f.get(bytes, f.a));
    f.events.submit(f.a);
    for (std::size_t i = 0; i + 1 < count; ++i) f.put(blocks[i], bytes, f.a);
    CHECK(f.pool.front_blocks_held() == count - 1);  // at the budget, not past it
    f.put(blocks.back(), bytes, f.a);
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.pool.waiting_blocks() == count);
    CHECK(f.pool.pending_bytes() == count * bytes);
}

TEST_CASE("a large free covers its front at once: another stream takes it at its next request") {
    fixture f;
    f.know(f.b);
    f.know(f.a);
    void* small = f.get(4 * KiB, f.a);
    f.put(small, 4 * KiB, f.a);  // stays in a's front
    void* large = f.get(ordered::min_large_free, f.a);
    f.put(large, ordered::min_large_free, f.a);  // a has no work pending: into the pool, with `small`
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.pool.waiting_blocks() == 0);
    void* taken = f.get(ordered::min_large_free, f.b);
    CHECK(taken == large);
    void* busy = f.get(ordered::min_large_free, f.a);
    f.events.submit(f.a);
    f.put(busy, ordered::min_large_free, f.a);  // a is busy: behind an event
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.pool.waiting_blocks() == 1);
    f.put(taken, ordered::min_large_free, f.b);
}

TEST_CASE("a lasting stream's large frees in a row are covered at the next allocation, on any stream, by one query") {
    fixture f;
    f.lasting_a();
    void* small = f.get(4 * KiB, f.a);
    std::vector<void*> large;
    for (int i = 0; i < 3; ++i) large.push_back(f.get(ordered::min_large_free, f.a));
    f.put(small, 4 * KiB, f.a);
    for (void* p : large) f.put(p, ordered::min_large_free, f.a);  // a's frees, one after another
    CHECK(f.events.asked_idle() == 0);
    CHECK(f.pool.front_blocks_held() == 4);
    f.pool.check_invariants();
    void* taken = f.get(ordered::min_large_free, f.b);  // b's call asks a once: idle, all into the pool
    CHECK(f.events.asked_idle() == 1);
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.pool.waiting_blocks() == 0);
    CHECK(std::find(large.begin(), large.end(), taken) != large.end());
    CHECK(f.events.wait_count() == 0);
    SUBCASE("a stream not declared lasting is asked at each large free, in its own calls") {
        void* on_b = f.get(ordered::min_large_free, f.b);
        void* second = f.get(ordered::min_large_free, f.b);
        f.put(on_b, ordered::min_large_free, f.b);
        f.put(second, ordered::min_large_free, f.b);
        CHECK(f.events.asked_idle() == 3);
        CHECK(f.pool.front_blocks_held() == 0);
    }
    SUBCASE("a smaller free on that stream covers the frees before it first, and stays in its front") {
        void* block = f.get(ordered::min_large_free, f.a);
        void* small_again = f.get(4 * KiB, f.a);
        f.put(block, ordered::min_large_free, f.a);
        CHECK(f.events.asked_idle() == 1);
        f.put(small_again, 4 * KiB, f.a);
        CHECK(f.events.asked_idle() == 2);
        CHECK(f.pool.front_blocks_held() == 1);
        void* taken_too = f.get(ordered::min_large_free, f.b);  // nothing due: no query
        CHECK(taken_too == block);
        CHECK(f.events.asked_idle() == 2);
        f.put(taken_too, ordered::min_large_free, f.b);
    }
    SUBCASE("work issued after the frees holds them back: the event recorded at the cover covers it too") {
        void* block = f.freed_large(f.a);
        f.events.submit(f.a);
        void* grown = f.get(ordered::min_large_free, f.b);  // a is busy now: its front waits behind an event
        CHECK(grown != block);
        CHECK(f.pool.waiting_blocks() == 1);
        // Found busy, a's next large free is covered at once, behind an event recorded then.
        void* next = f.get(ordered::min_large_free, f.a);
        const std::size_t recorded = f.events.recorded();
        f.put(next, ordered::min_large_free, f.a);
        CHECK(f.events.recorded() == recorded + 1);
        CHECK(f.pool.front_blocks_held() == 0);
        f.put(grown, ordered::min_large_free, f.b);
    }
    f.put(taken, ordered::min_large_free, f.b);
}

TEST_CASE("release covers a lasting stream's front left for the next allocation by asking it, not the whole device") {
    fixture f;
    f.lasting_a();
    static_cast<void>(f.freed_large(f.a));
    CHECK(f.events.asked_idle() == 0);
    CHECK(f.pool.front_blocks_held() == 1);
    f.pool.release();
    CHECK(f.events.asked_idle() == 1);
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.events.synchronizations() == 0);
}

TEST_CASE("a lasting stream that began a capture after its large free is not asked during another stream's call") {
    fixture f;
    f.lasting_a();
    void* block = f.freed_large(f.a);
    f.events.begin_capture(f.a, capture_mode::relaxed);
    void* other = f.get(ordered::min_large_free, f.b);  // a is in capture: its front stays
    CHECK(other != block);
    CHECK(f.events.asked_idle() == 0);
    CHECK(f.pool.front_blocks_held() == 1);
    const auto graph = f.events.end_capture(f.a);
    CHECK(graph.valid);
    CHECK(f.events.capture_errors() == 0);
    void* again = f.get(ordered::min_large_free, f.a);  // a's own call: its front serves it
    CHECK(again == block);
    f.put(again, ordered::min_large_free, f.a);
    f.put(other, ordered::min_large_free, f.b);
}

TEST_CASE("before growing, a miss puts waiting blocks into the pool behind their events, other streams wait on them too") {
    fixture f;
    void* block = f.get(768 * KiB, f.a);  // under a large free
    void* small = f.get(4 * KiB, f.a);
    void* on_b = f.get(4 * KiB, f.b);
    f.events.submit(f.a);  // work on a uses `block`
    f.put(block, 768 * KiB, f.a);
    void* grown = f.get(512 * KiB, f.b);  // a's front is open: b asks for it and grows
    f.put(small, 4 * KiB, f.a);  // a covers its front at this call, as asked
    REQUIRE(f.pool.waiting_blocks() == 1);
    const std::size_t waits = f.events.wait_count();
    void* part = f.get(512 * KiB, f.b);  // no block of that size: the waiting one goes into the pool, b waits on it
    const auto begin = reinterpret_cast<std::uintptr_t>(part), old = reinterpret_cast<std::uintptr_t>(block);
    CHECK((begin >= old && begin < old + 768 * KiB));
    CHECK(f.events.wait_count() == waits + 1);
    CHECK(f.pool.waiting_blocks() == 0);
    const stream_ref c = f.events.make_stream();
    void* on_c = f.get(256 * KiB, c);  // c waits on the same event before it takes from the pool
    CHECK(f.events.wait_count() == waits + 2);
    CHECK(f.events.synchronizations() == 0);
    f.events.complete_all();
    f.put(on_c, 256 * KiB, c);
    for (void* p : {grown, part}) f.put(p, 512 * KiB, f.b);
    f.put(on_b, 4 * KiB, f.b);
}

TEST_CASE("memory the pool holds behind covers leaves it only after their work: release waits for them") {
    fixture f;
    void* block = f.get(512 * KiB, f.a);
    void* on_b = f.get(4 * KiB, f.b);
    const auto work = f.events.submit(f.a);  // work on a uses `block`
    f.put(block, 512 * KiB, f.a);
    void* grown = f.get(512 * KiB, f.b);  // asks a for its front
    // a covers its front as asked; nothing holds 2 MiB: the waiting block goes into the pool behind
    // a's event, and the pool grows. `block`'s chunk is wholly free in the pool, behind the cover.
    void* big = f.get(2 * MiB, f.a);
    REQUIRE(f.pool.waiting_blocks() == 0);
    REQUIRE(f.pool.front_blocks_held() == 0);
    REQUIRE(f.events.completed(f.a) < work);
    f.pool.release();  // the chunk goes upstream: only after a's work
    CHECK(f.events.completed(f.a) >= work);
    f.put(big, 2 * MiB, f.a);
    f.put(grown, 512 * KiB, f.b);
    f.put(on_b, 4 * KiB, f.b);
}

TEST_CASE("a front older than front_age calls is covered at its stream's next call") {
    fixture f;
    f.pool.internal_dependencies(false);  // a's misses grow: the waiting block stays in view
    void* mine = f.get(4 * KiB, f.b);
    void* block = f.get(512 * KiB, f.a);
    f.events.submit(f.a);
    f.put(block, 512 * KiB, f.a);  // a's front opens
    const auto cycle = [&] {  // two calls on b that hit its front: no miss asks a
        f.put(mine, 4 * KiB, f.b);
        mine = f.get(4 * KiB, f.b);
    };
    for (std::size_t i = 0; i + 1 < ordered::front_age / 2; ++i) cycle();
    void* young = f.get(8 * KiB, f.a);  // front_age - 1 calls after the free
    CHECK(f.pool.front_blocks_held() == 1);
    CHECK(f.pool.waiting_blocks() == 0);
    cycle();
    void* old = f.get(8 * KiB, f.a);  // front_age + 2 calls after it
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.pool.waiting_blocks() == 1);
    f.events.complete(f.a);
    void* taken = f.get(512 * KiB, f.b);
    CHECK(taken == block);
    CHECK(f.events.wait_count() == 0);
    f.put(taken, 512 * KiB, f.b);
    f.put(mine, 4 * KiB, f.b);
    f.put(young, 8 * KiB, f.a);
    f.put(old, 8 * KiB, f.a);
}

TEST_CASE("waiting blocks whose events are done reach the pool within poll_interval calls that hit") {
    fixture f;
    f.pool.deallocate(f.pool.allocate(4 * KiB), 4 * KiB);  // a free 4 KiB block: the calls below hit
    void* block = f.get(64 * KiB, f.a);
    f.pool.record_use(block, f.b);
    f.events.submit(f.b);
    f.put(block, 64 * KiB, f.a);
    REQUIRE(f.pool.waiting_blocks() == 1);
    const auto grown = f.memory.allocations();
    const auto hits = [&] {
        for (std::size_t i = 0; i < ordered::poll_interval; ++i) f.pool.deallocate(f.pool.allocate(4 * KiB), 4 * KiB);
    };
    hits();
    CHECK(f.pool.waiting_blocks() == 1);  // b's work is pending
    f.events.complete(f.b);
    hits();
    CHECK(f.pool.waiting_blocks() == 0);
    CHECK(f.memory.allocations() == grown);
}

TEST_CASE("a destroyed stream is never touched, its front serves others after settle_after misses, behind one wait for the device") {
    fixture f;
    f.know(f.b);
    const stream_ref gone = f.events.make_stream();
    void* block = f.get(64 * KiB, gone);
    void* second = f.get(192 * KiB, gone);
    const auto last_work = f.events.submit(gone);
    f.put(block, 64 * KiB, gone);
    f.put(second, 192 * KiB, gone);
    f.events.destroy_stream(gone);  // its work is still pending
    REQUIRE(f.pool.front_blocks_held() == 2);
    std::vector<void*> on_a;
    void* taken = nullptr;
    while (taken != block && on_a.size() < ordered::settle_after + 4) {
        CHECK(f.events.synchronizations() == 0);
        CHECK_NOTHROW(taken = f.get(64 * KiB, f.a));
        on_a.push_back(taken);
    }
    CHECK(taken == block);
    CHECK(on_a.size() > ordered::settle_after);
    CHECK(f.events.synchronizations() == 1);
    CHECK(f.events.completed(gone) >= last_work);
    void* plain = nullptr;
    CHECK_NOTHROW(plain = f.pool.allocate(192 * KiB));  // settled: no wait
    CHECK(plain == second);
    CHECK(f.events.synchronizations() == 1);
    f.pool.deallocate(plain, 192 * KiB);
    for (void* p : on_a) f.put(p, 64 * KiB, f.a);
}

TEST_CASE("exhaustion after a stream was destroyed frees its front without touching it") {
    fixture f;
    f.memory.limit(8 * MiB);
    f.know(f.b);
    const stream_ref gone = f.events.make_stream();
    void* block = f.get(6 * MiB, f.a);
    f.events.submit(gone);
    f.put(block, 6 * MiB, gone);  // gone's front
    f.events.destroy_stream(gone);
    void* big = nullptr;
    CHECK_NOTHROW(big = f.get(7 * MiB, f.a));  // needs gone's chunk back
    CHECK(f.events.completed(gone) == f.events.issued(gone));
    CHECK(f.pool.front_blocks_held() == 0);
    f.put(big, 7 * MiB, f.a);
}

TEST_CASE("record_use delays reuse until the other stream's work is done, or the taker waits on it") {
    fixture f;
    void* block = f.get(64 * KiB, f.a);
    f.pool.record_use(block, f.b);
    const auto reading = f.events.submit(f.b);
    f.put(block, 64 * KiB, f.a);
    CHECK(f.pool.waiting_blocks() == 1);
    CHECK(f.pool.front_blocks_held() == 0);
    SUBCASE("internal dependencies off: no reuse before b's work is done") {
        f.pool.internal_dependencies(false);
        void* meanwhile = f.get(64 * KiB, f.a);
        CHECK(meanwhile != block);
        f.events.complete(f.b);
        void* after = f.get(64 * KiB, f.a);
        CHECK(after == block);
        CHECK(f.events.wait_count() == 0);
        f.put(meanwhile, 64 * KiB, f.a);
        f.put(after, 64 * KiB, f.a);
    }
    SUBCASE("internal dependencies on: taken behind a wait on b's event") {
        void* taken = f.get(64 * KiB, f.a);
        CHECK(taken == block);
        // a waits on b's event (and may on its own, done already: a wait costs what a query would).
        const auto& waits = f.events.waits();
        CHECK(std::any_of(waits.begin(), waits.end(),
                          [&](const auto& w) { return w.waiter == f.a && w.event.stream == f.events.identity(f.b); }));
        CHECK(std::all_of(waits.begin(), waits.end(), [&](const auto& w) { return w.waiter == f.a; }));
        f.events.submit(f.a);
        f.events.complete(f.a);
        CHECK(f.events.completed(f.b) >= reading);
        f.put(taken, 64 * KiB, f.a);
    }
    CHECK(f.pool.waiting_blocks() == 0);
}

TEST_CASE("forget_stream drops a stream from record_use: the block's free touches it no more") {
    fixture f;
    stream_ref user = f.events.make_stream();
    void* block = f.get(64 * KiB, f.a);
    f.pool.record_use(block, user);
    f.events.submit(user);  // work on `user` reads the block
    f.pool.forget_stream(user);
    CHECK(f.events.completed(user) == 1);  // forgetting waited for it
    f.events.destroy_stream(user);
    f.put(block, 64 * KiB, f.a);  // records nothing on `user`
    CHECK(f.pool.waiting_blocks() == 0);
    void* again = f.get(64 * KiB, f.a);
    CHECK(again == block);
    f.put(again, 64 * KiB, f.a);
}

TEST_CASE("forget_stream waits for the stream and puts its front into the pool, free for all") {
    fixture f;
    f.know(f.b);
    void* block = f.get(512 * KiB, f.a);
    f.events.submit(f.a);
    f.put(block, 512 * KiB, f.a);
    REQUIRE(f.pool.front_blocks_held() == 1);
    const auto streams = f.pool.streams();
    f.pool.forget_stream(f.a);
    CHECK(f.events.completed(f.a) == f.events.issued(f.a));
    CHECK(f.pool.front_blocks_held() == 0);
    CHECK(f.pool.streams() == streams - 1);
    void* taken = f.get(512 * KiB, f.b);
    CHECK(taken == block);
    CHECK(f.events.wait_count() == 0);
    f.put(taken, 512 * KiB, f.b);
}

TEST_CASE("a forgotten stream that frees again is ordered again: its new frees are not free for all") {
    fixture f;
    void* kept = f.get(512 * KiB, f.a);
    void* on_b = f.get(4 * KiB, f.b);
    f.pool.forget_stream(f.a);
    const auto work_on_a = f.events.submit(f.a);  // a is used again without allocating
    f.put(kept, 512 * KiB, f.a);
    void* taken = f.get(512 * KiB, f.b);
    CHECK(taken != kept);
    f.events.submit(f.b);
    f.events.complete(f.b);
    CHECK(f.events.completed(f.a) < work_on_a);
    f.put(taken, 512 * KiB, f.b);
    f.put(on_b, 4 * KiB, f.b);
}

TEST_CASE("plain allocate never gets a block whose stream work is pending") {
    SUBCASE("a lone stream's free in the pool: upstream memory, with no wait") {
        fixture f;
        void* block = f.get(512 * KiB, f.a);
        const auto work = f.events.submit(f.a);
        f.put(block, 512 * KiB, f.a);
        void* plain = f.pool.allocate(512 * KiB);
        CHECK(plain != block);
        CHECK(f.events.completed(f.a) < work);
        CHECK(f.events.synchronizations() == 0);
        f.pool.deallocate(plain, 512 * KiB);  // straight back to the upstream
    }
    SUBCASE("a front: grown around until covered, then taken after the host waited for its event") {
        fixture f;
        f.know(f.b);
        void* block = f.get(512 * KiB, f.a);
        void* other = f.get(8 * KiB, f.a);
        const auto work = f.events.submit(f.a);
        f.put(block, 512 * KiB, f.a);
        void* first = f.pool.allocate(512 * KiB);
        CHECK(first != block);
        f.put(other, 8 * KiB, f.a);  // a's next call covers its front, as the miss asked
        void* plain = f.pool.allocate(512 * KiB);
        CHECK(plain == block);
        CHECK(f.events.completed(f.a) >= work);
        CHECK(f.events.synchronizations() == 1);
        CHECK(f.events.wait_count() == 0);
        f.pool.deallocate(plain, 512 * KiB);
        void* on_b = f.get(512 * KiB, f.b);  // a plain free is free for all at once
        CHECK(on_b == block);
        CHECK(f.events.wait_count() == 0);
        f.put(on_b, 512 * KiB, f.b);
        f.pool.deallocate(first, 512 * KiB);
    }
}

TEST_CASE("memory leaves a lone stream's pool only after that stream's work is done") {
    fixture f;
    f.memory.limit(8 * MiB);
    void* block = f.get(6 * MiB, f.a);
    const auto work = f.events.submit(f.a);
    f.put(block, 6 * MiB, f.a);  // into the pool, still used by the kernel
    void* big = f.get(7 * MiB, f.a);  // the 6 MiB chunk must go back upstream first
    CHECK(big != nullptr);
    CHECK(f.events.completed(f.a) >= work);
    CHECK(f.memory.live_bytes() == 7 * MiB);
    f.put(big, 7 * MiB, f.a);
}

TEST_CASE("at exhaustion every front and waiting block goes into the pool, the pool releases and the request is retried") {
    fixture f;
    f.memory.limit(2 * MiB);  // blocks under a large free
    void* x = f.get(768 * KiB, f.a);
    void* y = f.get(768 * KiB, f.a);
    void* z = f.get(256 * KiB, f.b);
    f.events.submit(f.a);
    f.events.submit(f.b);
    f.put(x, 768 * KiB, f.a);  // a's front
    f.pool.record_use(y, f.b);
    f.put(y, 768 * KiB, f.a);  // waiting on a and b
    REQUIRE(f.pool.front_blocks_held() == 1);
    REQUIRE(f.pool.waiting_blocks() == 1);
    const stream_ref c = f.events.make_stream();
    void* big = f.get(1792 * KiB, c);
    CHECK(big != nullptr);
    CHECK(f.pool.pending_bytes() == 0);
    CHECK(f.memory.live_bytes() == 2 * MiB);
    CHECK(f.events.completed(f.a) == f.events.issued(f.a));
    CHECK(f.events.completed(f.b) == f.events.issued(f.b));
    try {
        static_cast<void>(f.get(512 * KiB, c));
        FAIL("allocate past the upstream's limit succeeded");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().reserved_bytes == 2 * MiB);
        CHECK(error.figures().live_bytes == 2 * MiB);
        CHECK(std::string(error.what()).find("stream_ordered") != std::string::npos);
    }
    f.put(big, 1792 * KiB, c);
    f.put(z, 256 * KiB, f.b);
}

TEST_CASE("release returns every wholly free chunk once all work is done") {
    fixture f;
    void* x = f.get(768 * KiB, f.a);
    void* y = f.get(768 * KiB, f.b);
    void* z = f.get(768 * KiB, f.a);
    f.events.submit(f.a);
    f.events.submit(f.b);
    f.put(x, 768 * KiB, f.a);
    f.put(y, 768 * KiB, f.b);
    f.pool.record_use(z, f.b);
    f.put(z, 768 * KiB, f.a);
    CHECK(f.pool.front_blocks_held() == 2);
    CHECK(f.pool.waiting_blocks() == 1);
    f.pool.release();
    CHECK(f.pool.pending_bytes() == 0);
    CHECK(f.memory.live_bytes() == 0);
    CHECK(f.events.completed(f.a) == f.events.issued(f.a));
    CHECK(f.events.completed(f.b) == f.events.issued(f.b));
}

TEST_CASE("the walk shows front and waiting blocks as pending_free, not live, and owns() agrees") {
    fixture f;
    void* front = f.get(64 * KiB, f.a);
    void* waiting = f.get(32 * KiB, f.a);
    void* live = f.get(16 * KiB, f.a);
    f.put(front, 64 * KiB, f.b);  // b's front
    f.pool.record_use(waiting, f.b);
    f.put(waiting, 32 * KiB, f.a);
    CHECK(f.pool.live_blocks() == 1);
    CHECK(f.pool.owns(live));
    CHECK_FALSE(f.pool.owns(front));
    CHECK_FALSE(f.pool.owns(waiting));
    std::size_t seen = 0;
    f.pool.for_each_block([&](const chunk_view&, const block_view& block) {
        const auto at = [&](void* p) { return block.address == reinterpret_cast<std::uintptr_t>(p); };
        if (at(front) || at(waiting)) {
            ++seen;
            CHECK_FALSE(block.live);
            CHECK(block.pending_free);
            CHECK(block.stream == (at(front) ? stream_id(f.b) : 0));
        } else if (at(live)) {
            ++seen;
            CHECK(block.live);
            CHECK_FALSE(block.pending_free);
        }
    });
    CHECK(seen == 3);
    f.put(live, 16 * KiB, f.a);
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

TEST_CASE("with events that cost nothing a free serves any stream at its next call, two handles of one stream share a record") {
    instrumented<> memory;
    stream_ordered<upstream, lanes<best_fit>, aliased_events> pool{upstream{memory}, exact};
    void* other = pool.allocate_async(4 * KiB, 256, handle(3));
    void* block = pool.allocate_async(64 * KiB, 256, handle(1));
    pool.deallocate_async(block, 64 * KiB, 256, handle(2));
    CHECK(pool.streams() == 2);
    CHECK(pool.front_blocks_held() == 0);  // covered at once
    void* again = pool.allocate_async(64 * KiB, 256, handle(3));
    CHECK(again == block);
    CHECK(pool.waiting_blocks() == 0);
    pool.check_invariants();
    pool.deallocate_async(again, 64 * KiB, 256, handle(1));
    pool.deallocate_async(other, 4 * KiB, 256, handle(3));
    pool.release();
    CHECK(memory.live_bytes() == 0);
}

TEST_CASE("streams made, used and destroyed without forget_stream leave a bounded number of records") {
    instrumented<> memory;
    watched_events events;
    ordered pool{upstream{memory}, exact, events};
    // A trim keeps the records seen since the last one and those with open fronts; the next comes
    // at twice what it kept. Untrimmed, `count` records would pass that.
    constexpr std::size_t bound = 2 * (ordered::min_trim_records + ordered::max_open_fronts + 1);
    constexpr std::size_t count = bound + 64;
    std::size_t most = 0;
    for (std::size_t i = 0; i < count; ++i) {
        const stream_ref s = events.make_stream();
        pool.deallocate_async(pool.allocate_async(4 * KiB, 256, s), 4 * KiB, 256, s);
        events.destroy_stream(s);
        most = std::max(most, pool.streams());
    }
    CHECK(most <= bound);
    // Fronts of streams destroyed hold at most the fronts' byte budget (the free that passes it
    // covers its own front): what the pool reserves stays near that, not near what all allocated.
    CHECK(pool.reserved_bytes() <= 2 * ordered::min_front_budget);
    pool.check_invariants();
    pool.release();
    CHECK(events.touched() == 0);
    CHECK(memory.live_bytes() == 0);
}

// Random traffic on up to eight streams, some destroyed (with work pending) and replaced as servers
// do, through the stream-order oracle of support/stream_order_oracle.hpp: no block is handed to a
// stream before every earlier use of its bytes is ordered before that stream's work, no destroyed
// stream is touched, and check_invariants() holds throughout. Sizes drawn from a few values (the
// oracle asks for one below largest, largest / 8 or 16 KiB) make fronts and waiting blocks serve
// requests of their exact size. With long stretches of one stream alone, that stream becomes the
// pool's home again and loses it again.
TEST_CASE("random multi-stream traffic never hands out a block before its earlier users are done") {
    constexpr std::size_t largest = 2 * MiB;
    struct traffic {
        bool few_sizes, dependencies;
        std::size_t solo_steps;
        std::size_t lasting_share;  // about one stream in this many lasting: covered during others' calls
    };
    for (const traffic t : {traffic{false, true, 0, 0}, traffic{true, true, 0, 0}, traffic{true, false, 0, 0},
                            traffic{false, true, 3 * ordered::rehome_after, 0}, traffic{true, true, 3 * ordered::rehome_after, 0},
                            traffic{true, true, 0, 2}, traffic{false, false, 0, 2}}) {
        CAPTURE(t.few_sizes);
        CAPTURE(t.dependencies);
        CAPTURE(t.solo_steps);
        CAPTURE(t.lasting_share);
        instrumented<simulated_resource> memory;
        watched_events events;
        using simulated_upstream = ref<instrumented<simulated_resource>>;
        const best_fit_options options{.initial_size = 512 * KiB, .growth = growth_policy::as_needed(256 * KiB)};
        stream_ordered<simulated_upstream, lanes<best_fit>, watched_events> pool{simulated_upstream{memory}, options, events};
        pool.internal_dependencies(t.dependencies);
        std::mt19937_64 random(11);
        const auto next = [&](std::uint64_t bound) -> std::uint64_t {
            if (t.few_sizes && (bound == 16 * KiB || bound == largest || bound == largest / 8)) return bound / (1 + random() % 4) - 1;
            return bound == 0 ? 0 : random() % bound;
        };
        const test::oracle_report report = test::stream_order_oracle(pool, events,
                                                                     {.streams = 8,
                                                                      .steps = t.solo_steps != 0 ? std::size_t{60000} : std::size_t{100000},
                                                                      .largest = largest,
                                                                      .solo_steps = t.solo_steps,
                                                                      .lasting_share = t.lasting_share},
                                                                     next);
        MESSAGE(report.describe());
        CHECK(report.violations == 0);
        CHECK(report.overlaps == 0);
        CHECK(report.checked > (t.few_sizes ? 20 : 10));
        if (t.few_sizes) CHECK((events.wait_count() > 0) == t.dependencies);  // waiting blocks were taken
        CHECK((pool.homes_regained() > 0) == (t.solo_steps != 0));
        pool.release();
        CHECK(events.touched() == 0);
        CHECK(memory.live_bytes() == 0);
        CHECK(memory.errors().empty());
    }
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
