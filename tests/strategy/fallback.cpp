// What is special about fallback: Primary first, Secondary on exhaustion, deallocate routed by
// Primary's owns(), capabilities only where both parts have them, randomized sequences.
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/monotonic.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;
using upstream_ref = ref<instrumented<>>;

using poolkit::test::KiB;

using capped_then_open = fallback<best_fit<upstream_ref>, best_fit<upstream_ref>>;

template <class P, class S>
concept can_fall_back = requires { typename fallback<P, S>; };

}  // namespace

static_assert(!can_fall_back<new_delete_resource, new_delete_resource>);  // Primary needs owns()
static_assert(resource_with<fallback<best_fit<new_delete_resource>, new_delete_resource>, host_accessible>);
static_assert(!has_owns<fallback<best_fit<new_delete_resource>, new_delete_resource>>);
static_assert(has_owns<capped_then_open> && has_release<capped_then_open> && has_try_allocate<capped_then_open> &&
              has_check_invariants<capped_then_open>);
static_assert(!has_release<fallback<best_fit<new_delete_resource>, new_delete_resource>>);

TEST_CASE("fallback: Primary serves until it is exhausted, then Secondary, frees go home") {
    instrumented<> primary_upstream, secondary_upstream;
    capped_then_open pool{best_fit<upstream_ref>{primary_upstream, {.initial_size = 64 * KiB, .maximum_size = 64 * KiB}},
                          best_fit<upstream_ref>{secondary_upstream, {.initial_size = 1 << 20}}};
    std::vector<void*> blocks;
    for (int i = 0; i < 5; ++i) blocks.push_back(pool.allocate(16 * KiB));
    CHECK(pool.primary_resource().live_bytes() == 64 * KiB);
    CHECK(pool.secondary_resource().live_bytes() == 16 * KiB);
    CHECK_THROWS_AS(static_cast<void>(pool.allocate(16, 3)), std::invalid_argument);
    pool.check_invariants();
    for (void* block : blocks) {
        CHECK(pool.owns(block));
        pool.deallocate(block, 16 * KiB);
    }
    CHECK(pool.primary_resource().live_bytes() == 0);
    CHECK(pool.secondary_resource().live_bytes() == 0);
    pool.release();
    CHECK(primary_upstream.live_blocks() == 0);
    CHECK(secondary_upstream.live_blocks() == 0);
    CHECK(primary_upstream.errors().empty());
    CHECK(secondary_upstream.errors().empty());
}

TEST_CASE("fallback: a monotonic arena first, the heap after") {
    fallback<monotonic<new_delete_resource>, new_delete_resource> pool{
        monotonic<new_delete_resource>{{}, {.initial_size = 4 * KiB, .maximum_size = 4 * KiB}}, {}};
    void* a = pool.allocate(3 * KiB);
    void* b = pool.allocate(3 * KiB);  // the arena is full
    CHECK(pool.primary_resource().owns(a));
    CHECK_FALSE(pool.primary_resource().owns(b));
    pool.deallocate(b, 3 * KiB);
    pool.deallocate(a, 3 * KiB);
}

TEST_CASE("fallback: randomized sequences keep every invariant and return all upstream memory") {
    instrumented<> upstream;
    {
        capped_then_open pool{best_fit<upstream_ref>{upstream, {.initial_size = 256 * KiB, .maximum_size = 512 * KiB}},
                              best_fit<upstream_ref>{upstream, {.initial_size = 1 << 20}}};
        test::run_shuffled(pool, {.seed = 31, .steps = 2500, .touch = true});
        pool.release();
        CHECK(upstream.live_blocks() == 0);
    }
    CHECK(upstream.errors().empty());
}
