// What is special about counted<>: the four figures of each metric, block sizes from the
// resource below, PyTorch's key names with reserved figures from an inner counted<>, resets,
// scopes, OOM counting, forwarded capabilities, and exact counts under concurrent use.
#include "../support/instrumented.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <doctest/doctest.h>

#include <string>
#include <thread>
#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;
using upstream_ref = ref<instrumented<>>;

using poolkit::test::MiB;

}  // namespace

static_assert(resource_with<counted<new_delete_resource>, host_accessible>);
static_assert(has_try_allocate<counted<new_delete_resource>>);
static_assert(!has_try_allocate<counted<upstream_ref>>);
static_assert(stream_resource<counted<ref<simulated_resource>>>);
static_assert(!stream_resource<counted<new_delete_resource>>);
static_assert(has_release<counted<ref<best_fit<upstream_ref>>>> && has_owns<counted<ref<best_fit<upstream_ref>>>>);
static_assert(has_check_invariants<counted<upstream_ref>> && has_upstream<counted<upstream_ref>>);
static_assert(!has_property<counted<ref<simulated_resource>>, host_accessible>);

TEST_CASE("counted: allocated bytes in units (PyTorch's 512) where the upstream tells no block size") {
    instrumented<> upstream;
    counted<upstream_ref> stats{upstream};
    stats.count_in_units_of(512);
    CHECK(stats.unit() == 512);
    void* a = stats.allocate(1);
    void* b = stats.allocate(512);
    void* c = stats.allocate(513);
    CHECK(stats.figures().allocated_bytes.current == 512 + 512 + 1024);
    CHECK(stats.figures().requested_bytes.current == 1 + 512 + 513);
    stats.deallocate(c, 513);
    CHECK(stats.figures().allocated_bytes.current == 1024);
    stats.deallocate(a, 1);
    stats.deallocate(b, 512);
    CHECK(stats.figures().allocated_bytes.current == 0);
    CHECK(stats.figures().allocated_bytes.peak == 2048);
    stats.check_invariants();
}

TEST_CASE("counted: current, peak, total allocated and total freed") {
    instrumented<> upstream;
    counted<upstream_ref> stats{upstream};
    void* a = stats.allocate(100);
    void* b = stats.allocate(300);
    stats.deallocate(a, 100);
    void* c = stats.allocate(50);
    const statistics_figures f = stats.figures();
    CHECK(f.allocations.current == 2);
    CHECK(f.allocations.peak == 2);
    CHECK(f.allocations.allocated == 3);
    CHECK(f.allocations.freed == 1);
    CHECK(f.requested_bytes.current == 350);
    CHECK(f.requested_bytes.peak == 400);
    CHECK(f.requested_bytes.allocated == 450);
    CHECK(f.requested_bytes.freed == 100);
    CHECK(f.allocated_bytes.current == 350);  // instrumented reports no block size
    stats.deallocate(b, 300);
    stats.deallocate(c, 50);
    stats.deallocate(nullptr, 0);
    CHECK(stats.figures().allocations.current == 0);
    CHECK(stats.figures().requested_bytes.peak == 400);
    stats.check_invariants();
    CHECK(upstream.errors().empty());
}

TEST_CASE("counted: allocated bytes are the block sizes the resource below reports") {
    instrumented<> upstream;
    size_classes<upstream_ref> classes{upstream};
    counted<ref<size_classes<upstream_ref>>> stats{classes};
    stats.count_in_units_of(4096);  // a reported block size wins over the unit
    void* p = stats.allocate(1000);  // class 1024
    CHECK(stats.figures().requested_bytes.current == 1000);
    CHECK(stats.figures().allocated_bytes.current == static_cast<std::int64_t>(classes.block_size(1000)));
    CHECK(stats.figures().allocated_bytes.current >= 1000);
    stats.deallocate(p, 1000);
    CHECK(stats.figures().allocated_bytes.current == 0);
}

