// The compositions poolkit-replay knows, by name. To add one, add an entry to
// compositions_over() below (or, for one that only exists on a GPU, to cuda_compositions() in
// cuda.hpp): a name, one line of description, and a function that builds the resource over
// `source`, the counted upstream.
//
// How a run measures: the upstream (simulated_resource, or cudaMalloc with --upstream=cuda) is
// wrapped in one counted<>, and the composition is built over a ref to it, so the peak of that
// counted<> is exactly the peak of what the composition reserved and its allocation count the
// upstream calls. Live bytes come from the trace itself. The first replay (cold) gives the
// figures and the samples over time; a second replay of the same trace through the same, now
// warm, composition gives ns/op, as in bench/traces/README.md.
#pragma once

#include "cache_sweep.hpp"

#include <poolkit/adaptor/counted.hpp>
#include <poolkit/core/captures.hpp>
#include <poolkit/core/ref.hpp>
#include <poolkit/observe/mapped_walk.hpp>
#include <poolkit/observe/replay.hpp>
#include <poolkit/observe/snapshot.hpp>
#include <poolkit/observe/trace.hpp>
#include <poolkit/strategy/best_fit.hpp>
#include <poolkit/strategy/buddy.hpp>
#include <poolkit/strategy/exact_cache.hpp>
#include <poolkit/strategy/segregator.hpp>
#include <poolkit/adaptor/completed_events.hpp>
#include <poolkit/interop/option_text.hpp>
#include <poolkit/presets.hpp>
#include <poolkit/strategy/expandable.hpp>
#include <poolkit/strategy/size_classes.hpp>
#include <poolkit/upstream/simulated_resource.hpp>
#include <poolkit/upstream/simulated_vmm_resource.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace poolkit::replay_tool {

// Live and reserved bytes after one event.
struct sample {
    std::size_t event;
    std::size_t live_bytes;
    std::size_t reserved_bytes;
};

struct run_settings {
    std::span<const stream_ref> streams;  // one per trace stream
    std::function<void(std::size_t done, std::size_t total)> progress;  // may be empty
    std::function<void(const trace_event&)> after_event;  // may be empty; after every event of every pass
    std::size_t samples = 0;  // how many samples to take (for --svg)
    capture_check captures = capture_check::every_call;  // for compositions that check (CUDA graphs)
    // Set on every expandable composition's options, in order (--expandable-option NAME=VALUE).
    std::vector<std::pair<std::string, std::string>> expandable_options;
    // Passes over the trace (--passes): the first is the cold pass, the last the warm pass whose
    // figures are reported; those between let a composition settle.
    std::size_t passes = 2;
    // The event after which the composition's layout is taken (--snapshot), of pass snapshot_pass
    // (0: the cold pass), where it can be walked: PyTorch's snapshot "segments"
    // (observe/snapshot.hpp) into run_figures.
    std::optional<std::size_t> snapshot_after;
    std::size_t snapshot_pass = 0;
    // Find where reserved bytes first reach their most (run_figures::reserved_peak_at): reserved
    // is read after every event of every pass.
    bool find_reserved_peak = false;
    // Bytes of other host memory read after every event, their time not counted (--cold-caches,
    // cache_sweep.hpp): the composition's calls timed with its data out of the CPU's caches.
    std::size_t cold_caches = 0;
};

// `options` with each of `changes` set by its name (interop/option_text.hpp), checked against
// `granularity`. Throws std::invalid_argument naming the option and the rule.
inline expandable_options with_changes(expandable_options options, const std::vector<std::pair<std::string, std::string>>& changes,
                                       std::size_t granularity) {
    for (const auto& [name, value] : changes) set_option(options, name, value, granularity);
    return options;
}

// An event of a run: its pass (0: the cold pass) and its index in the trace.
struct event_position {
    std::size_t pass = 0;
    std::size_t index = 0;
};

// The physical memory operations of a virtual memory (core/virtual_memory.hpp), over one pass.
struct physical_ops {
    std::size_t maps = 0;
    std::size_t unmaps = 0;
    std::size_t creates = 0;  // physical allocations made
    std::size_t releases = 0;  // physical allocations given back

    friend physical_ops operator-(const physical_ops& a, const physical_ops& b) noexcept {
        return {a.maps - b.maps, a.unmaps - b.unmaps, a.creates - b.creates, a.releases - b.releases};
    }
};

// What `memory` has done so far (a virtual memory that counts its physical allocations).
template <class Memory>
physical_ops physical_ops_of(const Memory& memory) {
    return {memory.map_calls(), memory.unmap_calls(), memory.created_allocations(), memory.released_allocations()};
}

