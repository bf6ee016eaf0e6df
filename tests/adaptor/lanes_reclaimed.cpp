// Streams and the address space they claim come back: an expandable pool shared by many streams
// gives spans back, huge requests are refused at once, and streams that come and go leave a bounded
// set of records and no stranded memory.
#include "../support/host_faults.hpp"
#include "../support/sizes.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/errors.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>
#include <poolkit/upstream/detail/granule_map.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

using namespace poolkit;

namespace {
using poolkit::test::GiB;
using poolkit::test::MiB;

using shared_vmm = ref<simulated_vmm_resource>;
using expandable_streams = stream_ordered<shared_vmm, lanes<expandable>, host_events>;
}  // namespace

TEST_CASE("granule_map: claimed spans come back, are claimed again, and free the range below once the lowest returns") {
    detail::granule_map map{0x10000000, 64 * MiB, 2 * MiB};
    const auto a = map.claim(16 * MiB), b = map.claim(16 * MiB), c = map.claim(16 * MiB);
    REQUIRE((a && b && c));
    CHECK(map.claimed_bytes() == 48 * MiB);
    CHECK_FALSE(map.claim(32 * MiB));  // 16 MiB left below the lowest claim
    CHECK(map.largest_claimable() == 16 * MiB);
    map.unclaim(*b, 16 * MiB);  // a hole between two claims
    CHECK(map.claimed_bytes() == 32 * MiB);
    CHECK(map.claim(8 * MiB) == *b);  // the smallest span given back that fits
    map.unclaim(*b, 8 * MiB);
    map.unclaim(*c, 16 * MiB);  // the lowest claim: the floor rises past b's span too
    CHECK(map.claim_floor() == *a);
    CHECK(map.claimed_bytes() == 16 * MiB);
    CHECK(map.find_unmapped(32 * MiB, 2 * MiB).has_value());  // allocate may use it again
    map.unclaim(*a, 16 * MiB);
    CHECK(map.claimed_bytes() == 0);
    CHECK(map.claim(64 * MiB).has_value());
}

TEST_CASE("an expandable pool of many streams shares the address space and gives its spans back") {
    // Address space for four 1 GiB spans: the fifth stream used to fail with almost nothing live.
    simulated_vmm_resource memory{{.capacity = 4 * GiB, .granularity = 2 * MiB, .physical_limit = 4 * GiB}};
    host_events events;
    expandable_streams pool{shared_vmm{memory}, expandable_options{.span_bytes = 1 * GiB}, events};
    std::vector<stream_ref> streams;
    std::vector<void*> blocks;
    for (int i = 0; i < 64; ++i) {
        streams.push_back(events.make_stream());
        blocks.push_back(pool.allocate_async(3 * MiB, 256, streams.back()));
    }
    pool.check_invariants();
    for (int i = 0; i < 64; ++i) pool.deallocate_async(blocks[i], 3 * MiB, 256, streams[i]);
    for (stream_ref s : streams) events.destroy_stream(s);
    pool.release();  // the streams are gone: a wait for the device, then every span goes back
    CHECK(pool.pending_bytes() == 0);
    CHECK(memory.mapped_bytes() == 0);
    // The whole address space is there again: a new stream gets a span of the full size.
    const stream_ref fresh = events.make_stream();
    void* big = pool.allocate_async(3 * GiB, 256, fresh);
    pool.deallocate_async(big, 3 * GiB, 256, fresh);
    pool.check_invariants();
}

TEST_CASE("expandable says when the address space, not memory, ran out") {
    simulated_vmm_resource memory{{.capacity = 64 * MiB, .granularity = 2 * MiB, .physical_limit = 64 * MiB}};
    expandable<shared_vmm> pool{shared_vmm{memory}, expandable_options{.span_bytes = 32 * MiB, .small_size = 0}};
    void* a = pool.allocate(40 * MiB);
    try {
        static_cast<void>(pool.allocate(40 * MiB));
        FAIL("a span past the address space");
    } catch (const out_of_memory& error) {
        CHECK(std::string(error.what()).find("address space exhausted") != std::string::npos);
        CHECK(error.figures().address_space_bytes.has_value());
    }
    pool.deallocate(a, 40 * MiB);
    pool.check_invariants();
}

TEST_CASE("expandable refuses a request larger than its address space at once, with poolkit's error") {
    // 64 GiB of address space: more can fail to reserve under TSan, whose shadow takes most of it.
    simulated_vmm_resource memory{{.capacity = 64 * GiB, .granularity = 2 * MiB, .physical_limit = 80 * GiB}};
    expandable<shared_vmm> pool{shared_vmm{memory}};
    for (const unsigned shift : {37u, 41u, 55u, 56u, 57u, 62u, 63u}) {
        CAPTURE(shift);
        const std::size_t host_before = test::host_bytes_requested();
        CHECK_THROWS_AS(static_cast<void>(pool.allocate(std::size_t{1} << shift)), out_of_memory);
        // No bookkeeping was built for it (it took gigabytes and seconds before): the error's text at most.
        CHECK(test::host_bytes_requested() - host_before < 4096);
    }
    CHECK(pool.chunks() == 0);
}

TEST_CASE("streams made, used and forgotten one after another leave no record and no memory behind") {
    simulated_vmm_resource memory{{.capacity = 64 * GiB, .granularity = 2 * MiB, .physical_limit = 8 * GiB}};
    host_events events;
    expandable_streams pool{shared_vmm{memory}, expandable_options{.span_bytes = 1 * GiB}, events};
    for (int i = 0; i < 2000; ++i) {
        const stream_ref s = events.make_stream();
        void* block = pool.allocate_async(3 * MiB, 256, s);
        pool.deallocate_async(block, 3 * MiB, 256, s);
        pool.forget_stream(s);
        events.destroy_stream(s);
    }
    CHECK(pool.streams() == 0);
    CHECK(pool.pending_bytes() == 0);
    pool.check_invariants();
    pool.release();
    CHECK(memory.mapped_bytes() == 0);
}

TEST_CASE("streams destroyed without forget_stream strand no memory, and their records are trimmed") {
    simulated_vmm_resource memory{{.capacity = 64 * GiB, .granularity = 2 * MiB, .physical_limit = 8 * GiB}};
    host_events events;
    using streams = stream_ordered<ref<simulated_vmm_resource>, lanes<best_fit>, host_events>;
    streams pool{ref<simulated_vmm_resource>{memory}, best_fit_options{.initial_size = 4 * MiB}, events};
    const int count = static_cast<int>(2 * streams::min_trim_records) + 100;
    for (int i = 0; i < count; ++i) {
        const stream_ref s = events.make_stream();
        void* block = pool.allocate_async(1 * MiB, 256, s);
        pool.deallocate_async(block, 1 * MiB, 256, s);
        events.submit(s);
        events.destroy_stream(s);
    }
    // The work before those frees never completes: each new stream takes a destroyed one's block
    // by waiting on its event (internal dependencies), or after a settle; nothing piles up.
    CHECK(pool.reserved_bytes() <= 8 * MiB);
    CHECK(pool.streams() <= 2 * streams::min_trim_records);
    pool.check_invariants();
}