TEST_CASE("counted: memory_stats() speaks PyTorch's keys, reserved comes from the statistics below") {
    instrumented<> upstream;
    using counter = counted<upstream_ref>;
    counter reserved{upstream};
    best_fit<ref<counter>> pool{reserved, {.initial_size = 4 * MiB}};
    counted<ref<best_fit<ref<counter>>>> outer{pool};

    void* a = outer.allocate(1 * MiB);
    void* b = outer.allocate(5 * MiB);  // needs a second chunk
    outer.deallocate(a, 1 * MiB);
    const auto stats = outer.memory_stats();
    CHECK(stats.at("allocated_bytes.all.current") == 5 * MiB);
    CHECK(stats.at("allocated_bytes.all.peak") == 6 * MiB);
    CHECK(stats.at("allocated_bytes.all.allocated") == 6 * MiB);
    CHECK(stats.at("allocated_bytes.all.freed") == 1 * MiB);
    CHECK(stats.at("allocation.all.current") == 1);
    CHECK(stats.at("requested_bytes.all.peak") == 6 * MiB);
    CHECK(stats.at("active_bytes.all.current") == 5 * MiB);
    CHECK(stats.at("reserved_bytes.all.current") == static_cast<std::int64_t>(pool.reserved_bytes()));
    CHECK(stats.at("reserved_bytes.all.peak") == static_cast<std::int64_t>(pool.reserved_bytes()));
    CHECK(stats.at("segment.all.current") == 2);
    CHECK(stats.at("num_device_alloc") == 2);
    CHECK(stats.at("num_device_free") == 0);
    CHECK(stats.at("num_ooms") == 0);
    CHECK(stats.at("num_alloc_retries") == 0);
    pool.release();  // nothing wholly free yet but the first chunk
    outer.deallocate(b, 5 * MiB);
    pool.release();
    CHECK(outer.memory_stats().at("num_device_free") == 2);
    CHECK(outer.memory_stats().at("reserved_bytes.all.current") == 0);

    // Without a counted<> below there are no reserved figures.
    counted<upstream_ref> alone{upstream};
    CHECK(alone.memory_stats().count("reserved_bytes.all.current") == 0);
    CHECK(alone.memory_stats().count("allocated_bytes.all.current") == 1);
    CHECK(find_statistics(outer).has_value());
    CHECK_FALSE(find_statistics(upstream).has_value());
}

TEST_CASE("counted over a pool that maps virtual memory reports the mapped bytes as reserved, and resets their peak") {
    simulated_vmm_resource memory{{.capacity = std::size_t{64} << 30, .granularity = 2 * MiB}};
    counted<expandable_resource<ref<simulated_vmm_resource>, host_events>> pool{std::in_place, ref<simulated_vmm_resource>(memory)};
    void* a = pool.allocate(10 * MiB);
    void* b = pool.allocate(30 * MiB);
    pool.deallocate(b, 30 * MiB);
    auto stats = pool.memory_stats();
    CHECK(stats.at("reserved_bytes.all.current") == static_cast<std::int64_t>(memory.mapped_bytes()));
    CHECK(stats.at("reserved_bytes.all.peak") == static_cast<std::int64_t>(memory.peak_mapped_bytes()));
    CHECK(stats.at("reserved_bytes.all.peak") >= static_cast<std::int64_t>(40 * MiB));
    CHECK(stats.at("num_device_alloc") == static_cast<std::int64_t>(memory.map_calls()));
    CHECK(stats.at("num_device_free") == static_cast<std::int64_t>(memory.unmap_calls()));
    CHECK(stats.count("segment.all.current") == 0);  // a virtual memory has no segments
    pool.upstream_resource().release();
    pool.reset_peak();  // the peak of mapped bytes too, as torch.cuda.reset_peak_memory_stats() does
    stats = pool.memory_stats();
    CHECK(stats.at("reserved_bytes.all.peak") == stats.at("reserved_bytes.all.current"));
    CHECK(stats.at("reserved_bytes.all.peak") < static_cast<std::int64_t>(40 * MiB));
    CHECK(stats.at("allocated_bytes.all.peak") == stats.at("allocated_bytes.all.current"));
    // reset_accumulated_memory_stats(): the map and unmap calls count from here on, the layer's own
    // counts run on.
    const std::size_t maps = memory.map_calls();
    REQUIRE(maps > 0);
    pool.reset_accumulated();
    stats = pool.memory_stats();
    CHECK(stats.at("num_device_alloc") == 0);
    CHECK(stats.at("num_device_free") == 0);
    CHECK(stats.at("allocation.all.allocated") == 0);
    CHECK(stats.at("allocation.all.current") == 1);
    void* c = pool.allocate(50 * MiB);
    CHECK(pool.memory_stats().at("num_device_alloc") == static_cast<std::int64_t>(memory.map_calls() - maps));
    CHECK(memory.map_calls() > maps);
    pool.deallocate(c, 50 * MiB);
    pool.deallocate(a, 10 * MiB);
}

