// The stream-order oracle over every lane strategy and every upstream kind, with the upstream
// small enough that lanes run out and give memory back by every path they have: a strategy's own
// release before growth, release() at exhaustion, expandable's unmapping, lanes dropped with
// their streams. Streams come and go (destroyed with work pending, some forgotten first).
//
// Oracle: whenever a block is handed to stream S, every earlier use of any byte of it by another
// stream is ordered before S's next work — completing S's work in the simulation (host_events)
// completes those uses too, unless the host already waited for them.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"
#include "../support/stream_order_oracle.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/strategy/fallback.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <memory>

using namespace poolkit;
using test::instrumented;

namespace {

using poolkit::test::KiB;
using poolkit::test::MiB;

// An upstream of `limit` live bytes, on simulated address space or on the host heap.
template <class Memory>
struct limited {
    explicit limited(std::size_t limit) { memory->limit(limit); }
    std::unique_ptr<instrumented<Memory>> memory = std::make_unique<instrumented<Memory>>();
};

// Returns how many allocations ran out of memory.
template <class Memory, class Lanes, class Options>
std::size_t run_over(const Options& options, std::uint64_t seed, std::size_t streams) {
    limited<Memory> upstream{4 * MiB};
    host_events events;
    using shared = ref<instrumented<Memory>>;
    stream_ordered<shared, Lanes, host_events> pool{shared{*upstream.memory}, options, events};
    const test::oracle_report report = test::stream_order_oracle(pool, events, {.seed = seed, .streams = streams, .largest = 1 * MiB});
    MESSAGE(report.describe());
    CHECK(report.violations == 0);
    // Simulated addresses do not depend on the host allocator (or a sanitizer's quarantine), so
    // how often blocks are reused is known there.
    if constexpr (std::same_as<Memory, simulated_resource>) CHECK(report.checked > 10);
    pool.release();
    CHECK(upstream.memory->live_bytes() == 0);
    CHECK(upstream.memory->errors().empty());
    return report.exhausted;
}

template <class Lanes, class Options>
void run_strategy(const Options& options) {
    // A few streams, and many: lanes crowd the upstream sooner.
    std::size_t exhausted = 0;
    for (std::uint64_t seed : {1u, 2u}) {
        exhausted += run_over<simulated_resource, Lanes>(options, seed, seed == 1 ? 6u : 41u);
        exhausted += run_over<new_delete_resource, Lanes>(options, seed + 2, seed == 1 ? 6u : 41u);
    }
    CHECK(exhausted > 0);  // the lanes really ran out
}

template <class U>
using best_fit_lane = best_fit<U>;
template <class U>
using buddy_lane = buddy<U>;
template <class U>
using caching_lane = caching_pool<U>;
template <class U>
using size_classes_lane = size_classes<U>;  // large requests straight to the upstream
template <class U>
using size_classes_best_fit_lane = size_classes<U, best_fit<U>>;
template <class U>
using fixed_size_lane = fixed_size<U>;
template <class U>
using segregator_lane = segregator<16 * KiB, size_classes<U>, best_fit<U>>;
template <class U>
using fallback_lane = fallback<best_fit<U>, buddy<U>>;

// A lane policy of its own: a combinator whose parts take options of their own.
template <template <class> class Combined, template <class> class First, template <class> class Second, class FirstOptions,
          class SecondOptions>
struct parts_lanes {
    struct options {
        FirstOptions first{};
        SecondOptions second{};
    };
    template <class U>
    using pool_type = Combined<U>;
    template <class U>
    using options_type = options;
    template <class U>
    static pool_type<U> make(U upstream, const options& o) {
        return pool_type<U>(First<U>(upstream, o.first), Second<U>(upstream, o.second));
    }
};
using segregator_lanes = parts_lanes<segregator_lane, size_classes_lane, best_fit_lane, size_classes_options, best_fit_options>;
using fallback_lanes = parts_lanes<fallback_lane, best_fit_lane, buddy_lane, best_fit_options, buddy_options>;

const best_fit_options small_chunks{.initial_size = 256 * KiB, .growth = growth_policy::as_needed(256 * KiB)};

}  // namespace

TEST_CASE("stream-order oracle at exhaustion: best_fit lanes") { run_strategy<lanes<best_fit_lane>>(small_chunks); }

TEST_CASE("stream-order oracle at exhaustion: caching_pool lanes") {
    run_strategy<lanes<caching_lane>>(
        caching_options{.small_size = 64 * KiB, .small_chunk = 256 * KiB, .large_growth = growth_policy::fixed_step(1 * MiB)});
}

TEST_CASE("stream-order oracle at exhaustion: buddy lanes") { run_strategy<lanes<buddy_lane>>(buddy_options{.chunk_size = 1 * MiB}); }

TEST_CASE("stream-order oracle at exhaustion: size_classes lanes") {
    run_strategy<lanes<size_classes_lane>>(size_classes_options{.largest = 64 * KiB, .slab_size = 256 * KiB});
}

TEST_CASE("stream-order oracle at exhaustion: size_classes over best_fit lanes") {
    run_strategy<lanes<size_classes_best_fit_lane>>(size_classes_options{.largest = 64 * KiB, .slab_size = 256 * KiB});
}

TEST_CASE("stream-order oracle at exhaustion: fixed_size lanes") {
    run_strategy<lanes<fixed_size_lane>>(fixed_size_options{.block_size = 16 * KiB, .slab_size = 64 * KiB});
}

TEST_CASE("stream-order oracle at exhaustion: segregator lanes") {
    using options = segregator_lanes::options;
    run_strategy<segregator_lanes>(options{size_classes_options{.largest = 16 * KiB, .slab_size = 128 * KiB}, small_chunks});
}

