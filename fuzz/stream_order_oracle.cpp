// Fuzzes the stream-order oracle (tests/support/stream_order_oracle.hpp): the input chooses the
// lane strategy, the upstream kind and every step — allocations on streams made and destroyed
// (some forgotten first; some declared lasting, never destroyed), frees on the same or another stream, record_use, work completing —
// over an upstream small enough that lanes run out and give memory back by every path. Any block
// handed to a stream before an earlier user's work passed its free, or two live blocks sharing a
// byte, aborts; check_invariants() runs every few steps and at the end; nothing may leak.
// Fuzzers build with NDEBUG; their checks must stay on.
#define POOLKIT_ENABLE_ASSERTS 1

#include "../tests/support/instrumented.hpp"
#include "../tests/support/stream_order_oracle.hpp"

#include <poolkit/adaptor/host_events.hpp>
#include <poolkit/adaptor/stream_ordered.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/caching_pool.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/strategy/fixed_size.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/new_delete_resource.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <cstddef>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

// Choices from the input's bytes; past its end, zeros (the oracle then winds down).
struct input {
    const std::uint8_t* data;
    std::size_t size;
    std::size_t at = 0;
    std::uint64_t operator()(std::uint64_t bound) {
        if (bound <= 1) return 0;
        std::uint64_t value = 0;
        for (std::uint64_t span = 1; span < bound && span != 0; span <<= 8) value = value << 8 | (at < size ? data[at++] : 0);
        return value % bound;
    }
};

template <class Pool>
void run(Pool& pool, poolkit::host_events& events, input& choices, std::size_t streams) {
    // About one stream in three lasting: covered during other streams' calls.
    const poolkit::test::oracle_options options{
        .streams = streams, .steps = choices.size / 3 + 1, .largest = 1 * MiB, .check_every = 16, .lasting_share = 3};
    // (input caps the steps at 128: past them the bytes are ignored, so long inputs stay fast)
    const auto report = poolkit::test::stream_order_oracle(pool, events, options, [&](std::uint64_t bound) { return choices(bound); });
    if (report.violations != 0 || report.overlaps != 0) {
        std::fprintf(stderr, "%s\n", report.describe().c_str());
        std::abort();
    }
    pool.release();
}

template <class Memory, template <class> class Strategy, class Options>
void over(const Options& options, input& choices, std::size_t streams) {
    poolkit::test::instrumented<Memory> memory;
    memory.limit(4 * MiB);
    {
        poolkit::host_events events;
        using shared = poolkit::ref<poolkit::test::instrumented<Memory>>;
        poolkit::stream_ordered<shared, poolkit::lanes<Strategy, Options>, poolkit::host_events> pool{shared{memory}, options, events};
        run(pool, events, choices, streams);
    }
    if (memory.live_bytes() != 0 || !memory.errors().empty()) std::abort();
}

template <class U>
using best_fit_lane = poolkit::best_fit<U>;
template <class U>
using buddy_lane = poolkit::buddy<U>;
template <class U>
using caching_lane = poolkit::caching_pool<U>;
template <class U>
using size_classes_lane = poolkit::size_classes<U>;
template <class U>
using fixed_size_lane = poolkit::fixed_size<U>;

template <class Memory>
void strategies(unsigned which, input& choices, std::size_t streams) {
    switch (which % 5) {
        case 0:
            over<Memory, best_fit_lane>(
                poolkit::best_fit_options{.initial_size = 256 * KiB, .growth = poolkit::growth_policy::as_needed(256 * KiB)}, choices,
                streams);
            break;
        case 1:
            over<Memory, caching_lane>(
                poolkit::caching_options{
                    .small_size = 64 * KiB, .small_chunk = 256 * KiB, .large_growth = poolkit::growth_policy::fixed_step(1 * MiB)},
                choices, streams);
            break;
        case 2:
            over<Memory, buddy_lane>(poolkit::buddy_options{.chunk_size = 1 * MiB}, choices, streams);
            break;
        case 3:
            over<Memory, size_classes_lane>(poolkit::size_classes_options{.largest = 64 * KiB, .slab_size = 256 * KiB}, choices, streams);
            break;
        default:
            over<Memory, fixed_size_lane>(poolkit::fixed_size_options{.block_size = 16 * KiB, .slab_size = 64 * KiB}, choices, streams);
            break;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 2) return 0;
    input choices{data + 2, std::min<std::size_t>(size - 2, 3 * 128)};
    const unsigned which = data[0];
    const std::size_t streams = 2 + data[1] % 40;
    switch (which / 5 % 3) {
        case 0:
            strategies<poolkit::simulated_resource>(which, choices, streams);
            break;
        case 1:
            strategies<poolkit::new_delete_resource>(which, choices, streams);
            break;
        default: {
            poolkit::simulated_vmm_resource memory{{.capacity = 256 * MiB, .granularity = 64 * KiB, .physical_limit = 4 * MiB}};
            poolkit::host_events events;
            using shared = poolkit::ref<poolkit::simulated_vmm_resource>;
            const poolkit::expandable_options options{.span_bytes = 8 * MiB, .small_size = 64 * KiB, .max_cached_bytes = 2 * MiB};
            {
                poolkit::stream_ordered<shared, poolkit::lanes<poolkit::expandable>, poolkit::host_events> pool{shared{memory}, options,
                                                                                                                events};
                run(pool, events, choices, streams);
            }
            if (memory.mapped_bytes() != 0) std::abort();
        }
    }
    return 0;
}
