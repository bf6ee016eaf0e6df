// What is special about size_classes: the class table, alignment by class, slabs, the large
// resource, release, exhaustion, bad input, and randomized sequences.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/size_classes.hpp>
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

}  // namespace

static_assert(std::is_default_constructible_v<size_classes<new_delete_resource>>);
static_assert(resource_with<size_classes<new_delete_resource>, host_accessible>);
static_assert(has_owns<size_classes<ref<simulated_resource>>>);
static_assert(!has_owns<size_classes<new_delete_resource>>);
static_assert(!has_property<size_classes<new_delete_resource, ref<simulated_resource>>, host_accessible>);

TEST_CASE("size_classes: the default classes are four per doubling from 256 B to 1 MiB") {
    size_classes<new_delete_resource> pool;
    const auto& sizes = pool.sizes();
    REQUIRE(sizes.size() == 49);
    CHECK(sizes[0] == 256);
    CHECK(sizes[1] == 320);
    CHECK(sizes[4] == 512);
    CHECK(sizes.back() == 1 * MiB);
    CHECK(pool.block_size(1, 1) == 256);
    CHECK(pool.block_size(300, 64) == 320);
    CHECK(pool.block_size(300, 256) == 512);  // 320, 384 and 448 are not 256-aligned
    CHECK(pool.block_size(1000) == 1024);
    CHECK(pool.block_size(1025) == 1280);
    CHECK(pool.block_size(5000, 4096) == 8192);
    CHECK(pool.block_size(1 * MiB) == 1 * MiB);
    CHECK(pool.block_size(1 * MiB + 1) == 0);  // to the large resource
    CHECK(pool.block_size(100, 8192) == 0);  // more alignment than a slab is asked for
    for (std::size_t bytes = 1; bytes <= 1 * MiB; bytes += 37) {
        const std::size_t block = pool.block_size(bytes, 1);
        const auto smallest = std::lower_bound(sizes.begin(), sizes.end(), bytes);
        REQUIRE(block == *smallest);
    }
}

TEST_CASE("size_classes: explicit sizes, and options that make no sense") {
    size_classes<new_delete_resource> pool{{}, {.sizes = {100, 1000, 4000}}};
    CHECK(pool.block_size(50, 4) == 100);
    CHECK(pool.block_size(50, 8) == 1000);  // 100 is only 4-aligned
    CHECK(pool.block_size(50, 64) == 0);  // no class is 64-aligned
    CHECK(pool.block_size(4001) == 0);
    void* pointer = pool.allocate(50, 4);
    pool.deallocate(pointer, 50, 4);
    using pool_type = size_classes<new_delete_resource>;
    CHECK_THROWS_AS(pool_type({}, {.sizes = {100, 100}}), std::invalid_argument);
    CHECK_THROWS_AS(pool_type({}, {.smallest = 0}), std::invalid_argument);
    CHECK_THROWS_AS(pool_type({}, {.slab_alignment = 3000}), std::invalid_argument);
}

