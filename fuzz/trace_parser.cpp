// Fuzzes the trace reader: any bytes either parse into a consistent trace or throw trace_error
// with a "name:line: message"; nothing else may happen. A parsed trace is replayed through
// counted<> over simulated address space to check that its slots and sizes are coherent.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include <poolkit/adaptor/counted.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/observe/replay.hpp>
#include <poolkit/observe/trace.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    poolkit::trace t;
    try {
        t = poolkit::parse_trace(text, "fuzz");
    } catch (const poolkit::trace_error& error) {
        if (std::string_view(error.what()).substr(0, 5) != "fuzz:") std::abort();
        return 0;
    }
    std::size_t allocations = 0;
    for (const auto& e : t.events) {
        if (e.slot >= t.slots || e.stream >= t.streams.size()) std::abort();
        allocations += e.action == poolkit::trace_action::allocate;
    }
    if (allocations != t.allocations) std::abort();
    if (t.peak_live_bytes > (std::size_t{1} << 36)) return 0;  // beyond the simulated capacity below
    poolkit::simulated_resource addresses{{.capacity = std::size_t{1} << 37}};
    poolkit::counted<poolkit::ref<poolkit::simulated_resource>, poolkit::single_thread_counters> counts{addresses};
    poolkit::replay(t, counts);
    const auto figures = counts.figures();
    if (static_cast<std::size_t>(figures.requested_bytes.peak) != t.peak_live_bytes) std::abort();
    if (figures.requested_bytes.current != 0 || addresses.live_bytes() != 0) std::abort();
    return 0;
}
