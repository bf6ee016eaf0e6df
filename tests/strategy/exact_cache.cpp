// What is special about exact_cache: whole blocks reused within max_waste, the cache bounded by the
// live bytes, exhaustion, bad input, and randomized sequences.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/exact_cache.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <stdexcept>
#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;
using upstream_ref = ref<instrumented<>>;

using poolkit::test::KiB;
using poolkit::test::MiB;

}  // namespace

static_assert(std::is_default_constructible_v<exact_cache<new_delete_resource>>);
static_assert(resource_with<exact_cache<new_delete_resource>, host_accessible>);

TEST_CASE("exact_cache: a freed block serves a request it exceeds by at most max_waste, and nothing smaller") {
    instrumented<> upstream;
    exact_cache<upstream_ref> cache{upstream};
    void* keep = cache.allocate(64 * MiB);  // live bytes, so that the cache may hold some
    void* block = cache.allocate(16 * MiB);
    cache.deallocate(block, 16 * MiB);
    CHECK(cache.cached_bytes() == 16 * MiB);
    CHECK(cache.try_allocate_cached(15 * MiB + 512 * KiB) == block);  // a 31st of the request wasted: within 1/16
    CHECK(cache.live_bytes() == 80 * MiB);  // the whole block
    cache.deallocate(block, 15 * MiB + 512 * KiB);
    CHECK(cache.try_allocate_cached(15 * MiB) == nullptr);  // it would waste a 15th
    CHECK(cache.try_allocate_cached(17 * MiB) == nullptr);  // too small
    CHECK(cache.try_allocate_cached(16 * MiB, 2 * default_alignment) == nullptr);  // not aligned for it
    CHECK(upstream.allocations() == 2);
    cache.check_invariants();
    cache.deallocate(keep, 64 * MiB);
    cache.release();
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("exact_cache: on a miss the cache goes back when it would pass max_cached of the live bytes") {
    instrumented<> upstream;
    exact_cache<upstream_ref> cache{upstream, {.max_waste = 0, .max_cached = 0.25}};
    void* live = cache.allocate(64 * MiB);
    void* a = cache.allocate(8 * MiB);
    cache.deallocate(a, 8 * MiB);  // 8 MiB cached against 64 MiB live
    void* b = cache.allocate(4 * MiB);  // a miss: 8 + 4 <= 16, the cache stays
    CHECK(cache.cached_bytes() == 8 * MiB);
    cache.deallocate(b, 4 * MiB);
    void* c = cache.allocate(6 * MiB);  // 12 + 6 > 17: everything cached goes back first
    CHECK(cache.cached_bytes() == 0);
    CHECK(upstream.live_bytes() == 70 * MiB);
    cache.deallocate(c, 6 * MiB);
    cache.deallocate(live, 64 * MiB);
    cache.check_invariants();
}

TEST_CASE("exact_cache: when the upstream is exhausted the cache goes back and the request is tried again") {
    instrumented<> upstream;
    upstream.limit(10 * MiB);
    exact_cache<upstream_ref> cache{upstream, {.max_cached = 100}};
    void* a = cache.allocate(6 * MiB);
    cache.deallocate(a, 6 * MiB);
    void* b = cache.allocate(8 * MiB);  // 6 + 8 > 10: the 6 MiB block goes back, then it fits
    CHECK(b != nullptr);
    CHECK(cache.cached_bytes() == 0);
    CHECK_THROWS_AS(static_cast<void>(cache.allocate(4 * MiB)), out_of_memory);
    cache.deallocate(b, 8 * MiB);
    cache.release();
    CHECK(upstream.live_blocks() == 0);
}

TEST_CASE("exact_cache: options outside their range are refused") {
    CHECK_THROWS_AS((exact_cache<new_delete_resource>{{}, {.max_waste = -1}}), std::invalid_argument);
    CHECK_THROWS_AS((exact_cache<new_delete_resource>{{}, {.max_cached = 1.0 / 0.0}}), std::invalid_argument);
}

TEST_CASE("exact_cache: the walk shows each block as a chunk, live or cached") {
    exact_cache<new_delete_resource> cache;
    void* a = cache.allocate(1000);
    void* b = cache.allocate(3000);
    cache.deallocate(b, 3000);
    std::size_t live = 0, free = 0;
    cache.for_each_block([&](const chunk_view& chunk, const block_view& block) {
        CHECK(chunk.address == block.address);
        CHECK(chunk.bytes == block.bytes);
        (block.live ? live : free) += block.bytes;
    });
    CHECK(live == 1000);
    CHECK(free == 3000);
    CHECK(cache.owns(static_cast<char*>(a) + 999));
    cache.deallocate(a, 1000);
}

TEST_CASE("exact_cache: randomized sequences keep every invariant and return all upstream memory") {
    instrumented<> upstream;
    {
        exact_cache<upstream_ref> cache{upstream};
        test::run_shuffled(cache, {.seed = 5, .steps = 3000, .touch = true});
        cache.release();
        CHECK(upstream.live_blocks() == 0);
        test::run_shuffled(cache, {.seed = 6, .steps = 500, .allocate_percent = 80, .touch = true});
    }
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("exact_cache: freeing what is not a live block is caught by assertions") {
    const auto outcome = test::run_in_child([] {
        exact_cache<new_delete_resource> cache;
        void* pointer = cache.allocate(256);
        cache.deallocate(pointer, 256);
        cache.deallocate(pointer, 256);
    });
    CHECK(outcome.aborted());
    CHECK(outcome.said("not a live block of this cache"));
}
#endif
