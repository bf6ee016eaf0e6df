// The seams where compositions used to break: each case is a stack a new user would write, built
// and used as such. The matrix (matrix.hpp) checks the contract of every stack; this file checks
// what each seam promises.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/interop/pmr_adaptor.hpp>
#include <poolkit/observe/fragmentation.hpp>
#include <poolkit/observe/memory_summary.hpp>
#include <poolkit/observe/snapshot.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/size_classes.hpp>

#include <doctest/doctest.h>

#include <memory_resource>
#include <string>
#include <type_traits>
#include <vector>

using namespace poolkit;
using test::instrumented;

namespace {
using base = ref<instrumented<>>;
using poolkit::test::KiB;
}  // namespace

// Stacks as lane templates (outside the anonymous namespace: they name test types).
namespace poolkit::test {
template <class U>
using counted_best_fit = counted<best_fit<U>>;
template <class U>
using small_classes_large_best_fit = size_classes<U, best_fit<U>>;
template <class U>
using locked_tracked_best_fit = synchronized<tracked<best_fit<U>>>;
}  // namespace poolkit::test

// Every optional capability passes through every adaptor.
static_assert(has_try_allocate_cached<counted<best_fit<base>>> && walkable<counted<best_fit<base>>> &&
              has_release<counted<best_fit<base>>> && has_owns<counted<best_fit<base>>>);
static_assert(has_try_allocate_cached<ref<best_fit<base>>> && walkable<ref<best_fit<base>>>);
static_assert(has_try_allocate<retried_on_oom<best_fit<base>>> && has_try_allocate_cached<retried_on_oom<best_fit<base>>>);
static_assert(has_record_use<counted<stream_ordered<base, lanes<best_fit>, host_events>>>);
static_assert(has_record_use<tracked<synchronized<stream_ordered<base, lanes<best_fit>, host_events>>>>);
static_assert(requires(const counted<best_fit<base>>& s) {
    s.reserved_bytes();
    s.live_bytes();
});
// ... and only where the upstream has it.
static_assert(!has_try_allocate_cached<counted<instrumented<>>> && !walkable<counted<instrumented<>>>);

// Lane pools of any stack.
static_assert(pool_lanes<lanes<test::counted_best_fit, best_fit_options>, base> &&
              pool_lanes<lanes<test::small_classes_large_best_fit>, base>);
static_assert(pool_lanes<lanes<test::locked_tracked_best_fit>, base>);
static_assert(!pool_lanes<lanes<instrumented>, base>);  // no try_allocate_cached: it cannot be the shared pool
static_assert(std::same_as<stream_ordered<base, lanes<test::counted_best_fit, best_fit_options>, host_events>::pool_type,
                           counted<best_fit<detail::gated_upstream<base>>>>);
// A strategy's lanes take its options; a stack's, none unless named.
static_assert(std::same_as<stream_ordered<base, lanes<best_fit>, host_events>::pool_options, best_fit_options>);
static_assert(std::same_as<stream_ordered<base, lanes<test::counted_best_fit>, host_events>::pool_options, no_options>);
#if !POOLKIT_HAS_CUDA
static_assert(std::same_as<stream_ordered<base, lanes<best_fit>>, stream_ordered<base, lanes<best_fit>, completed_events>>);
#endif

TEST_CASE("stream_ordered over counted<best_fit>: the shared pool counts what it hands out") {
    instrumented<> memory;
    host_events events;
    const best_fit_options exact{.initial_size = 0, .growth = growth_policy::as_needed(4 * KiB), .granularity = 256};
    stream_ordered<base, lanes<test::counted_best_fit, best_fit_options>, host_events> pool{base{memory}, exact, events};
    const stream_ref a = events.make_stream(), b = events.make_stream();
    void* on_a = pool.allocate_async(10 * KiB, 256, a);
    void* on_b = pool.allocate_async(20 * KiB, 256, b);
    CHECK(pool.pool().figures().requested_bytes.current == 30 * KiB);
    pool.deallocate_async(on_a, 10 * KiB, 256, a);
    pool.deallocate_async(on_b, 20 * KiB, 256, b);
    // Each waits in its stream's front, out of the pool, until its stream's work is done.
    CHECK(pool.pool().figures().requested_bytes.current == 30 * KiB);
    CHECK(pool.pending_bytes() == 30 * KiB);
    events.complete_all();
    pool.release();
    CHECK(pool.pool().figures().requested_bytes.current == 0);
    pool.check_invariants();
    pool.release();
    CHECK(memory.live_bytes() == 0);
}

