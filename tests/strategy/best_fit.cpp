// What is special about best_fit: best-fit choice, splitting, coalescing, growth, release,
// exhaustion, bad input, and randomized sequences over instrumented and simulated upstreams.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;
using upstream_ref = ref<instrumented<>>;

using poolkit::test::KiB;
using poolkit::test::MiB;

using poolkit::test::address;

}  // namespace

static_assert(std::is_default_constructible_v<best_fit<new_delete_resource>>);
static_assert(!std::is_default_constructible_v<best_fit<upstream_ref>>);
static_assert(resource_with<best_fit<new_delete_resource>, host_accessible>);
static_assert(!has_property<best_fit<simulated_resource>, host_accessible>);
static_assert(std::is_nothrow_move_constructible_v<best_fit<upstream_ref>>);

TEST_CASE("best_fit: one chunk serves many blocks, placed by best fit, split and coalesced") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 1 * MiB}};
    void* a = pool.allocate(1000);  // 1024 after rounding
    void* b = pool.allocate(3000);  // 3072
    void* c = pool.allocate(500);  // 512
    CHECK(upstream.allocations() == 1);
    CHECK(address(b) == address(a) + 1024);
    CHECK(address(c) == address(b) + 3072);
    CHECK(pool.live_bytes() == 1024 + 3072 + 512);
    pool.check_invariants();

    pool.deallocate(a, 1000);
    pool.deallocate(c, 500);  // merges with the tail of the chunk
    CHECK(pool.free_blocks() == 2);
    // The 1024-byte hole is the best fit for 700 bytes, not the large tail.
    void* d = pool.allocate(700);
    CHECK(d == a);
    pool.deallocate(b, 3000);
    pool.deallocate(d, 700);
    pool.check_invariants();
    CHECK(pool.free_blocks() == 1);
    CHECK(pool.live_bytes() == 0);
    CHECK(pool.reserved_bytes() == 1 * MiB);
    pool.release();
    CHECK(pool.reserved_bytes() == 0);
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("best_fit: ties between equal free blocks go to the lower address") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 1 * MiB}};
    std::vector<void*> blocks;
    for (int i = 0; i < 6; ++i) blocks.push_back(pool.allocate(256));
    pool.deallocate(blocks[3], 256);
    pool.deallocate(blocks[1], 256);
    CHECK(pool.allocate(256) == blocks[1]);
    CHECK(pool.allocate(256) == blocks[3]);
    for (void* block : blocks) pool.deallocate(block, 256);
}

TEST_CASE("best_fit: a remainder below minimum_split stays with the block") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 8 * KiB, .growth = growth_policy::as_needed(4 * KiB), .minimum_split = 2 * KiB}};
    void* a = pool.allocate(4 * KiB);
    void* b = pool.allocate(3 * KiB);  // 1 KiB would be left: below minimum_split, not split off
    CHECK(pool.live_bytes() == 8 * KiB);
    CHECK(pool.free_blocks() == 0);
    pool.check_invariants();
    pool.deallocate(b, 3 * KiB);  // the size asked, not the size kept
    pool.deallocate(a, 4 * KiB);
    pool.check_invariants();
    CHECK(pool.free_blocks() == 1);
}