TEST_CASE("stream-order oracle at exhaustion: fallback lanes") {
    using options = fallback_lanes::options;
    run_strategy<fallback_lanes>(options{small_chunks, buddy_options{.chunk_size = 1 * MiB}});
}

TEST_CASE("stream-order oracle at exhaustion: expandable lanes over simulated virtual memory") {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
        // 4 MiB of physical memory in 64 KiB granules; address space for a few spans per stream.
        simulated_vmm_resource memory{{.capacity = 1024 * MiB, .granularity = 64 * KiB, .physical_limit = 4 * MiB}};
        host_events events;
        using shared = ref<simulated_vmm_resource>;
        const expandable_options options{.span_bytes = 8 * MiB, .small_size = 64 * KiB, .rounding = 512, .max_cached_bytes = 2 * MiB};
        stream_ordered<shared, lanes<expandable>, host_events> pool{shared{memory}, options, events};
        // Seed 3: long stretches of one stream alone, the pool's home again (rehome_after).
        using pool_type = decltype(pool);
        const test::oracle_options oracle{.seed = seed,
                                          .streams = seed == 2 ? std::size_t{41} : std::size_t{6},
                                          .steps = seed == 3 ? 8 * pool_type::rehome_after : 6000,
                                          .largest = 1 * MiB,
                                          .solo_steps = seed == 3 ? 2 * pool_type::rehome_after : 0};
        const test::oracle_report report = test::stream_order_oracle(pool, events, oracle);
        MESSAGE(report.describe());
        CHECK(report.violations == 0);
        CHECK(report.checked > 10);
        CHECK(report.exhausted > 0);
        if (seed == 3) CHECK(pool.homes_regained() > 0);
        pool.release();
        CHECK(memory.mapped_bytes() == 0);
    }
}

// A pool that cannot grow returns its wholly free chunks upstream and tries again (best_fit's
// retry, caching_pool's release before growth). A chunk freed on the home stream (straight into
// the pool) may still be used by that stream's queued work: it must not reach the upstream, and so
// anything else, before that work is done.
template <template <class> class Lane, class Options>
void lane_gives_back_a_chunk(const Options& options) {
    instrumented<simulated_resource> memory;
    memory.limit(2 * MiB);
    host_events events;
    const stream_ref a = events.make_stream(), b = events.make_stream();
    using shared = ref<instrumented<simulated_resource>>;
    stream_ordered<shared, lanes<Lane, Options>, host_events> pool{shared{memory}, options, events};
    void* first = pool.allocate_async(1 * MiB, 256, a);
    const std::uint64_t used = events.submit(a);  // a kernel on `a` reads `first`...
    pool.deallocate_async(first, 1 * MiB, 256, a);  // ...and the block is freed behind it
    // `a` needs more than the free chunk holds, and the upstream has room only without that chunk.
    void* larger = pool.allocate_async(1 * MiB + 256 * KiB, 256, a);
    CHECK(events.completed(a) >= used);  // the chunk went back only after the kernel
    void* on_b = pool.allocate_async(256 * KiB, 256, b);
    const auto old = reinterpret_cast<std::uintptr_t>(first);
    const auto overlaps = [&](void* p, std::size_t bytes) {
        const auto begin = reinterpret_cast<std::uintptr_t>(p);
        return begin < old + 1 * MiB && old < begin + bytes;
    };
    CHECK((overlaps(larger, 1 * MiB + 256 * KiB) || overlaps(on_b, 256 * KiB)));  // the scenario: the chunk's bytes came back
    pool.deallocate_async(on_b, 256 * KiB, 256, b);
    pool.deallocate_async(larger, 1 * MiB + 256 * KiB, 256, a);
    events.complete_all();
    pool.release();
    CHECK(memory.errors().empty());
}

TEST_CASE("a best_fit pool that cannot grow gives a chunk back only after its home stream's work") {
    lane_gives_back_a_chunk<best_fit>(best_fit_options{.initial_size = 0, .growth = growth_policy::as_needed(4 * KiB), .granularity = 256});
}

TEST_CASE("a caching_pool pool releasing before growth gives a chunk back only after its home stream's work") {
    lane_gives_back_a_chunk<caching_pool>(
        caching_options{.small_size = 64 * KiB, .small_chunk = 256 * KiB, .large_growth = growth_policy::as_needed(4 * KiB)});
}

// Found by fuzz/stream_order_oracle: a block the lane pool passed through to the upstream is not in
// its walk, so when a second stream started tracking, the first stream's free of it was refused.
TEST_CASE("a block passed through to the upstream before a second stream arrived is freed and reused in order") {
    instrumented<simulated_resource> memory;
    host_events events;
    const stream_ref a = events.make_stream(), b = events.make_stream();
    using shared = ref<instrumented<simulated_resource>>;
    stream_ordered<shared, lanes<fixed_size>, host_events> pool{shared{memory}, fixed_size_options{.block_size = 16 * KiB}, events};
    void* large = pool.allocate_async(1 * MiB, 256, a);  // past the block size: straight to the upstream
    void* used = pool.allocate_async(1 * MiB, 256, a);
    void* small = pool.allocate_async(100, 256, b);  // a second lane: tracking starts
    pool.record_use(used, b);
    pool.deallocate_async(large, 1 * MiB, 256, a);
    pool.deallocate_async(used, 1 * MiB, 256, a);
    CHECK(pool.waiting_blocks() == 1);  // `used` waits for b's work
    pool.deallocate_async(small, 100, 256, b);
    pool.check_invariants();
    pool.release();
    CHECK(memory.live_bytes() == 0);
    CHECK(memory.errors().empty());
}