TEST_CASE("stream_ordered over size_classes with a best_fit for large blocks: both over the shared upstream") {
    instrumented<> memory;
    host_events events;
    stream_ordered<base, lanes<test::small_classes_large_best_fit>, host_events> pool{base{memory}, {}, events};
    const stream_ref a = events.make_stream();
    void* small = pool.allocate_async(300, 256, a);
    void* large = pool.allocate_async(4 << 20, 256, a);
    pool.deallocate_async(small, 300, 256, a);
    pool.deallocate_async(large, 4 << 20, 256, a);
    CHECK(pool.allocate_async(4 << 20, 256, a) == large);  // the lane's best_fit cached it
    pool.deallocate_async(large, 4 << 20, 256, a);
    pool.release();
    CHECK(memory.live_bytes() == 0);
    CHECK(memory.errors().empty());
}

TEST_CASE("observation sees through adaptors: snapshot, fragmentation and memory_summary of counted<best_fit>") {
    instrumented<> memory;
    counted<best_fit<base>> pool{std::in_place, base{memory}};
    void* block = pool.allocate(3000);
    const std::string json = snapshot(pool);
    CHECK(json.find("\"active_allocated\"") != std::string::npos);
    CHECK(fragmentation(pool).live_bytes > 0);
    synchronized guarded{pool};  // refers to pool
    const std::string table = memory_summary(guarded);
    CHECK(table.find("Allocated memory") != std::string::npos);
    CHECK(table.find("Reserved / live") != std::string::npos);  // the walk reached best_fit
    pool.deallocate(block, 3000);
    pool.release();
}

TEST_CASE("bridges and adaptors refer to an lvalue and own an rvalue") {
    instrumented<> memory;
    best_fit<base> pool{base{memory}};
    counted counts{pool};
    static_assert(std::same_as<decltype(counts), counted<ref<best_fit<base>>>>);
    counted owned{best_fit<base>{base{memory}}};
    static_assert(std::same_as<decltype(owned), counted<best_fit<base>>>);
    synchronized guarded{counts};
    static_assert(std::same_as<decltype(guarded), synchronized<ref<counted<ref<best_fit<base>>>>>>);
    tracked tracks{pool, {.capture_backtraces = false}};
    static_assert(std::same_as<decltype(tracks), tracked<ref<best_fit<base>>>>);

    pmr_adaptor memory_resource{pool};
    static_assert(std::same_as<decltype(memory_resource), pmr_adaptor<ref<best_fit<base>>>>);
    std::pmr::vector<int> numbers{&memory_resource};
    numbers.assign(1000, 7);
    CHECK(pool.owns(numbers.data()));  // the vector's storage is the pool's: no copy was made
    numbers = {};
    numbers.shrink_to_fit();

    void* through_counted = counts.allocate(512);
    CHECK(pool.owns(through_counted));
    CHECK(counts.figures().allocations.current == 1);
    counts.deallocate(through_counted, 512);
}

TEST_CASE("no entry point bypasses an adaptor: try_allocate_cached is counted, limited and retried never") {
    instrumented<> memory;
    best_fit<base> pool{base{memory}};
    pool.deallocate(pool.allocate(64 * KiB), 64 * KiB);  // cache one free block
    counted counts{pool};
    void* cached = counts.try_allocate_cached(1000);
    REQUIRE(cached != nullptr);
    CHECK(counts.figures().allocations.current == 1);
    CHECK(counts.try_allocate_cached(1 << 30) == nullptr);  // a miss, not an OOM
    CHECK(counts.figures().ooms == 0);
    counts.deallocate(cached, 1000);
    CHECK(counts.figures().allocations.current == 0);

    int calls = 0;
    const auto callback = [&](const oom_event&) { return ++calls < 3; };
    // The adaptor named whole: clang before 17 deduces neither retry_options{...} nor, given its
    // type, the guide that takes `pool` by reference.
    retried_on_oom<ref<best_fit<base>>, decltype(callback)> retrying{ref<best_fit<base>>{pool}, {.callback = callback, .max_retries = 5}};
    memory.limit(std::size_t{1} << 29);
    CHECK(retrying.try_allocate_cached(std::size_t{1} << 30) == nullptr);
    CHECK(calls == 0);  // a cache miss is not exhaustion
    CHECK(retrying.try_allocate(std::size_t{1} << 30) == nullptr);  // exhaustion: retried while the callback says so
    CHECK(calls == 3);
    CHECK(retrying.retries() == 2);
    pool.release();
}