TEST_CASE("best_fit: alignment above the granularity splits off the padding as a free block") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 1 * MiB}};
    // The first block aligned to 64 KiB: the chunk starts on such a boundary whatever the host
    // allocator returns, so the padding below lies at a known place.
    void* small = pool.allocate(256, 64 * KiB);
    void* aligned = pool.allocate(1000, 64 * KiB);
    CHECK(is_aligned(aligned, 64 * KiB));
    pool.check_invariants();
    void* filler = pool.allocate(256);  // best fit: the padding hole, right after `small`
    CHECK(address(filler) == address(small) + 256);
    pool.deallocate(aligned, 1000, 64 * KiB);
    pool.deallocate(small, 256, 64 * KiB);
    pool.deallocate(filler, 256);
    pool.check_invariants();
    CHECK(pool.free_blocks() == 1);
    // An alignment larger than any chunk: the chunk itself is taken with it.
    void* huge_alignment = pool.allocate(100, 4 * MiB);
    CHECK(is_aligned(huge_alignment, 4 * MiB));
    pool.deallocate(huge_alignment, 100, 4 * MiB);
    pool.release();
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("best_fit: growth policies size the chunks") {
    SUBCASE("geometric doubles what is reserved") {
        instrumented<> upstream;
        best_fit<upstream_ref> pool{upstream, {.initial_size = 1 * MiB, .growth = growth_policy::geometric(2)}};
        std::vector<void*> blocks;
        for (int i = 0; i < 7; ++i) blocks.push_back(pool.allocate(512 * KiB));
        CHECK(pool.chunks() == 3);  // 1 + 1 + 2 MiB
        CHECK(pool.reserved_bytes() == 4 * MiB);
        for (void* block : blocks) pool.deallocate(block, 512 * KiB);
    }
    SUBCASE("fixed step takes equal chunks, or the request when it is larger") {
        instrumented<> upstream;
        best_fit<upstream_ref> pool{upstream, {.initial_size = 0, .growth = growth_policy::fixed_step(1 * MiB)}};
        void* a = pool.allocate(600 * KiB);
        void* b = pool.allocate(600 * KiB);
        void* c = pool.allocate(3 * MiB);
        CHECK(pool.reserved_bytes() == 5 * MiB);
        pool.deallocate(a, 600 * KiB);
        pool.deallocate(b, 600 * KiB);
        pool.deallocate(c, 3 * MiB);
    }
    SUBCASE("as needed rounds each request to the granularity of the policy") {
        instrumented<> upstream;
        best_fit<upstream_ref> pool{upstream, {.initial_size = 0, .growth = growth_policy::as_needed(64 * KiB)}};
        void* a = pool.allocate(100 * KiB);
        CHECK(pool.reserved_bytes() == 128 * KiB);
        void* b = pool.allocate(20 * KiB);  // fits in the rest of the first chunk
        CHECK(pool.chunks() == 1);
        pool.deallocate(a, 100 * KiB);
        pool.deallocate(b, 20 * KiB);
    }
    SUBCASE("the maximum caps what is reserved, and the figures say so") {
        instrumented<> upstream;
        best_fit<upstream_ref> pool{upstream, {.initial_size = 1 * MiB, .maximum_size = 3 * MiB}};
        void* a = pool.allocate(1 * MiB);
        void* b = pool.allocate(1 * MiB);  // geometric wants 1 MiB more: fits
        void* c = pool.allocate(1 * MiB);  // wants 2 MiB more: capped at the 1 MiB left
        CHECK(pool.reserved_bytes() == 3 * MiB);
        try {
            static_cast<void>(pool.allocate(256));
            FAIL("allocate past the maximum did not throw");
        } catch (const out_of_memory& error) {
            CHECK(error.figures().live_bytes == 3 * MiB);
            CHECK(error.figures().reserved_bytes == 3 * MiB);
            CHECK(error.figures().cached_bytes == 0);
            CHECK(error.figures().limit_bytes == 3 * MiB);
        }
        pool.deallocate(b, 1 * MiB);
        CHECK(pool.allocate(1 * MiB) == b);
        pool.deallocate(a, 1 * MiB);
        pool.deallocate(b, 1 * MiB);
        pool.deallocate(c, 1 * MiB);
    }
}

TEST_CASE("best_fit: on upstream exhaustion it returns wholly free chunks and retries once") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 0, .growth = growth_policy::as_needed(256)}};
    void* small = pool.allocate(400 * KiB);
    void* other = pool.allocate(500 * KiB);
    pool.deallocate(small, 400 * KiB);  // a wholly free chunk stays cached
    upstream.limit(1200 * KiB);
    void* large = pool.allocate(600 * KiB);  // fits only once the cached 400 KiB went back
    CHECK(pool.chunks() == 2);
    CHECK(upstream.live_bytes() == 1100 * KiB);
    try {
        static_cast<void>(pool.allocate(600 * KiB));
        FAIL("allocate did not throw");
    } catch (const out_of_memory& error) {
        CHECK(error.requested_bytes() == 600 * KiB);
        CHECK(error.figures().live_bytes == 1100 * KiB);
        CHECK(error.figures().reserved_bytes == 1100 * KiB);
        CHECK(std::string(error.what()).find("best_fit") != std::string::npos);
    }
    CHECK(pool.try_allocate(600 * KiB) == nullptr);
    pool.check_invariants();
    pool.deallocate(other, 500 * KiB);
    pool.deallocate(large, 600 * KiB);
}

TEST_CASE("best_fit: a chunk the pool cannot record goes straight back") {
    instrumented<> upstream;
    upstream.fail_after(0);
    best_fit<upstream_ref> pool{upstream};
    CHECK_THROWS_AS(static_cast<void>(pool.allocate(100)), out_of_memory);
    CHECK(pool.reserved_bytes() == 0);
    upstream.stop_failing();
    void* pointer = pool.allocate(100);
    pool.deallocate(pointer, 100);
}

TEST_CASE("best_fit: owns() covers its live blocks and nothing else") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream, {.initial_size = 64 * KiB}};
    void* pointer = pool.allocate(1000);
    CHECK(pool.owns(pointer));
    CHECK(pool.owns(static_cast<char*>(pointer) + 999));
    CHECK_FALSE(pool.owns(static_cast<char*>(pointer) + 1024));  // the free rest of the chunk
    int outside = 0;
    CHECK_FALSE(pool.owns(&outside));
    pool.deallocate(pointer, 1000);
    CHECK_FALSE(pool.owns(pointer));
}

