// What is special about monotonic: bump order, starting over when wholly free, reuse of wholly
// free chunks, growth, release, exhaustion, bad input, randomized sequences.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;
using upstream_ref = ref<instrumented<>>;

using poolkit::test::KiB;

using poolkit::test::address;

}  // namespace

static_assert(std::is_default_constructible_v<monotonic<new_delete_resource>>);
static_assert(resource_with<monotonic<new_delete_resource>, host_accessible>);

TEST_CASE("monotonic: blocks follow each other, aligned as asked") {
    instrumented<> upstream;
    monotonic<upstream_ref> arena{upstream, {.initial_size = 64 * KiB}};
    void* a = arena.allocate(10, 1);
    void* b = arena.allocate(10, 1);
    void* c = arena.allocate(10, 64);
    CHECK(address(b) == address(a) + 10);
    CHECK(address(c) == address(a) + 64);
    CHECK(upstream.allocations() == 1);
    arena.deallocate(b, 10, 1);
    void* d = arena.allocate(10, 1);  // freed memory is not reused while the chunk has live blocks
    CHECK(address(d) == address(c) + 10);
    arena.check_invariants();
    arena.deallocate(a, 10, 1);
    arena.deallocate(c, 10, 64);
    arena.deallocate(d, 10, 1);
    CHECK(arena.allocate(10, 1) == a);  // wholly free: it started over
    arena.deallocate(a, 10, 1);
    arena.release();
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("monotonic: freeing the most recent block of a chunk gives its bytes back") {
    monotonic<new_delete_resource> arena;
    void* a = arena.allocate(100, 1);
    void* b = arena.allocate(100, 1);
    arena.deallocate(b, 100, 1);
    CHECK(arena.allocate(50, 1) == b);
    arena.deallocate(b, 50, 1);
    arena.deallocate(a, 100, 1);
}

TEST_CASE("monotonic: chunks grow geometrically and wholly free ones are reused before growing") {
    instrumented<> upstream;
    monotonic<upstream_ref> arena{upstream, {.initial_size = 64 * KiB}};
    void* a = arena.allocate(40 * KiB);
    void* b = arena.allocate(40 * KiB);  // a second chunk of 64 KiB (the reserved total doubles)
    void* c = arena.allocate(100 * KiB);  // a third of 128 KiB
    CHECK(arena.reserved_bytes() == 256 * KiB);
    arena.deallocate(a, 40 * KiB);  // the first chunk is wholly free again
    void* d = arena.allocate(20 * KiB);  // the third chunk has room: no switch needed
    void* e = arena.allocate(60 * KiB);  // the third is full: the first, wholly free, comes back
    CHECK(e == a);
    CHECK(arena.chunks() == 3);
    arena.check_invariants();
    for (auto [pointer, bytes] : {std::pair{b, 40 * KiB}, {c, 100 * KiB}, {d, 20 * KiB}, {e, 60 * KiB}}) {
        arena.deallocate(pointer, bytes);
    }
    arena.release();
    CHECK(arena.reserved_bytes() == 0);
    CHECK(upstream.live_blocks() == 0);
}

TEST_CASE("monotonic: exhaustion throws out_of_memory with figures, after releasing free chunks") {
    instrumented<> upstream;
    monotonic<upstream_ref> arena{upstream, {.initial_size = 64 * KiB, .maximum_size = 128 * KiB}};
    void* a = arena.allocate(60 * KiB);
    void* b = arena.allocate(60 * KiB);
    try {
        static_cast<void>(arena.allocate(60 * KiB));
        FAIL("allocate did not throw");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().live_bytes == 120 * KiB);
        CHECK(error.figures().reserved_bytes == 128 * KiB);
        CHECK(error.figures().limit_bytes == 128 * KiB);
    }
    CHECK(arena.try_allocate(60 * KiB) == nullptr);
    arena.deallocate(a, 60 * KiB);
    void* c = arena.allocate(60 * KiB);
    CHECK(c == a);
    arena.deallocate(b, 60 * KiB);
    arena.deallocate(c, 60 * KiB);
}