struct run_figures {
    replay_result cold;
    replay_result warm;  // the last pass
    std::size_t passes = 2;  // the cold pass, then passes - 1 warm ones
    std::size_t cold_caches = 0;  // bytes read between events, their time taken out (run_settings)
    std::size_t peak_reserved_bytes = 0;
    // Upstream allocations in the cold (first) pass, and in the warm (last) one; unknown where the
    // upstream is a driver pool.
    std::optional<std::size_t> upstream_allocs;
    std::optional<std::size_t> warm_upstream_allocs;
    // The physical operations of each pass, where the composition maps virtual memory itself.
    std::optional<physical_ops> cold_ops;
    std::optional<physical_ops> warm_ops;
    std::vector<sample> samples;
    // The layout after run_settings::snapshot_after, as observe/snapshot.hpp writes it; none where
    // the composition cannot be walked (the upstream alone, driver pools, PyTorch's allocator).
    std::optional<std::string> snapshot;
    // The first event after which reserved bytes were at their most over every pass, where
    // run_settings::find_reserved_peak asked for it: where the footprint was decided.
    std::optional<event_position> reserved_peak_at;
};

// The snapshot of `r` (observe/snapshot.hpp), or none where r cannot be walked.
template <class R>
std::optional<std::string> snapshot_of(const R& r) {
    if constexpr (walkable<R>) {
        return snapshot(r);
    } else {
        return std::nullopt;
    }
}

// The driver calls a run of a composition took (counted where the streams are simulated).
struct event_calls {
    std::uint64_t records = 0;
    std::uint64_t queries = 0;
    std::uint64_t waits = 0;
    std::uint64_t synchronizations = 0;
};

struct composition {
    std::string name;
    std::string description;
    std::function<run_figures(const trace&, const run_settings&)> run;
};

// Replays `t` settings.passes times (at least twice) through `resource`, reading reserved bytes
// from `reserved()` as it goes, and around the cold and the last pass the upstream's allocations
// so far from `upstream_calls()` and the physical operations so far from `ops()` (std::nullopt:
// unknown).
template <class R, class Reserved, class UpstreamCalls, class Ops = std::optional<physical_ops> (*)(),
          class Layout = std::optional<std::string> (*)()>
run_figures measure_replay(
    const trace& t, const run_settings& settings, R& resource, Reserved reserved, UpstreamCalls upstream_calls,
    Ops ops = [] { return std::optional<physical_ops>{}; }, Layout layout = [] { return std::optional<std::string>{}; }) {
    if constexpr (requires { resource.capture_checks(settings.captures); }) resource.capture_checks(settings.captures);
    run_figures figures;
    const std::size_t total = t.events.size();
    const std::size_t sample_every = settings.samples == 0 ? 0 : std::max<std::size_t>(1, total / settings.samples);
    const std::size_t progress_every = std::max<std::size_t>(1, total / 100);
    const std::size_t passes = std::max<std::size_t>(2, settings.passes);
    figures.passes = passes;
    cache_sweep sweep(settings.cold_caches);
    figures.cold_caches = sweep.bytes();
    std::size_t live = 0;
    std::size_t most_reserved = 0;
    // After event `index` of `pass`: the reserved peak's position and the layout, where asked for.
    const auto look = [&](std::size_t pass, std::size_t index) {
        if (settings.find_reserved_peak) {
            if (const std::size_t now = reserved(); !figures.reserved_peak_at || now > most_reserved) {
                most_reserved = now;
                figures.reserved_peak_at = event_position{pass, index};
            }
        }
        if (settings.snapshot_pass == pass && settings.snapshot_after == index) figures.snapshot = layout();
    };
    figures.cold = replay(t, resource, settings.streams, [&](std::size_t index, const trace_event& e) {
        live = e.action == trace_action::allocate ? live + e.bytes : live - e.bytes;
        if (sample_every != 0 && (index % sample_every == 0 || index + 1 == total)) {
            figures.samples.push_back({index, live, reserved()});
        }
        if (settings.progress && (index % progress_every == 0 || index + 1 == total)) settings.progress(index + 1, passes * total);
        if (settings.after_event) settings.after_event(e);
        look(0, index);
        sweep.between();
    });
    figures.cold.seconds -= sweep.take_seconds();
    const std::optional<std::size_t> after_cold = upstream_calls();
    const std::optional<physical_ops> ops_after_cold = ops();
    std::optional<std::size_t> before_warm;  // before the last pass
    std::optional<physical_ops> ops_before_warm;
    for (std::size_t pass = 1; pass < passes; ++pass) {
        const bool looking = settings.find_reserved_peak || (settings.snapshot_after && settings.snapshot_pass == pass);
        if (pass + 1 == passes) {
            before_warm = upstream_calls();
            ops_before_warm = ops();
        }
        figures.warm = replay(t, resource, settings.streams, [&](std::size_t index, const trace_event& e) {
            if (settings.progress && index % progress_every == 0) settings.progress(pass * total + index + 1, passes * total);
            if (settings.after_event) settings.after_event(e);
            if (looking) look(pass, index);
            sweep.between();
        });
        figures.warm.seconds -= sweep.take_seconds();
    }
    if (settings.progress) settings.progress(passes * total, passes * total);
    if (const std::optional<std::size_t> after_warm = upstream_calls(); after_cold && before_warm && after_warm) {
        figures.upstream_allocs = *after_cold;
        figures.warm_upstream_allocs = *after_warm - *before_warm;
    }
    if (const std::optional<physical_ops> ops_after_warm = ops(); ops_after_cold && ops_before_warm && ops_after_warm) {
        figures.cold_ops = *ops_after_cold;
        figures.warm_ops = *ops_after_warm - *ops_before_warm;
    }
    return figures;
}
template <class R, class Reserved>
run_figures measure_replay(const trace& t, const run_settings& settings, R& resource, Reserved reserved) {
    return measure_replay(t, settings, resource, reserved, [] { return std::optional<std::size_t>{}; });
}