TEST_CASE("best_fit: moving hands every chunk to the new pool") {
    instrumented<> upstream;
    best_fit<upstream_ref> first{upstream, {.initial_size = 64 * KiB}};
    void* pointer = first.allocate(100);
    best_fit<upstream_ref> second{std::move(first)};
    CHECK(second.owns(pointer));
    CHECK(second.live_blocks() == 1);
    second.deallocate(pointer, 100);
    second.check_invariants();
    first.check_invariants();
    void* again = first.allocate(100);  // the moved-from pool starts over
    first.deallocate(again, 100);
}

TEST_CASE("best_fit: bookkeeping never touches the memory it manages") {
    simulated_resource addresses{{.capacity = std::size_t{64} << 30}};
    best_fit<ref<simulated_resource>> pool{addresses, {.initial_size = std::size_t{1} << 30}};
    void* big = pool.allocate(std::size_t{3} << 30);
    void* small = pool.allocate(100, 4096);
    pool.check_invariants();
    pool.deallocate(big, std::size_t{3} << 30);
    pool.deallocate(small, 100, 4096);
    pool.release();
    CHECK(addresses.live_bytes() == 0);
}

TEST_CASE("best_fit: randomized sequences keep every invariant and return all upstream memory") {
    for (std::uint64_t seed = 1; seed <= 4; ++seed) {
        CAPTURE(seed);
        instrumented<> upstream;
        {
            best_fit<upstream_ref> pool{
                upstream, {.initial_size = 256 * KiB, .growth = growth_policy::geometric(2), .minimum_split = seed % 2 ? 256 : 4 * KiB}};
            test::run_shuffled(pool, {.seed = seed, .steps = 2500, .touch = true});
            CHECK(pool.live_bytes() == 0);
            pool.release();
            CHECK(upstream.live_blocks() == 0);
            test::run_shuffled(pool, {.seed = seed + 100, .steps = 500, .allocate_percent = 75, .touch = true});
        }  // destruction returns the rest
        CHECK(upstream.live_blocks() == 0);
        CHECK(upstream.errors().empty());
    }
}

TEST_CASE("best_fit: randomized sequences over simulated address space, with large sizes and alignments") {
    simulated_resource addresses{{.capacity = std::size_t{64} << 30}};
    best_fit<ref<simulated_resource>> pool{addresses, {.initial_size = 8 * MiB, .growth = growth_policy::as_needed(2 * MiB)}};
    test::run_shuffled(pool, {.seed = 7, .steps = 3000, .small_bytes = 64 * KiB, .large_bytes = 64 * MiB, .largest_alignment_log2 = 20});
    pool.release();
    CHECK(addresses.live_bytes() == 0);
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("best_fit: bad deallocations are caught by assertions") {
    SUBCASE("a pointer the pool did not hand out") {
        const auto outcome = test::run_in_child([] {
            best_fit<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            pool.deallocate(static_cast<char*>(pointer) + 256, 744);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("did not hand out"));
    }
    SUBCASE("a double free") {
        const auto outcome = test::run_in_child([] {
            best_fit<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            pool.deallocate(pointer, 1000);
            pool.deallocate(pointer, 1000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("freed twice"));
    }
    SUBCASE("a wrong size") {
        const auto outcome = test::run_in_child([] {
            best_fit<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            pool.deallocate(pointer, 5000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("size other than"));
    }
}

TEST_CASE("best_fit: destruction with live blocks reports them and still returns every chunk") {
    instrumented<> upstream;
    const auto outcome = test::run_in_child([&upstream] {
        {
            best_fit<upstream_ref> pool{upstream};
            static_cast<void>(pool.allocate(1000));
            static_cast<void>(pool.allocate(24));
        }
        if (upstream.live_blocks() != 0) std::abort();
    });
    CHECK(outcome.exited_cleanly());
    CHECK(outcome.said("best_fit destroyed with 2 blocks (1280 bytes) still live"));
}
#else
TEST_CASE("best_fit: without assertions a bad deallocation changes nothing") {
    instrumented<> upstream;
    best_fit<upstream_ref> pool{upstream};
    void* pointer = pool.allocate(1000);
    pool.deallocate(static_cast<char*>(pointer) + 256, 744);
    pool.check_invariants();
    pool.deallocate(pointer, 5000);  // the recorded size is used
    pool.check_invariants();
    pool.deallocate(pointer, 1000);  // freed twice: ignored
    pool.check_invariants();
    CHECK(pool.live_bytes() == 0);
}
#endif
