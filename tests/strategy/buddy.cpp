// What is special about buddy: power-of-two blocks, splitting and merging with buddies, chunks
// of their own for large requests, release, exhaustion, bad input, randomized sequences.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/buddy.hpp>
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
using poolkit::test::MiB;

using poolkit::test::address;

}  // namespace

static_assert(std::is_default_constructible_v<buddy<new_delete_resource>>);
static_assert(resource_with<buddy<new_delete_resource>, host_accessible>);

TEST_CASE("buddy: blocks are powers of two, at least the minimum, holding size and alignment") {
    buddy<new_delete_resource> pool{{}, {.chunk_size = 1 * MiB, .minimum_block = 512}};
    CHECK(pool.block_size(1, 1) == 512);
    CHECK(pool.block_size(513, 1) == 1024);
    CHECK(pool.block_size(100, 4096) == 4096);
    CHECK(pool.block_size(3 * MiB) == 4 * MiB);
    CHECK(pool.block_size(std::numeric_limits<std::size_t>::max()) == 0);
}

TEST_CASE("buddy: splitting hands out halves in address order, freeing merges them back") {
    instrumented<> upstream;
    buddy<upstream_ref> pool{upstream, {.chunk_size = 64 * KiB, .minimum_block = 1 * KiB}};
    void* a = pool.allocate(1 * KiB);
    void* b = pool.allocate(1 * KiB);
    void* c = pool.allocate(2 * KiB);
    CHECK(address(b) == address(a) + 1 * KiB);
    CHECK(address(c) == address(a) + 2 * KiB);
    CHECK(upstream.allocations() == 1);
    pool.check_invariants();
    pool.deallocate(b, 1 * KiB);
    void* d = pool.allocate(1000);  // b's slot, the smallest free block
    CHECK(d == b);
    pool.deallocate(a, 1 * KiB);
    pool.deallocate(d, 1000);
    pool.deallocate(c, 2 * KiB);
    pool.check_invariants();
    void* whole = pool.allocate(64 * KiB);  // everything merged back into the chunk
    CHECK(whole == a);
    CHECK(pool.chunks() == 1);
    pool.deallocate(whole, 64 * KiB);
    pool.release();
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("buddy: a request above the chunk size gets a chunk of its own, and large alignments") {
    instrumented<> upstream;
    buddy<upstream_ref> pool{upstream, {.chunk_size = 64 * KiB, .minimum_block = 512, .chunk_alignment = 4 * KiB}};
    void* big = pool.allocate(100 * KiB);
    CHECK(pool.reserved_bytes() == 128 * KiB);
    void* aligned = pool.allocate(100, 1 * MiB);
    CHECK(is_aligned(aligned, 1 * MiB));
    void* small = pool.allocate(100, 2 * KiB);
    CHECK(is_aligned(small, 2 * KiB));
    pool.check_invariants();
    pool.deallocate(big, 100 * KiB);
    pool.deallocate(aligned, 100, 1 * MiB);
    pool.deallocate(small, 100, 2 * KiB);
    pool.release();
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("buddy: exhaustion falls back to the block size, releases, then throws with figures") {
    instrumented<> upstream;
    buddy<upstream_ref> pool{upstream, {.chunk_size = 1 * MiB, .minimum_block = 512}};
    void* cached = pool.allocate(512);
    pool.deallocate(cached, 512);  // a wholly free 1 MiB chunk stays
    upstream.limit(2 * MiB + 512 * KiB);
    void* big = pool.allocate(2 * MiB);  // fits only once the cached chunk went back
    CHECK(pool.reserved_bytes() == 2 * MiB);
    void* small = pool.allocate(40 * KiB);  // a 1 MiB chunk does not fit, a 64 KiB one does
    CHECK(pool.reserved_bytes() == 2 * MiB + 64 * KiB);
    try {
        static_cast<void>(pool.allocate(600 * KiB));
        FAIL("allocate did not throw");
    } catch (const out_of_memory& error) {
        CHECK(error.requested_bytes() == 600 * KiB);
        CHECK(error.figures().live_bytes == 2 * MiB + 64 * KiB);
        CHECK(error.figures().reserved_bytes == 2 * MiB + 64 * KiB);
        CHECK(error.figures().cached_bytes == 0);
    }
    CHECK(pool.try_allocate(600 * KiB) == nullptr);
    pool.check_invariants();
    pool.deallocate(big, 2 * MiB);
    void* again = pool.allocate(600 * KiB);  // from the big chunk, now free
    CHECK(pool.reserved_bytes() == 2 * MiB + 64 * KiB);
    pool.deallocate(again, 600 * KiB);
    pool.deallocate(small, 40 * KiB);
}

TEST_CASE("buddy: the maximum caps what is reserved") {
    instrumented<> upstream;
    buddy<upstream_ref> pool{upstream, {.chunk_size = 64 * KiB, .maximum_size = 128 * KiB}};
    void* a = pool.allocate(64 * KiB);
    void* b = pool.allocate(64 * KiB);
    try {
        static_cast<void>(pool.allocate(512));
        FAIL("allocate did not throw");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().limit_bytes == 128 * KiB);
    }
    pool.deallocate(a, 64 * KiB);
    pool.deallocate(b, 64 * KiB);
}

TEST_CASE("buddy: owns() sees live blocks only") {
    buddy<new_delete_resource> pool{{}, {.chunk_size = 64 * KiB, .minimum_block = 512}};
    void* a = pool.allocate(4 * KiB);
    void* b = pool.allocate(512);
    CHECK(pool.owns(a));
    CHECK(pool.owns(static_cast<char*>(a) + 4 * KiB - 1));
    CHECK(pool.owns(b));
    CHECK_FALSE(pool.owns(static_cast<char*>(b) + 512));
    int outside = 0;
    CHECK_FALSE(pool.owns(&outside));
    pool.deallocate(a, 4 * KiB);
    CHECK_FALSE(pool.owns(a));
    pool.deallocate(b, 512);
}

TEST_CASE("buddy: randomized sequences keep every invariant and return all upstream memory") {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        CAPTURE(seed);
        instrumented<> upstream;
        {
            buddy<upstream_ref> pool{upstream, {.chunk_size = 256 * KiB, .minimum_block = std::size_t{1024} << (seed % 3)}};
            test::run_shuffled(pool, {.seed = seed, .steps = 2000, .large_bytes = 100 * KiB, .touch = true});
            pool.release();
            CHECK(upstream.live_blocks() == 0);
            test::run_shuffled(pool, {.seed = seed + 10, .steps = 400, .allocate_percent = 75, .touch = true});
        }
        CHECK(upstream.live_blocks() == 0);
        CHECK(upstream.errors().empty());
    }
}