TEST_CASE("counted: reset_peak and reset_accumulated reset the reserved figures of the statistics below") {
    simulated_resource upstream;
    counted<ref<simulated_resource>> reserved{upstream};
    counted<best_fit<ref<counted<ref<simulated_resource>>>>> outer{std::in_place, reserved};
    void* a = outer.allocate(4 * MiB);
    void* b = outer.allocate(40 * MiB);
    outer.deallocate(b, 40 * MiB);
    outer.upstream_resource().release();
    CHECK(outer.memory_stats().at("reserved_bytes.all.peak") > outer.memory_stats().at("reserved_bytes.all.current"));
    outer.reset_peak();
    CHECK(outer.memory_stats().at("reserved_bytes.all.peak") == outer.memory_stats().at("reserved_bytes.all.current"));
    CHECK(outer.memory_stats().at("num_device_alloc") == 2);
    outer.reset_accumulated();  // and the totals below (segments made and freed, device calls)
    const auto stats = outer.memory_stats();
    CHECK(stats.at("num_device_alloc") == 0);
    CHECK(stats.at("num_device_free") == 0);
    CHECK(stats.at("reserved_bytes.all.allocated") == 0);
    CHECK(stats.at("reserved_bytes.all.current") == static_cast<std::int64_t>(reserved.figures().allocated_bytes.current));
    CHECK(stats.at("allocated_bytes.all.freed") == 0);
    outer.deallocate(a, 4 * MiB);
}

TEST_CASE("counted: reset_peak and reset_accumulated") {
    counted<new_delete_resource> stats;
    void* a = stats.allocate(1000);
    void* b = stats.allocate(1000);
    stats.deallocate(a, 1000);
    CHECK(stats.figures().requested_bytes.peak == 2000);
    stats.reset_peak();
    CHECK(stats.figures().requested_bytes.peak == 1000);
    stats.reset_accumulated();
    CHECK(stats.figures().requested_bytes.allocated == 0);
    CHECK(stats.figures().requested_bytes.freed == 0);
    CHECK(stats.figures().requested_bytes.current == 1000);
    stats.deallocate(b, 1000);
    CHECK(stats.figures().requested_bytes.freed == 1000);
}

TEST_CASE("counted: scopes measure a region and fold their peak into the enclosing one") {
    counted<new_delete_resource, single_thread_counters> stats;
    void* base = stats.allocate(100);
    void* spike = stats.allocate(900);
    stats.deallocate(spike, 900);  // peak 1000 before the scope
    stats.push_scope();
    CHECK(stats.scope_depth() == 1);
    void* a = stats.allocate(200);
    stats.push_scope();
    void* b = stats.allocate(300);
    stats.deallocate(b, 300);
    const statistics_figures inner = stats.pop_scope();
    CHECK(inner.requested_bytes.allocated == 300);
    CHECK(inner.requested_bytes.freed == 300);
    CHECK(inner.requested_bytes.peak == 600);
    stats.deallocate(a, 200);
    const statistics_figures outer = stats.pop_scope();
    CHECK(outer.requested_bytes.allocated == 500);
    CHECK(outer.requested_bytes.freed == 500);
    CHECK(outer.requested_bytes.peak == 600);
    CHECK(outer.allocations.allocated == 2);
    CHECK(stats.scope_depth() == 0);
    CHECK(stats.figures().requested_bytes.peak == 1000);  // the earlier peak survives
    stats.deallocate(base, 100);
}