TEST_CASE("monotonic: randomized sequences keep every invariant and return all upstream memory") {
    instrumented<> upstream;
    {
        monotonic<upstream_ref> arena{upstream, {.initial_size = 256 * KiB}};
        test::run_shuffled(arena, {.seed = 11, .steps = 3000, .touch = true});
        arena.release();
        CHECK(upstream.live_blocks() == 0);
        test::run_shuffled(arena, {.seed = 12, .steps = 500, .allocate_percent = 90, .touch = true});
    }
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("monotonic: bad deallocations are caught by assertions") {
    SUBCASE("a pointer outside every chunk") {
        const auto outcome = test::run_in_child([] {
            monotonic<new_delete_resource> arena;
            int outside = 0;
            static_cast<void>(arena.allocate(100));
            arena.deallocate(&outside, sizeof outside);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("did not hand out"));
    }
    SUBCASE("a size reaching past what was handed out") {
        const auto outcome = test::run_in_child([] {
            monotonic<new_delete_resource> arena;
            void* pointer = arena.allocate(100);
            arena.deallocate(pointer, 5000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("size other than"));
    }
    SUBCASE("more frees than allocations") {
        const auto outcome = test::run_in_child([] {
            monotonic<new_delete_resource> arena;
            void* pointer = arena.allocate(100);
            static_cast<void>(arena.allocate(100));
            arena.deallocate(pointer, 100);
            arena.deallocate(pointer, 100);
            arena.deallocate(pointer, 100);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("freed twice"));
    }
    SUBCASE("a block freed twice while another block of its chunk is live") {
        const auto outcome = test::run_in_child([] {
            monotonic<new_delete_resource> arena;
            void* first = arena.allocate(100);
            static_cast<void>(arena.allocate(100));
            arena.deallocate(first, 100);
            arena.deallocate(first, 100);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("monotonic: deallocate of a block freed twice"));
    }
    SUBCASE("the most recent block freed twice") {
        const auto outcome = test::run_in_child([] {
            monotonic<new_delete_resource> arena;
            static_cast<void>(arena.allocate(100));
            void* last = arena.allocate(100);
            arena.deallocate(last, 100);
            arena.deallocate(last, 100);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("did not hand out, or freed twice"));
    }
    SUBCASE("a pointer inside a block") {
        const auto outcome = test::run_in_child([] {
            monotonic<new_delete_resource> arena;
            void* pointer = arena.allocate(100);
            arena.deallocate(static_cast<char*>(pointer) + 16, 50);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("monotonic did not hand out"));
    }
    SUBCASE("a smaller size than the one allocated") {
        const auto outcome = test::run_in_child([] {
            monotonic<new_delete_resource> arena;
            void* pointer = arena.allocate(100);
            static_cast<void>(arena.allocate(100));
            arena.deallocate(pointer, 50);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("monotonic: deallocate with a size other than the one allocated"));
    }
}

TEST_CASE("monotonic: destruction with live blocks reports them") {
    const auto outcome = test::run_in_child([] {
        monotonic<new_delete_resource> arena;
        static_cast<void>(arena.allocate(100));
    });
    CHECK(outcome.exited_cleanly());
    CHECK(outcome.said("monotonic destroyed with 1 block (100 bytes) still live"));
}
#else
TEST_CASE("monotonic: without assertions a bad free never lets a chunk hand out a live block again") {
    instrumented<> upstream;
    monotonic<upstream_ref> arena{upstream, {.initial_size = 64 * KiB}};
    void* first = arena.allocate(100);
    void* live = arena.allocate(100);
    arena.deallocate(first, 100);
    arena.deallocate(first, 100);  // freed twice: ignored
    arena.deallocate(static_cast<char*>(live) + 16, 50);  // inside a block: ignored
    int outside = 0;
    arena.deallocate(&outside, sizeof outside);  // outside every chunk: ignored
    arena.check_invariants();
    CHECK(arena.live_bytes() == 100);
    void* next = arena.allocate(100);
    CHECK(next != live);
    CHECK((address(next) >= address(live) + 100 || address(next) + 100 <= address(live)));
    CHECK(arena.owns(live));
    arena.deallocate(live, 50);  // a wrong size: the block is freed with the size it was allocated with
    arena.check_invariants();
    CHECK(arena.live_bytes() == 100);
    CHECK(!arena.owns(live));
    arena.deallocate(next, 100);
    arena.check_invariants();
    CHECK(arena.live_bytes() == 0);
    CHECK(arena.allocate(100) == first);  // wholly free only now: it started over
    CHECK(upstream.errors().empty());
}
#endif

TEST_CASE("monotonic: the most recent blocks of a chunk, once all freed, give their bytes back together") {
    monotonic<new_delete_resource> arena;
    void* a = arena.allocate(100, 1);
    void* b = arena.allocate(100, 1);
    void* c = arena.allocate(100, 1);
    arena.deallocate(b, 100, 1);
    CHECK(arena.owns(a));
    CHECK(!arena.owns(b));
    CHECK(arena.owns(static_cast<char*>(c) + 99));
    arena.deallocate(c, 100, 1);
    arena.check_invariants();
    CHECK(arena.allocate(100, 1) == b);
    arena.deallocate(b, 100, 1);
    arena.deallocate(a, 100, 1);
    arena.check_invariants();
    CHECK(arena.live_bytes() == 0);
}
