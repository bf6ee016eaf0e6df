// replay(): events reach the resource in order, with their sizes and streams; live bytes and the
// leftovers come back; an exhausted resource leaves nothing behind.
#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/observe/replay.hpp>
#include <poolkit/observe/trace.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <vector>

namespace {
using namespace poolkit;

const char* const small_trace =
    "Thread,Time,Action,Pointer,Size,Stream\n"
    "0,00:00:00.000001,allocate,0x1,1000000,0\n"
    "0,00:00:00.000002,allocate,0x2,3000,7\n"
    "0,00:00:00.000003,free,0x1,1000000,0\n"
    "0,00:00:00.000004,allocate,0x3,2000000,7\n"
    "0,00:00:00.000005,free,0x3,2000000,7\n"
    "0,00:00:00.000006,allocate,0x1,500,0\n";

// A stream resource that records the streams it was called with.
struct stream_recorder {
    simulated_resource* addresses;
    std::vector<std::uintptr_t> streams;
    void* allocate(std::size_t bytes, std::size_t alignment) { return addresses->allocate(bytes, alignment); }
    void deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept { addresses->deallocate(p, bytes, alignment); }
    void* allocate_async(std::size_t bytes, std::size_t alignment, stream_ref stream) {
        streams.push_back(stream_id(stream));
        return addresses->allocate(bytes, alignment);
    }
    void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, stream_ref stream) noexcept {
        streams.push_back(stream_id(stream));
        addresses->deallocate(p, bytes, alignment);
    }
    friend bool operator==(const stream_recorder&, const stream_recorder&) { return true; }
};
}  // namespace

TEST_CASE("replay: sizes, order, peak and leftovers") {
    const trace t = parse_trace(small_trace, "small");
    CHECK(t.peak_live_bytes == 2003000);
    simulated_resource addresses{{.capacity = std::size_t{64} << 20}};
    counted<ref<simulated_resource>, single_thread_counters> counts{addresses};
    std::vector<std::size_t> seen;
    const replay_result result = replay(t, counts, simulated_streams(t), [&](std::size_t index, const trace_event& e) {
        seen.push_back(index);
        static_cast<void>(e);
    });
    CHECK(result.events == 6);
    CHECK(result.seconds >= 0);
    CHECK(seen.size() == 6);
    CHECK(counts.figures().requested_bytes.peak == 2003000);
    CHECK(counts.figures().requested_bytes.current == 0);  // 0x2 and the last 0x1 were freed after the run
    CHECK(addresses.live_bytes() == 0);
}

TEST_CASE("replay: a stream resource gets each event's stream") {
    const trace t = parse_trace(small_trace, "small");
    simulated_resource addresses{{.capacity = std::size_t{64} << 20}};
    stream_recorder recorder{&addresses, {}};
    const std::vector<stream_ref> streams = simulated_streams(t);
    replay(t, recorder, streams);
    const std::vector<std::uintptr_t> expected{0, 7, 0, 7, 7, 0, 0, 7};  // then the leftovers by slot: 0x1, 0x2
    CHECK(recorder.streams == expected);
}

TEST_CASE("replay: exhaustion propagates and frees what was taken") {
    const trace t = parse_trace(small_trace, "small");
    simulated_resource addresses{{.capacity = std::size_t{64} << 20}};
    limited<ref<simulated_resource>> capped{addresses, {.limit_bytes = 1500000}};
    CHECK_THROWS_AS(replay(t, capped), out_of_memory);
    CHECK(capped.live_bytes() == 0);
    CHECK(addresses.live_bytes() == 0);
}

TEST_CASE("replay: through a pool, twice, as poolkit-replay measures") {
    const trace t = parse_trace(small_trace, "small");
    simulated_resource addresses{{.capacity = std::size_t{64} << 20}};
    using counter = counted<ref<simulated_resource>, single_thread_counters>;
    counter reserved{addresses};
    {
        best_fit<ref<counter>> pool{reserved};
        replay(t, pool);
        replay(t, pool);
        CHECK(reserved.figures().allocations.allocated >= 1);
        CHECK(static_cast<std::size_t>(reserved.figures().allocated_bytes.peak) >= t.peak_live_bytes);
    }
    CHECK(reserved.figures().allocated_bytes.current == 0);
}
