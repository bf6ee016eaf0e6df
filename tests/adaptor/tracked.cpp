// tracked<>: outstanding allocations, backtraces and the leak report.
#include "../support/death.hpp"
#include "../support/instrumented.hpp"

#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
using namespace poolkit;
using test::instrumented;
}  // namespace

static_assert(has_try_allocate<tracked<new_delete_resource>>);
static_assert(stream_resource<tracked<ref<simulated_resource>>>);
static_assert(has_check_invariants<tracked<new_delete_resource>>);

TEST_CASE("tracked: lists what is outstanding and reports it, largest first") {
    instrumented<> upstream;
    tracked<ref<instrumented<>>> tracker{upstream};
    void* a = tracker.allocate(100);
    void* b = tracker.allocate(5000, 512);
    void* c = tracker.allocate(300);
    tracker.deallocate(a, 100);
    CHECK(tracker.live_blocks() == 2);
    CHECK(tracker.live_bytes() == 5300);
    const auto live = tracker.outstanding();
    REQUIRE(live.size() == 2);
    for (const auto& record : live) {
        if (record.pointer == b) {
            CHECK(record.bytes == 5000);
            CHECK(record.alignment == 512);
            CHECK(record.sequence == 1);
        }
    }
    const std::string report = tracker.leak_report();
    CHECK(report.find("2 allocations (5300 bytes) outstanding") != std::string::npos);
    CHECK(report.find("5000 bytes") < report.find("300 bytes,"));
    CHECK(tracker.leak_report(1).find("and 1 more") != std::string::npos);
    tracker.check_invariants();
    tracker.deallocate(b, 5000, 512);
    tracker.deallocate(c, 300);
    CHECK(tracker.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}

TEST_CASE("tracked: outstanding() lists the live allocations in address order") {
    instrumented<> upstream;
    tracked<ref<instrumented<>>> tracker{upstream};
    std::vector<void*> made;
    for (int i = 0; i < 64; ++i) made.push_back(tracker.allocate(static_cast<std::size_t>(64 + 32 * (i % 7))));
    for (int i = 0; i < 64; i += 3) tracker.deallocate(made[static_cast<std::size_t>(i)], static_cast<std::size_t>(64 + 32 * (i % 7)));
    const auto live = tracker.outstanding();
    CHECK(live.size() == 42);
    CHECK(std::is_sorted(live.begin(), live.end(),
                         [](const tracked_allocation& a, const tracked_allocation& b) { return a.pointer < b.pointer; }));
    for (int i = 0; i < 64; ++i) {
        if (i % 3 != 0) tracker.deallocate(made[static_cast<std::size_t>(i)], static_cast<std::size_t>(64 + 32 * (i % 7)));
    }
}

TEST_CASE("tracked: backtraces when asked for") {
    tracked<new_delete_resource> tracker{new_delete_resource{}, {.capture_backtraces = true, .backtrace_depth = 8}};
    void* p = tracker.allocate(64);
    const auto live = tracker.outstanding();
    REQUIRE(live.size() == 1);
#if POOLKIT_HAS_EXECINFO
    CHECK_FALSE(live[0].backtrace.empty());
    CHECK(live[0].backtrace.size() <= 8);
    CHECK(tracker.leak_report().find("      ") != std::string::npos);
#endif
    tracker.deallocate(p, 64);
    tracked<new_delete_resource> plain;
    void* q = plain.allocate(64);
    CHECK(plain.outstanding()[0].backtrace.empty());
    plain.deallocate(q, 64);
}

TEST_CASE("tracked: stream-ordered allocations record their stream") {
    simulated_resource addresses{{.capacity = std::size_t{16} << 20}};
    tracked<ref<simulated_resource>> tracker{addresses};
    const stream_ref stream{reinterpret_cast<stream_handle>(std::uintptr_t{0x700})};
    void* p = tracker.allocate_async(1000, 256, stream);
    CHECK(tracker.outstanding()[0].stream == 0x700);
    tracker.deallocate_async(p, 1000, 256, stream);
    CHECK(tracker.live_blocks() == 0);
}

#if POOLKIT_ENABLE_ASSERTS
TEST_CASE("tracked: a bad deallocation is caught before it reaches the upstream") {
    SUBCASE("freed twice") {
        const auto outcome = test::run_in_child([] {
            tracked<new_delete_resource> tracker;
            void* p = tracker.allocate(64);
            void* q = tracker.allocate(64);
            tracker.deallocate(p, 64);
            tracker.deallocate(p, 64);
            tracker.deallocate(q, 64);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("tracked: deallocate of a pointer that is not outstanding"));
    }
    SUBCASE("another size") {
        const auto outcome = test::run_in_child([] {
            tracked<new_delete_resource> tracker;
            void* p = tracker.allocate(64);
            tracker.deallocate(p, 128);
        });
        CHECK(outcome.aborted());
        CHECK(outcome.said("tracked: deallocate with a size other than the one allocated"));
    }
}
#else
TEST_CASE("tracked: without assertions a bad deallocation never reaches the upstream as it came") {
    instrumented<> upstream;
    tracked<ref<instrumented<>>> tracker{upstream};
    void* p = tracker.allocate(64);
    void* q = tracker.allocate(64);
    tracker.deallocate(p, 64);
    tracker.deallocate(p, 64);  // freed twice: not passed on
    int outside = 0;
    tracker.deallocate(&outside, sizeof outside);  // never allocated here: not passed on
    tracker.deallocate(q, 32);  // another size: passed on with the size it was allocated with
    tracker.check_invariants();
    CHECK(tracker.live_blocks() == 0);
    CHECK(tracker.live_bytes() == 0);
    CHECK(upstream.live_blocks() == 0);
    CHECK(upstream.errors().empty());
}
#endif

TEST_CASE("tracked: checked frees refuse a bad free with the reason and change nothing") {
    instrumented<> upstream;
    tracked<ref<instrumented<>>> tracker{upstream};
    auto* block = static_cast<char*>(tracker.allocate(3000));
    const auto refused = [&](auto&& call) -> std::string {
        try {
            call();
        } catch (const std::invalid_argument& e) {
            return e.what();
        }
        return "";
    };
    const std::string inside = refused([&] { tracker.checked_deallocate(block + 512, 3000, default_alignment, " on device 0"); });
    CHECK(inside.find(" on device 0: inside the block at ") != std::string::npos);
    CHECK(inside.find("(3000 bytes), not its start") != std::string::npos);
    const std::string size = refused([&] { tracker.checked_deallocate(block, 1000); });
    CHECK(size.find("with 1000 bytes: the block was allocated with 3000") != std::string::npos);
    const std::string foreign = refused([&] { tracker.checked_deallocate(block + (std::size_t{1} << 40), 3000); });
    CHECK(foreign.find(": not a live block") != std::string::npos);
    CHECK(tracker.live_blocks() == 1);  // nothing changed
    CHECK(upstream.live_blocks() == 1);

    int uses = 0;
    tracker.while_outstanding(block, "record_stream", "", [&] { ++uses; });
    CHECK(uses == 1);
    const std::string use = refused([&] { tracker.while_outstanding(block + 8, "record_stream", "", [&] { ++uses; }); });
    CHECK(use.find("record_stream of ") == 9);  // after "poolkit: "
    CHECK(use.find("inside the block") != std::string::npos);
    CHECK(uses == 1);

    tracker.checked_deallocate(block, 3000);
    CHECK(tracker.live_blocks() == 0);
    CHECK(upstream.live_blocks() == 0);
    const std::string twice = refused([&] { tracker.checked_deallocate(block, 3000); });
    CHECK(twice.find("freed already") != std::string::npos);
    CHECK(refused([&] { tracker.checked_deallocate(nullptr, 0); }).empty());
}

TEST_CASE("tracked: a checked stream-ordered free gives the block back on its stream") {
    simulated_resource upstream;
    tracked<ref<simulated_resource>> tracker{upstream};
    const stream_ref stream{reinterpret_cast<stream_handle>(std::uintptr_t{0x700})};
    void* block = tracker.allocate_async(4096, default_alignment, stream);
    CHECK_THROWS_AS(tracker.checked_deallocate_async(block, 100, default_alignment, stream), std::invalid_argument);
    CHECK(upstream.live_bytes() == 4096);
    tracker.checked_deallocate_async(block, 4096, default_alignment, stream);
    CHECK(upstream.live_bytes() == 0);
    CHECK(tracker.live_blocks() == 0);
}