TEST_CASE("buddy: randomized sequences over simulated address space, with large alignments") {
    simulated_resource addresses{{.capacity = std::size_t{64} << 30}};
    buddy<ref<simulated_resource>> pool{addresses, {.chunk_size = 4 * MiB, .minimum_block = 4 * KiB, .chunk_alignment = 16 * KiB}};
    test::run_shuffled(pool, {.seed = 5, .steps = 3000, .small_bytes = 64 * KiB, .large_bytes = 4 * MiB, .largest_alignment_log2 = 20});
    pool.release();
    CHECK(addresses.live_bytes() == 0);
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("buddy: bad deallocations are caught by assertions") {
    SUBCASE("a pointer inside a block") {
        const auto outcome = test::run_in_child([] {
            buddy<new_delete_resource> pool;
            void* pointer = pool.allocate(4096);
            pool.deallocate(static_cast<char*>(pointer) + 512, 512);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("did not hand out"));
    }
    SUBCASE("a size of another order") {
        const auto outcome = test::run_in_child([] {
            buddy<new_delete_resource> pool;
            void* pointer = pool.allocate(4096);
            pool.deallocate(pointer, 8192);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("size other than"));
    }
    SUBCASE("a double free") {
        const auto outcome = test::run_in_child([] {
            buddy<new_delete_resource> pool;
            void* pointer = pool.allocate(4096);
            void* other = pool.allocate(4096);
            pool.deallocate(pointer, 4096);
            pool.deallocate(pointer, 4096);
            pool.deallocate(other, 4096);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("freed twice"));
    }
}

TEST_CASE("buddy: destruction with live blocks reports them") {
    const auto outcome = test::run_in_child([] {
        buddy<new_delete_resource> pool;
        static_cast<void>(pool.allocate(3000));
    });
    CHECK(outcome.exited_cleanly());
    CHECK(outcome.said("buddy destroyed with 1 block (4096 bytes) still live"));
}
#endif

TEST_CASE("buddy::try_allocate_cached serves only from free blocks it holds") {
    instrumented<> upstream;
    buddy<upstream_ref> pool{upstream, {.chunk_size = 64 * KiB}};
    CHECK(pool.try_allocate_cached(1 * KiB) == nullptr);  // nothing held: no growth
    CHECK(upstream.allocations() == 0);
    void* a = pool.allocate(1 * KiB);
    void* cached = pool.try_allocate_cached(3000);  // splits the free 4 KiB half
    REQUIRE(cached != nullptr);
    CHECK(pool.block_size(3000) == 4 * KiB);
    CHECK(reinterpret_cast<std::uintptr_t>(cached) % (4 * KiB) == 0);
    CHECK(pool.live_bytes() == 5 * KiB);
    CHECK(pool.try_allocate_cached(64 * KiB) == nullptr);  // no free block of a whole chunk
    CHECK(pool.try_allocate_cached(0) == nullptr);
    CHECK(pool.try_allocate_cached(16, 3) == nullptr);
    CHECK(upstream.allocations() == 1);
    pool.check_invariants();
    pool.deallocate(cached, 3000);
    pool.deallocate(a, 1 * KiB);
}