TEST_CASE("size_classes: one slab serves many blocks of its class") {
    instrumented<> upstream;
    size_classes<upstream_ref> pool{upstream, {.slab_size = 64 * KiB}};
    std::vector<void*> blocks;
    for (int i = 0; i < 256; ++i) blocks.push_back(pool.allocate(200));
    CHECK(upstream.allocations() == 1);
    CHECK(pool.live_bytes() == 256 * 256);
    for (int i = 1; i < 256; ++i) CHECK(static_cast<char*>(blocks[i]) == static_cast<char*>(blocks[i - 1]) + 256);
    blocks.push_back(pool.allocate(200));  // the first slab is full
    CHECK(upstream.allocations() == 2);
    pool.check_invariants();
    for (void* block : blocks) pool.deallocate(block, 200);
    CHECK(pool.chunks() == 2);
    pool.release();
    CHECK(pool.chunks() == 0);
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("size_classes: large requests go to the upstream, or to the resource named for them") {
    SUBCASE("the upstream by default") {
        instrumented<> upstream;
        size_classes<upstream_ref> pool{upstream};
        void* large = pool.allocate(3 * MiB);
        CHECK(upstream.live_bytes() == 3 * MiB);
        pool.deallocate(large, 3 * MiB);
        CHECK(upstream.live_blocks() == 0);
    }
    SUBCASE("a second resource") {
        instrumented<> slabs, large_blocks;
        size_classes<upstream_ref, upstream_ref> pool{slabs, large_blocks, {.slab_size = 64 * KiB}};
        void* small = pool.allocate(1000);
        void* large = pool.allocate(3 * MiB);
        void* aligned = pool.allocate(100, 64 * KiB);
        CHECK(slabs.live_blocks() == 1);
        CHECK(large_blocks.live_blocks() == 2);
        pool.deallocate(small, 1000);
        pool.deallocate(large, 3 * MiB);
        pool.deallocate(aligned, 100, 64 * KiB);
        CHECK(large_blocks.live_blocks() == 0);
        CHECK(large_blocks.errors().empty());
    }
}

TEST_CASE("size_classes: exhaustion falls back to one-block slabs, releases, then throws with figures") {
    instrumented<> upstream;
    size_classes<upstream_ref> pool{upstream, {.slab_size = 1 * MiB}};
    void* cached = pool.allocate(64 * KiB);
    pool.deallocate(cached, 64 * KiB);  // a wholly free 1 MiB slab stays
    upstream.limit(1 * MiB + 128 * KiB);
    void* a = pool.allocate(100 * KiB);  // class 112 KiB: a full slab does not fit, one block does
    CHECK(pool.reserved_bytes() == 1 * MiB + 112 * KiB);
    void* b = pool.allocate(100 * KiB);  // needs the cached slab back
    CHECK(pool.reserved_bytes() == 224 * KiB);
    std::vector<void*> more;
    try {
        for (int i = 0; i < 100; ++i) more.push_back(pool.allocate(100 * KiB));
        FAIL("allocate did not throw");
    } catch (const out_of_memory& error) {
        CHECK(error.requested_bytes() == 100 * KiB);
        CHECK(error.figures().live_bytes == pool.live_bytes());
        CHECK(error.figures().reserved_bytes == pool.reserved_bytes());
        CHECK(std::string(error.what()).find("size_classes") != std::string::npos);
    }
    pool.check_invariants();
    pool.deallocate(a, 100 * KiB);
    pool.deallocate(b, 100 * KiB);
    for (void* block : more) pool.deallocate(block, 100 * KiB);
}

TEST_CASE("size_classes: the maximum caps the bytes in slabs") {
    instrumented<> upstream;
    size_classes<upstream_ref> pool{upstream, {.slab_size = 64 * KiB, .maximum_size = 128 * KiB}};
    void* a = pool.allocate(256);
    void* b = pool.allocate(512);
    CHECK_THROWS_AS(static_cast<void>(pool.allocate(1024)), out_of_memory);
    pool.deallocate(a, 256);
    pool.deallocate(b, 512);
}

TEST_CASE("size_classes: owns() sees live blocks of slabs and of the large resource") {
    simulated_resource addresses;
    size_classes<ref<simulated_resource>> pool{addresses};
    void* small = pool.allocate(1000);
    void* large = pool.allocate(2 * MiB);
    CHECK(pool.owns(small));
    CHECK(pool.owns(large));
    CHECK_FALSE(pool.owns(static_cast<char*>(small) + 1024));  // the next, free block of the slab
    pool.deallocate(small, 1000);
    pool.deallocate(large, 2 * MiB);
    CHECK_FALSE(pool.owns(small));
    CHECK_FALSE(pool.owns(large));
}

TEST_CASE("size_classes: randomized sequences keep every invariant and return all upstream memory") {
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
        CAPTURE(seed);
        instrumented<> upstream;
        {
            size_classes<upstream_ref> pool{upstream, {.slab_size = 128 * KiB}};
            test::run_shuffled(pool, {.seed = seed, .steps = 2500, .large_bytes = 2 * MiB, .touch = true});
            pool.release();
            CHECK(upstream.live_blocks() == 0);
            test::run_shuffled(pool, {.seed = seed + 10, .steps = 500, .allocate_percent = 75, .touch = true});
        }
        CHECK(upstream.live_blocks() == 0);
        CHECK(upstream.errors().empty());
    }
}