// Builds a composition with `build(source)` over a counted `upstream` and measures it.
template <class Upstream, class Build>
run_figures measure_over(const trace& t, const run_settings& settings, Upstream& upstream, Build build) {
    using counted_type = counted<ref<Upstream>, single_thread_counters>;
    counted_type reserved{ref<Upstream>(upstream)};
    run_figures figures;
    {
        auto resource = build(ref<counted_type>(reserved));
        figures = measure_replay(
            t, settings, *resource, [&reserved] { return static_cast<std::size_t>(reserved.figures().allocated_bytes.current); },
            [&reserved] { return std::optional<std::size_t>(static_cast<std::size_t>(reserved.figures().allocations.allocated)); },
            [] { return std::optional<physical_ops>{}; }, [&resource] { return snapshot_of(*resource); });
    }
    figures.peak_reserved_bytes = static_cast<std::size_t>(reserved.figures().allocated_bytes.peak);
    return figures;
}

inline constexpr std::size_t MiB = std::size_t{1} << 20;

// The expandable preset's shape over the virtual memory that `make_memory()` returns (as a
// unique_ptr): reserved is what is mapped, upstream calls are map calls. Three of them: the
// preset's defaults (PyTorch expandable_segments' policy, nothing unmapped for new mappings, over
// poolkit's placement, large blocks in 16 MiB physical allocations), mapped memory following live
// memory (peak_slack 0), and following it exactly.
template <class Events, class MakeMemory>
std::vector<composition> expandable_compositions(MakeMemory make_memory) {
    const auto make = [make_memory](std::string name, std::string description, expandable_options options) {
        return composition{std::move(name), std::move(description), [make_memory, options](const trace& t, const run_settings& s) {
                               auto memory = make_memory();
                               using memory_type = typename decltype(memory)::element_type;
                               run_figures figures;
                               {
                                   stream_ordered<ref<memory_type>, lanes<expandable>, Events> pool{
                                       ref<memory_type>(*memory), with_changes(options, s.expandable_options, memory->granularity())};
                                   figures = measure_replay(
                                       t, s, pool, [&memory] { return memory->mapped_bytes(); },
                                       [&memory] { return std::optional<std::size_t>(memory->map_calls()); },
                                       [&memory] { return std::optional<physical_ops>(physical_ops_of(*memory)); },
                                       [&] { return std::optional<std::string>(snapshot(mapped_walk(pool, *memory))); });
                               }
                               figures.peak_reserved_bytes = memory->peak_mapped_bytes();
                               return figures;
                           }};
    };
    return {make("expandable",
                 "stream-ordered, one expandable pool (poolkit/presets.hpp): best fit over virtual address space, granules "
                 "mapped as blocks need them and kept mapped until empty_cache or the physical limit (PyTorch "
                 "expandable_segments' policy), large blocks in 16 MiB physical allocations, a large request of 32 MiB "
                 "or more that would map served from free ones aliased side by side (stitching; reserved: peak mapped; "
                 "upstream calls: map calls)",
                 expandable_options{}),
            make("expandable/unstitched",
                 "the expandable preset without stitching (expandable_options::stitch false): a large request that no free "
                 "block holds maps new memory",
                 expandable_options{.stitch = false}),
            make("expandable/old_holes",
                 "the expandable preset with expandable_options::small_in_old_holes: a small request under half a granule "
                 "that its small spans would map for goes into the large spans' longest-free mapped hole instead",
                 expandable_options{.small_in_old_holes = true}),
            make("expandable/follow",
                 "the expandable preset with mapped memory following live memory (peak_slack 0): the cache unmapped for new "
                 "mappings down to the peak of live memory, up to 20% more kept where that remaps often",
                 expandable_options{.peak_slack = 0}),
            make("expandable/exact",
                 "the expandable preset following live memory whatever it costs (expandable_options::exact_follow()): "
                 "no slack raised, a physical allocation per granule",
                 expandable_options::exact_follow())};
}

