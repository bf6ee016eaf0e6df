// The rule of building in place (docs/concepts.md): an adaptor's X(std::in_place, own..., args...)
// builds its upstream from args, its own arguments (those its ordinary constructor takes after the
// upstream) coming first, or none of them for its defaults; a combinator's takes the arguments of
// its ordinary constructor and builds its parts over the upstream. Each block with own arguments
// is built both ways here, over an upstream that cannot move.
#include "../support/sizes.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/limited.hpp>
#include <poolkit/adaptor/logged.hpp>
#include <poolkit/adaptor/per_thread.hpp>
#include <poolkit/adaptor/recorded.hpp>
#include <poolkit/adaptor/retried_on_oom.hpp>
#include <poolkit/adaptor/synchronized.hpp>
#include <poolkit/adaptor/tracked.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/simulated_resource.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <sstream>
#include <type_traits>
#include <vector>

using namespace poolkit;

namespace {
using memory_ref = ref<simulated_resource>;
// Cannot move, so only an in-place constructor builds it inside an adaptor.
using pinned_down = synchronized<best_fit<memory_ref>>;
static_assert(!std::is_move_constructible_v<pinned_down>);

using poolkit::test::KiB;
}  // namespace

TEST_CASE("adaptors built in place take their own options first, or none") {
    simulated_resource memory;
    const best_fit_options fit{.initial_size = 64 * KiB};

    limited<pinned_down> capped{std::in_place, {.limit_bytes = 4 * KiB}, memory_ref{memory}, fit};
    CHECK(capped.limit() == 4 * KiB);
    CHECK_THROWS_AS(capped.allocate(8 * KiB), out_of_memory);
    limited<pinned_down> uncapped{std::in_place, memory_ref{memory}, fit};
    uncapped.deallocate(uncapped.allocate(8 * KiB), 8 * KiB);  // no limit by default
    CHECK(uncapped.upstream_resource().locked([](const auto& pool) { return pool.reserved_bytes(); }) >= 64 * KiB);

    tracked<pinned_down> traced{std::in_place, {.capture_backtraces = true, .backtrace_depth = 4}, memory_ref{memory}, fit};
    CHECK(traced.options().capture_backtraces);
    CHECK(traced.options().backtrace_depth == 4);
    tracked<pinned_down> plain{std::in_place, memory_ref{memory}, fit};
    CHECK_FALSE(plain.options().capture_backtraces);

    std::ostringstream out;
    logged<pinned_down> noted{std::in_place, {.stream = &out, .path = {}}, memory_ref{memory}, fit};
    noted.deallocate(noted.allocate(KiB), KiB);
    CHECK(out.str().find("allocate") != std::string::npos);

    int calls = 0;
    retried_on_oom<pinned_down> retried{std::in_place,
                                        {.callback = [&](const oom_event&) { return ++calls < 3; }, .max_retries = 5},
                                        memory_ref{memory},
                                        best_fit_options{.initial_size = 64 * KiB, .maximum_size = 64 * KiB}};
    CHECK_THROWS_AS(retried.allocate(128 * KiB), out_of_memory);
    CHECK(calls == 3);  // the callback said no more on its third call

    history into;
    into.start(16, {});
    recorded<pinned_down> segments{std::in_place, into, recording_layer::segments, memory_ref{memory}, fit};
    CHECK(&segments.recorded_into() == &into);
    CHECK(segments.layer() == recording_layer::segments);
    recorded<pinned_down> blocks{std::in_place, into, memory_ref{memory}, fit};
    CHECK(blocks.layer() == recording_layer::blocks);
    recorded<pinned_down> by_default{std::in_place, memory_ref{memory}, fit};
    CHECK(&by_default.recorded_into() == &default_history());
}

TEST_CASE("stream_ordered and per_thread built in place take their options and events first, or none") {
    simulated_resource memory;
    using preset = caching_resource<simulated_resource, host_events>;

    preset tuned{std::in_place, {.power2_divisions = 4}, simulated_options{.capacity = 64 << 20}};
    CHECK(tuned.pool().options().power2_divisions == 4);
    CHECK(tuned.upstream_resource().options().capacity == 64 << 20);
    preset with_events{std::in_place, {.power2_divisions = 2}, host_events{}, simulated_options{.capacity = 32 << 20}};
    CHECK(with_events.pool().options().power2_divisions == 2);
    CHECK(with_events.upstream_resource().options().capacity == 32 << 20);
    preset by_default{std::in_place, simulated_options{.capacity = 16 << 20}};
    CHECK(by_default.pool().options().power2_divisions == caching_options{}.power2_divisions);
    CHECK(by_default.upstream_resource().options().capacity == 16 << 20);

    using shared = synchronized<caching_resource<memory_ref, host_events>>;
    per_thread<shared, host_events> fronts{std::in_place, {.max_cached_bytes = 16 * KiB}, memory_ref{memory}, caching_options{}};
    CHECK(fronts.options().max_cached_bytes == 16 * KiB);
    per_thread<shared, host_events> with_events_too{std::in_place, {.max_cached_bytes = 8 * KiB}, host_events{}, memory_ref{memory}};
    CHECK(with_events_too.options().max_cached_bytes == 8 * KiB);
    per_thread<shared, host_events> defaults{std::in_place, memory_ref{memory}};
    CHECK(defaults.options().max_cached_bytes == per_thread_options{}.max_cached_bytes);
}

TEST_CASE("a combinator built in place takes the upstream its parts are built over, then its own options") {
    simulated_resource memory;
    using classes = size_classes<memory_ref, best_fit<memory_ref>>;  // the large part is built over memory
    const classes three{std::in_place, memory_ref{memory}, {.sizes = {256, 512, 1024}}};
    CHECK(three.sizes() == std::vector<std::size_t>{256, 512, 1024});
    const classes geometric{std::in_place, memory_ref{memory}};
    CHECK(geometric.sizes().size() > 3);
}
