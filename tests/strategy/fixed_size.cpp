// What is special about fixed_size: one block size from slabs, other requests passed to the
// upstream, release, exhaustion, bad input, and randomized sequences.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/fixed_size.hpp>
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

}  // namespace

static_assert(std::is_default_constructible_v<fixed_size<new_delete_resource>>);
static_assert(resource_with<fixed_size<new_delete_resource>, host_accessible>);
static_assert(has_owns<fixed_size<ref<simulated_resource>>>);

TEST_CASE("fixed_size: blocks of one size from slabs, other requests go to the upstream") {
    instrumented<> upstream;
    fixed_size<upstream_ref> pool{upstream, {.block_size = 768, .slab_size = 768 * 10}};
    CHECK(pool.block_alignment() == 256);
    std::vector<void*> blocks;
    for (int i = 0; i < 10; ++i) blocks.push_back(pool.allocate(700));
    CHECK(upstream.allocations() == 1);
    void* big = pool.allocate(769);
    void* aligned = pool.allocate(100, 512);
    CHECK(upstream.allocations() == 3);
    CHECK(is_aligned(aligned, 512));
    blocks.push_back(pool.allocate(1));
    CHECK(pool.chunks() == 2);
    pool.check_invariants();
    pool.deallocate(big, 769);
    pool.deallocate(aligned, 100, 512);
    for (void* block : blocks) pool.deallocate(block, 700);
    pool.release();
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("fixed_size: the most recently freed block is reused first") {
    fixed_size<new_delete_resource> pool;
    void* a = pool.allocate(256);
    void* b = pool.allocate(256);
    pool.deallocate(a, 256);
    CHECK(pool.allocate(256) == a);
    pool.deallocate(a, 256);
    pool.deallocate(b, 256);
}

TEST_CASE("fixed_size: exhaustion throws out_of_memory with figures, then recovers") {
    instrumented<> upstream;
    fixed_size<upstream_ref> pool{upstream, {.block_size = 4 * KiB, .slab_size = 64 * KiB}};
    upstream.limit(10 * KiB);
    void* a = pool.allocate(4 * KiB);
    void* b = pool.allocate(4 * KiB);
    try {
        static_cast<void>(pool.allocate(4 * KiB));
        FAIL("allocate did not throw");
    } catch (const out_of_memory& error) {
        CHECK(error.figures().live_bytes == 8 * KiB);
        CHECK(error.figures().reserved_bytes == 8 * KiB);
    }
    pool.deallocate(a, 4 * KiB);
    CHECK(pool.allocate(4 * KiB) == a);
    pool.deallocate(a, 4 * KiB);
    pool.deallocate(b, 4 * KiB);
}

TEST_CASE("fixed_size: randomized sequences keep every invariant and return all upstream memory") {
    instrumented<> upstream;
    {
        fixed_size<upstream_ref> pool{upstream, {.block_size = 4096, .slab_size = 32 * KiB}};
        test::run_shuffled(pool, {.seed = 3, .steps = 3000, .small_bytes = 4096, .large_bytes = 9000, .touch = true});
        pool.release();
        CHECK(upstream.live_blocks() == 0);
        test::run_shuffled(pool, {.seed = 4, .steps = 500, .allocate_percent = 80, .touch = true});
    }
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("fixed_size: bad deallocations are caught by assertions") {
    SUBCASE("a pointer inside a block") {
        const auto outcome = test::run_in_child([] {
            fixed_size<new_delete_resource> pool;
            void* pointer = pool.allocate(256);
            pool.deallocate(static_cast<char*>(pointer) + 16, 200);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("did not hand out"));
    }
    SUBCASE("a pool block freed with a size the upstream would serve") {
        const auto outcome = test::run_in_child([] {
            fixed_size<new_delete_resource> pool;
            void* pointer = pool.allocate(256);
            pool.deallocate(pointer, 1000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("size other than the one allocated"));
    }
    SUBCASE("a request passed on, freed twice, caught before it reaches the upstream") {
        const auto outcome = test::run_in_child([] {
            fixed_size<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            void* other = pool.allocate(1000);
            pool.deallocate(pointer, 1000);
            pool.deallocate(pointer, 1000);
            pool.deallocate(other, 1000);
        });
        CHECK(outcome.aborted());
        CHECK(
            outcome.said("fixed_size: deallocate of a block passed on to the upstream that it did not hand out, or "
                         "one freed twice"));
    }
    SUBCASE("a foreign pointer freed with a size the upstream would serve") {
        const auto outcome = test::run_in_child([] {
            fixed_size<new_delete_resource> pool;
            int outside = 0;
            pool.deallocate(&outside, 1000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("fixed_size: deallocate of a block passed on to the upstream that it did not hand out"));
    }
    SUBCASE("a request passed on, freed with another size") {
        const auto outcome = test::run_in_child([] {
            fixed_size<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            pool.deallocate(pointer, 2000);
        });
        CHECK(outcome.aborted());
        CHECK(
            outcome.said("fixed_size: deallocate of a block passed on to the upstream with a size other than the one "
                         "allocated"));
    }
}

TEST_CASE("fixed_size: destruction with live blocks reports them") {
    const auto outcome = test::run_in_child([] {
        fixed_size<new_delete_resource> pool;
        static_cast<void>(pool.allocate(256));
        static_cast<void>(pool.allocate(256));
    });
    CHECK(outcome.exited_cleanly());
    CHECK(outcome.said("fixed_size destroyed with 2 blocks (512 bytes) still live"));
}
#else
namespace {
// The live bytes fixed_size reports when it cannot get a slab: its own and those passed on.
template <class Pool>
std::size_t fixed_size_live_bytes_in_figures(Pool& pool) {
    try {
        static_cast<void>(pool.allocate(100));
    } catch (const out_of_memory& error) {
        return error.figures().live_bytes.value_or(std::size_t(-1));
    }
    return std::size_t(-1);
}
}  // namespace

TEST_CASE("fixed_size: without assertions a bad free of a request passed on neither reaches the upstream nor wraps a count") {
    SUBCASE("an upstream without owns(): a free no live block passed on can match") {
        instrumented<> upstream;
        fixed_size<upstream_ref> pool{upstream, {.maximum_size = 0}};  // no slab: figures show the counts
        void* pointer = pool.allocate(1000);
        pool.deallocate(pointer, 1000);
        pool.deallocate(pointer, 1000);  // freed twice
        int outside = 0;
        pool.deallocate(&outside, 1000);  // never handed out
        CHECK(upstream.errors().empty());
        CHECK(upstream.live_blocks() == 0);
        CHECK(fixed_size_live_bytes_in_figures(pool) == 0);
        void* again = pool.allocate(1000);
        CHECK(fixed_size_live_bytes_in_figures(pool) == 1000);
        pool.deallocate(again, 1000);
        CHECK(fixed_size_live_bytes_in_figures(pool) == 0);
        pool.check_invariants();
    }
    SUBCASE("an upstream with owns(): a second free while another block passed on is live") {
        simulated_resource addresses;
        fixed_size<ref<simulated_resource>> pool{addresses, {.maximum_size = 0}};
        void* pointer = pool.allocate(1000);
        void* other = pool.allocate(3000);
        pool.deallocate(pointer, 1000);
        pool.deallocate(pointer, 1000);  // freed twice: the upstream no longer owns it
        CHECK(fixed_size_live_bytes_in_figures(pool) == 3000);
        CHECK(pool.owns(other));
        pool.deallocate(other, 3000);
        CHECK(fixed_size_live_bytes_in_figures(pool) == 0);
        CHECK(addresses.live_bytes() == 0);
    }
}
#endif

TEST_CASE("fixed_size::try_allocate_cached serves only from free blocks of its slabs") {
    instrumented<> upstream;
    fixed_size<upstream_ref> pool{upstream, {.block_size = 256, .slab_size = 512}};
    CHECK(pool.try_allocate_cached(100) == nullptr);  // no slab: none taken
    CHECK(upstream.allocations() == 0);
    void* a = pool.allocate(100);
    void* b = pool.try_allocate_cached(200);
    CHECK(b == static_cast<char*>(a) + 256);
    CHECK(pool.try_allocate_cached(200) == nullptr);  // the slab is full
    CHECK(pool.try_allocate_cached(1000) == nullptr);  // not a block request: never passed on
    CHECK(pool.try_allocate_cached(0) == nullptr);
    CHECK(pool.try_allocate_cached(16, 3) == nullptr);
    CHECK(upstream.allocations() == 1);
    pool.check_invariants();
    pool.deallocate(a, 100);
    pool.deallocate(b, 200);
}