// Every composition over the upstream that `make_upstream()` returns (as a unique_ptr), in the
// order the table lists them. Events orders the streams of stream-ordered compositions.
template <class Events, class MakeUpstream>
std::vector<composition> compositions_over(MakeUpstream make_upstream) {
    using upstream_type = typename decltype(make_upstream())::element_type;
    using source = ref<counted<ref<upstream_type>, single_thread_counters>>;
    std::vector<composition> list;
    const auto add = [&](std::string name, std::string description, auto build) {
        list.push_back({std::move(name), std::move(description), [make_upstream, build](const trace& t, const run_settings& s) {
                            auto upstream = make_upstream();
                            return measure_over(t, s, *upstream, build);
                        }});
    };
    add("upstream", "no pool: every allocate and free goes to the upstream (the reference: ratio 1.0, slow on a GPU)",
        [](source up) { return std::make_unique<source>(up); });
    add("best_fit", "best_fit, default options: 2 MiB first chunk, each later chunk doubles what is reserved",
        [](source up) { return std::make_unique<best_fit<source>>(up); });
    add("best_fit/as_needed", "best_fit, chunks as large as the request needs, rounded to 2 MiB", [](source up) {
        return std::make_unique<best_fit<source>>(up, best_fit_options{.initial_size = 0, .growth = growth_policy::as_needed(2 * MiB)});
    });
    add("best_fit/step_128M", "best_fit, chunks of 128 MiB (or the request, when larger)", [](source up) {
        return std::make_unique<best_fit<source>>(up, best_fit_options{.initial_size = 0, .growth = growth_policy::fixed_step(128 * MiB)});
    });
    add("buddy", "buddy, default options", [](source up) { return std::make_unique<buddy<source>>(up); });
    add("size_classes+best_fit", "size_classes (256 B to 1 MiB, 4 classes per doubling) in front of a default best_fit", [](source up) {
        using pool = size_classes<source, best_fit<source>>;
        return std::make_unique<pool>(up, best_fit<source>(up), size_classes_options{});
    });
    add("caching", "the caching preset (poolkit/presets.hpp): stream-ordered, one caching_pool, default options",
        [](source up) { return std::make_unique<caching_resource<source, Events>>(up); });
    add("caching/pytorch",
        "the caching preset with PyTorch's rules for large blocks: chunks as needed (2 MiB steps), "
        "free chunks kept until empty_cache",
        [](source up) {
            return std::make_unique<caching_resource<source, Events>>(
                up, caching_options{.large_growth = growth_policy::as_needed(2 * MiB), .release_before_growth = false});
        });
    add("tiered",
        "up to 1 MiB: best_fit with 8 MiB chunks; larger: whole blocks cached by size, the cache "
        "returned upstream on a miss",
        [](source up) {
            using small = best_fit<source>;
            using pool = segregator<1 * MiB, small, exact_cache<source>>;
            return std::make_unique<pool>(small(up, best_fit_options{.initial_size = 0, .growth = growth_policy::fixed_step(8 * MiB)}),
                                          exact_cache<source>(up));
        });
    return list;
}

// The compositions over simulated address space: any trace replays on a CPU. Events orders the
// streams: completed_events (every free at once ready for every stream), or lagging_events (--lag).
template <class Events>
std::vector<composition> simulated_compositions_over() {
    auto list = compositions_over<Events>(
        [] { return std::make_unique<simulated_resource>(simulated_options{.capacity = std::size_t{512} << 30}); });
    // The H200's granule and memory, over simulated address space as large as cuda_vmm_resource
    // reserves there (32 times the memory).
    for (auto& c : expandable_compositions<Events>([] {
             return std::make_unique<simulated_vmm_resource>(simulated_vmm_options{
                 .capacity = std::size_t{32 * 141} << 30, .granularity = 2 * MiB, .physical_limit = std::size_t{141} << 30});
         })) {
        list.push_back(std::move(c));
    }
    return list;
}

inline std::vector<composition> simulated_compositions() { return simulated_compositions_over<completed_events>(); }

}  // namespace poolkit::replay_tool