TEST_CASE("size_classes: randomized sequences over simulated address space, explicit classes") {
    simulated_resource addresses;
    size_classes<ref<simulated_resource>> pool{addresses, {.sizes = {512, 1536, 4096, 10000, 65536}}};
    test::run_shuffled(pool, {.seed = 9, .steps = 3000, .small_bytes = 70000, .largest_alignment_log2 = 14});
    pool.release();
    CHECK(addresses.live_bytes() == 0);
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("size_classes: bad deallocations are caught by assertions") {
    SUBCASE("a pointer inside a block") {
        const auto outcome = test::run_in_child([] {
            size_classes<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            pool.deallocate(static_cast<char*>(pointer) + 256, 700);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("did not hand out"));
    }
    SUBCASE("a size of another class") {
        const auto outcome = test::run_in_child([] {
            size_classes<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            pool.deallocate(pointer, 3000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("a size other than the one allocated"));
    }
    SUBCASE("a slab block freed as a large one") {
        const auto outcome = test::run_in_child([] {
            size_classes<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            pool.deallocate(pointer, 2 * MiB);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("freed as large"));
    }
    SUBCASE("a double free") {
        const auto outcome = test::run_in_child([] {
            size_classes<new_delete_resource> pool;
            void* pointer = pool.allocate(1000);
            void* other = pool.allocate(1000);
            pool.deallocate(pointer, 1000);
            pool.deallocate(pointer, 1000);
            pool.deallocate(other, 1000);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("freed twice"));
    }
    SUBCASE("a large block freed twice, caught before it reaches the upstream") {
        const auto outcome = test::run_in_child([] {
            size_classes<new_delete_resource> pool;
            void* pointer = pool.allocate(2 * MiB);
            void* other = pool.allocate(2 * MiB);
            pool.deallocate(pointer, 2 * MiB);
            pool.deallocate(pointer, 2 * MiB);
            pool.deallocate(other, 2 * MiB);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("size_classes: deallocate of a large block it did not hand out, or one freed twice"));
    }
    SUBCASE("a foreign pointer freed as a large block") {
        const auto outcome = test::run_in_child([] {
            size_classes<new_delete_resource> pool;
            static_cast<void>(pool.allocate(1000));
            int outside = 0;
            pool.deallocate(&outside, 2 * MiB);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("size_classes: deallocate of a large block it did not hand out"));
    }
    SUBCASE("a large block freed with another large size") {
        const auto outcome = test::run_in_child([] {
            size_classes<new_delete_resource> pool;
            void* pointer = pool.allocate(2 * MiB);
            pool.deallocate(pointer, 3 * MiB);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("size_classes: deallocate of a large block with a size other than the one allocated"));
    }
}

TEST_CASE("size_classes: destruction with live blocks reports them and still returns every slab") {
    instrumented<> upstream;
    const auto outcome = test::run_in_child([&upstream] {
        {
            size_classes<upstream_ref> pool{upstream};
            static_cast<void>(pool.allocate(1000));
        }
        if (upstream.live_blocks() != 0) std::abort();
    });
    CHECK(outcome.exited_cleanly());
    CHECK(outcome.said("size_classes destroyed with 1 block (1024 bytes) still live"));
}
#else
TEST_CASE("size_classes: without assertions a bad deallocation changes nothing") {
    instrumented<> upstream;
    size_classes<upstream_ref> pool{upstream};
    void* pointer = pool.allocate(1000);
    pool.deallocate(static_cast<char*>(pointer) + 256, 700);
    pool.deallocate(pointer, 2 * MiB);
    pool.check_invariants();
    pool.deallocate(pointer, 1000);
    pool.deallocate(pointer, 1000);
    pool.check_invariants();
    CHECK(pool.live_bytes() == 0);
    CHECK(upstream.errors().empty());
}

namespace {
// The live bytes size_classes reports when a class cannot get a slab: its own and Large's.
template <class Pool>
std::size_t size_classes_live_bytes_in_figures(Pool& pool) {
    try {
        static_cast<void>(pool.allocate(1000));
    } catch (const out_of_memory& error) {
        return error.figures().live_bytes.value_or(std::size_t(-1));
    }
    return std::size_t(-1);
}
}  // namespace

TEST_CASE("size_classes: without assertions a bad large free neither reaches the upstream nor wraps a count") {
    SUBCASE("an upstream without owns(): a free no live large block can match") {
        instrumented<> upstream;
        size_classes<upstream_ref> pool{upstream, {.maximum_size = 0}};  // no slab: figures show the counts
        void* pointer = pool.allocate(2 * MiB);
        pool.deallocate(pointer, 2 * MiB);
        pool.deallocate(pointer, 2 * MiB);  // freed twice
        int outside = 0;
        pool.deallocate(&outside, 2 * MiB);  // never handed out
        CHECK(upstream.errors().empty());
        CHECK(upstream.live_blocks() == 0);
        CHECK(size_classes_live_bytes_in_figures(pool) == 0);
        void* again = pool.allocate(2 * MiB);
        CHECK(size_classes_live_bytes_in_figures(pool) == 2 * MiB);
        pool.deallocate(again, 2 * MiB);
        CHECK(size_classes_live_bytes_in_figures(pool) == 0);
        pool.check_invariants();
    }
    SUBCASE("an upstream with owns(): a second free while another large block is live") {
        simulated_resource addresses;
        size_classes<ref<simulated_resource>> pool{addresses, {.maximum_size = 0}};
        void* pointer = pool.allocate(2 * MiB);
        void* other = pool.allocate(3 * MiB);
        pool.deallocate(pointer, 2 * MiB);
        pool.deallocate(pointer, 2 * MiB);  // freed twice: the upstream no longer owns it
        CHECK(size_classes_live_bytes_in_figures(pool) == 3 * MiB);
        CHECK(pool.owns(other));
        pool.deallocate(other, 3 * MiB);
        CHECK(size_classes_live_bytes_in_figures(pool) == 0);
        CHECK(addresses.live_bytes() == 0);
    }
}
#endif

TEST_CASE("size_classes::try_allocate_cached serves only from its slabs, and from Large's cache") {
    instrumented<> upstream;
    size_classes_options options;
    options.sizes = {256, 1024};
    options.slab_size = 1024;
    size_classes<upstream_ref> pool{upstream, options};
    CHECK(pool.try_allocate_cached(200) == nullptr);  // no slab: none taken
    CHECK(upstream.allocations() == 0);
    void* a = pool.allocate(200);
    void* b = pool.try_allocate_cached(100);
    CHECK(b == static_cast<char*>(a) + 256);
    CHECK(pool.try_allocate_cached(1000) == nullptr);  // its class has no slab yet
    CHECK(pool.try_allocate_cached(4000) == nullptr);  // large: the upstream is never asked
    CHECK(pool.try_allocate_cached(0) == nullptr);
    CHECK(pool.try_allocate_cached(16, 3) == nullptr);
    CHECK(upstream.allocations() == 1);
    pool.check_invariants();
    pool.deallocate(a, 200);
    pool.deallocate(b, 100);

    // A Large with a cache of its own serves large requests from it.
    using large_pool = best_fit<upstream_ref>;
    size_classes<upstream_ref, large_pool> layered{upstream, large_pool{upstream, {.initial_size = 64 * KiB}}, options};
    CHECK(layered.try_allocate_cached(4000) == nullptr);
    void* large = layered.allocate(4000);
    void* cached = layered.try_allocate_cached(8000);
    REQUIRE(cached != nullptr);
    CHECK(layered.large_resource().live_bytes() == 4096 + 8192);
    layered.deallocate(large, 4000);
    layered.deallocate(cached, 8000);
    CHECK(layered.large_resource().live_bytes() == 0);
}
