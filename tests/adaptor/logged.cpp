// logged<>: RMM's CSV, read back by the trace reader, and the round trip: a log written by
// logged<> replays to the same figures the logged program saw.
#include "../support/instrumented.hpp"

#include <poolkit/adaptor/logged.hpp>
#include <poolkit/adaptor/counted.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/observe/replay.hpp>
#include <poolkit/observe/trace.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace poolkit;
using test::instrumented;

}  // namespace

static_assert(has_try_allocate<logged<new_delete_resource>>);
static_assert(stream_resource<logged<ref<simulated_resource>>>);
static_assert(!has_property<logged<ref<simulated_resource>>, host_accessible>);

TEST_CASE("logged: one row per call in RMM's format, and failures as RMM writes them") {
    instrumented<> upstream;
    std::ostringstream out;
    {
        logged<ref<instrumented<>>> logger{upstream, out};
        void* p = logger.allocate(1000);
        logger.deallocate(p, 1000);
        upstream.limit(100);
        CHECK_THROWS_AS(static_cast<void>(logger.allocate(4096)), out_of_memory);
    }
    std::istringstream lines(out.str());
    std::string line;
    std::getline(lines, line);
    CHECK(line == "Thread,Time,Action,Pointer,Size,Stream");
    std::getline(lines, line);
    CHECK(line.find(",allocate,0x") != std::string::npos);
    CHECK(line.substr(line.size() - 7) == ",1000,0");
    std::getline(lines, line);
    CHECK(line.find(",free,0x") != std::string::npos);
    std::getline(lines, line);
    CHECK(line.find(",allocate failure,0x0,4096,0") != std::string::npos);
    const trace t = parse_trace(out.str(), "log");
    CHECK(t.events.size() == 2);  // the failure is read and skipped
}

TEST_CASE("logged: a logged random workload replays to the same figures") {
    simulated_resource addresses{{.capacity = std::size_t{1} << 30}};
    using counter = counted<ref<simulated_resource>, single_thread_counters>;
    std::ostringstream out;
    statistics_figures seen;
    stream_handle other_stream = reinterpret_cast<stream_handle>(std::uintptr_t{0x5000});
    {
        counter original{addresses};
        logged<ref<counter>> logger{original, out};
        std::mt19937_64 random(7);
        std::vector<std::pair<void*, std::size_t>> live;
        for (int step = 0; step < 3000; ++step) {
            if (live.empty() || random() % 100 < 55) {
                const std::size_t bytes = 1 + random() % (random() % 10 == 0 ? (4 << 20) : 20000);
                live.emplace_back(step % 3 == 0 ? logger.allocate_async(bytes, default_alignment, other_stream) : logger.allocate(bytes),
                                  bytes);
            } else {
                const std::size_t index = random() % live.size();
                logger.deallocate(live[index].first, live[index].second);
                live[index] = live.back();
                live.pop_back();
            }
        }
        for (std::size_t i = 0; i < live.size() / 2; ++i) logger.deallocate(live[i].first, live[i].second);
        seen = original.figures();
        for (std::size_t i = live.size() / 2; i < live.size(); ++i) logger.deallocate(live[i].first, live[i].second);
    }
    // Cut the log where `seen` was taken: drop the frees of the second half.
    std::string text = out.str();
    const trace whole = parse_trace(text, "log");
    const std::size_t kept = static_cast<std::size_t>(seen.allocations.allocated + seen.allocations.freed);
    REQUIRE(whole.events.size() > kept);
    std::size_t position = 0;
    for (std::size_t line = 0; line <= kept; ++line) position = text.find('\n', position) + 1;
    text.resize(position);
    const trace t = parse_trace(text, "log");
    CHECK(t.events.size() == kept);
    CHECK(t.streams.size() == 2);

    counter replayed{addresses};
    const std::vector<stream_ref> streams = simulated_streams(t);
    const replay_result result = replay(t, replayed, streams);
    CHECK(result.events == kept);
    const statistics_figures again = replayed.figures();
    CHECK(again.requested_bytes.peak == seen.requested_bytes.peak);
    CHECK(again.requested_bytes.allocated == seen.requested_bytes.allocated);
    CHECK(again.allocations.allocated == seen.allocations.allocated);
    CHECK(again.allocations.peak == seen.allocations.peak);
    CHECK(t.peak_live_bytes == static_cast<std::size_t>(seen.requested_bytes.peak));
    CHECK(t.unfreed_bytes == static_cast<std::size_t>(seen.requested_bytes.current));
    CHECK(again.requested_bytes.current == 0);  // replay frees what the log left live
    CHECK(addresses.live_bytes() == 0);
}

TEST_CASE("logged: to a file it opens itself") {
    const std::string path = "poolkit-logging-test.csv";
    {
        logged<new_delete_resource> logger{new_delete_resource{}, path};
        void* p = logger.allocate(64);
        logger.deallocate(p, 64);
    }
    std::ifstream in(path);
    std::stringstream text;
    text << in.rdbuf();
    CHECK(parse_trace(text.str(), path).events.size() == 2);
    std::remove(path.c_str());
    CHECK_THROWS_AS((logged<new_delete_resource>{new_delete_resource{}, std::string("/nonexistent/dir/x.csv")}), std::runtime_error);
}
