// What is special about segregator: routing by size both ways, capabilities and properties only
// where both parts have them, randomized sequences over two pools sharing one upstream.
#include "../support/instrumented.hpp"
#include "../support/property.hpp"
#include "../support/sizes.hpp"

#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

namespace {

using namespace poolkit;
using test::instrumented;
using upstream_ref = ref<instrumented<>>;

using poolkit::test::KiB;

using two_pools = segregator<4 * KiB, size_classes<upstream_ref>, best_fit<upstream_ref>>;

}  // namespace

static_assert(std::is_default_constructible_v<segregator<256, size_classes<new_delete_resource>, new_delete_resource>>);
static_assert(resource_with<segregator<256, size_classes<new_delete_resource>, new_delete_resource>, host_accessible>);
static_assert(!has_property<segregator<256, best_fit<ref<simulated_resource>>, new_delete_resource>, host_accessible>);
static_assert(has_release<two_pools> && has_check_invariants<two_pools> && has_owns<two_pools> == false);
static_assert(!has_release<segregator<256, best_fit<new_delete_resource>, new_delete_resource>>);
static_assert(stream_resource<segregator<256, ref<simulated_resource>, ref<simulated_resource>>>);
static_assert(!stream_resource<segregator<256, ref<simulated_resource>, new_delete_resource>>);

TEST_CASE("segregator: small requests go to Small, the rest to Large, both ways") {
    instrumented<> small_upstream, large_upstream;
    two_pools pool{size_classes<upstream_ref>{small_upstream, {.slab_size = 64 * KiB}},
                   best_fit<upstream_ref>{large_upstream, {.initial_size = 1 << 20}}};
    void* small = pool.allocate(4 * KiB);
    void* large = pool.allocate(4 * KiB + 1);
    CHECK(pool.small_resource().live_bytes() == 4 * KiB);
    CHECK(pool.large_resource().live_bytes() == 4 * KiB + 256);
    pool.check_invariants();
    pool.deallocate(small, 4 * KiB);
    pool.deallocate(large, 4 * KiB + 1);
    CHECK(pool.small_resource().live_bytes() == 0);
    CHECK(pool.large_resource().live_bytes() == 0);
    pool.release();
    CHECK(small_upstream.live_blocks() == 0);
    CHECK(large_upstream.live_blocks() == 0);
}

TEST_CASE("segregator: owns() where both parts have it") {
    simulated_resource addresses;
    segregator<1024, best_fit<ref<simulated_resource>>, ref<simulated_resource>> pool{
        best_fit<ref<simulated_resource>>{addresses, {.initial_size = 1 << 20}}, ref<simulated_resource>{addresses}};
    void* small = pool.allocate(100);
    void* large = pool.allocate(100000);
    CHECK(pool.owns(small));
    CHECK(pool.owns(large));
    pool.deallocate(small, 100);
    pool.deallocate(large, 100000);
    CHECK_FALSE(pool.owns(large));
}

TEST_CASE("segregator: randomized sequences keep every invariant and return all upstream memory") {
    instrumented<> upstream;
    {
        two_pools pool{size_classes<upstream_ref>{upstream, {.slab_size = 64 * KiB}},
                       best_fit<upstream_ref>{upstream, {.initial_size = 256 * KiB}}};
        test::run_shuffled(pool, {.seed = 21, .steps = 2500, .touch = true});
        pool.release();
        CHECK(upstream.live_blocks() == 0);
    }
    CHECK(upstream.errors().empty());
}