TEST_CASE("counted: a scope open across reset_accumulated still counts from its push") {
    counted<new_delete_resource, single_thread_counters> stats;
    void* before = stats.allocate(100);
    stats.push_scope();
    void* a = stats.allocate(200);
    stats.reset_accumulated();
    CHECK(stats.figures().requested_bytes.allocated == 0);
    stats.deallocate(a, 200);
    const statistics_figures scope = stats.pop_scope();
    CHECK(scope.requested_bytes.allocated == 200);
    CHECK(scope.requested_bytes.freed == 200);
    CHECK(scope.allocations.allocated == 1);
    CHECK(stats.figures().requested_bytes.freed == 200);
    stats.deallocate(before, 100);
}

TEST_CASE("counted: failed allocations count as OOMs and propagate") {
    instrumented<> upstream;
    upstream.limit(1 * MiB);
    counted<upstream_ref> stats{upstream};
    CHECK_THROWS_AS(static_cast<void>(stats.allocate(2 * MiB)), out_of_memory);
    CHECK(stats.figures().ooms == 1);
    CHECK(stats.figures().allocations.current == 0);

    counted<new_delete_resource> host;
    CHECK(host.try_allocate(std::size_t(-1)) == nullptr);
    CHECK(host.figures().ooms == 1);
    CHECK(host.try_allocate(0) == nullptr);
    CHECK(host.figures().ooms == 1);
    void* p = host.try_allocate(64);
    CHECK(host.figures().allocations.current == 1);
    host.deallocate(p, 64);
}

TEST_CASE("counted: stream-ordered calls are counted like the plain ones") {
    simulated_resource addresses{{.capacity = 64 * MiB}};
    counted<ref<simulated_resource>> stats{addresses};
    void* p = stats.allocate_async(4096, 256, default_stream);
    CHECK(stats.figures().requested_bytes.current == 4096);
    stats.deallocate_async(p, 4096, 256, default_stream);
    CHECK(stats.figures().requested_bytes.current == 0);
    CHECK(stats.figures().allocations.freed == 1);
}

TEST_CASE("counted: exact under concurrent use" * doctest::test_suite("concurrency")) {
    counted<new_delete_resource> stats;
    constexpr int threads = 4;
    constexpr int rounds = 5000;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
        workers.emplace_back([&stats, t] {
            std::vector<void*> held;
            for (int i = 0; i < rounds; ++i) {
                held.push_back(stats.allocate(64 + static_cast<std::size_t>(t)));
                if (held.size() == 4) {
                    for (void* p : held) stats.deallocate(p, 64 + static_cast<std::size_t>(t));
                    held.clear();
                }
                if (i % 1000 == 0) static_cast<void>(stats.memory_stats());
            }
            for (void* p : held) stats.deallocate(p, 64 + static_cast<std::size_t>(t));
        });
    }
    for (auto& worker : workers) worker.join();
    const statistics_figures f = stats.figures();
    CHECK(f.allocations.current == 0);
    CHECK(f.allocations.allocated == threads * rounds);
    CHECK(f.allocations.freed == threads * rounds);
    CHECK(f.allocations.peak >= 4);
    CHECK(f.allocations.peak <= 4 * threads);
    std::int64_t bytes = 0;
    for (int t = 0; t < threads; ++t) bytes += std::int64_t{rounds} * (64 + t);
    CHECK(f.requested_bytes.allocated == bytes);
    CHECK(f.requested_bytes.current == 0);
    stats.check_invariants();
}
