"""The allocator's own cost per call through PyTorch, without Python: a small C++ extension
(built once per torch with torch.utils.cpp_extension, cached) times allocate + free pairs through
PyTorch's current CUDA allocator, each allocator in a process of its own.

Two paths are timed, with programs.py alloc_free's sizes (512 B to 8 MiB) and 16 blocks alive:
- tensor: CUDAAllocator::allocate, the DataPtr dropped (what torch.empty and every op's output
  reach);
- raw: raw_alloc_with_stream and raw_delete (torch.cuda.caching_allocator_alloc, cuDNN and cuBLAS
  workspaces, NCCL buffers).

With --trace FILE the calls are instead a recorded program's own (program_trace.py's trace,
poolkit's CSV): each allocate and free in turn through the tensor path, ns per event, on the
current stream and on a side stream, each with the GPU idle and behind a kernel that keeps it busy
(a stream-ordered pool asks a busy stream about its frees where an idle one answers at once).

    PYTHONPATH=<site>:python/checks python3 python/checks/allocator_calls.py [--allocators A,B] [--rounds R] [--trace FILE] [--lockstep]

With --rounds R each allocator runs R times, the order rotated each round; the table gives the
median over rounds of each round's best of five timings of each path, in ns per pair (per event
with --trace), and its ratio to the first allocator's (PyTorch's) in the same round, median and
range. With --lockstep a round runs every allocator's process at once and interleaves their
timings one by one (allocators.lockstep_round): a host that slows down for seconds, as shared
hosts do, then slows every allocator's timings alike, where one child after another would each
meet it alone. Exits 1 when a child fails.
"""
import argparse
import csv
import functools
import json
import statistics
import sys

import allocators
import program_trace
import programs

_SOURCE = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAStream.h>

#include <chrono>
#include <vector>

// ns per allocate + free through PyTorch's current CUDA allocator: `sizes` in turn, `alive` held.
double tensor_pairs(const std::vector<int64_t>& sizes, int64_t alive, int64_t repeats) {
    auto* allocator = c10::cuda::CUDACachingAllocator::get();
    std::vector<c10::DataPtr> held(static_cast<size_t>(alive));
    const auto start = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < repeats; ++r)
        for (size_t i = 0; i < sizes.size(); ++i) held[i % held.size()] = allocator->allocate(static_cast<size_t>(sizes[i]));
    held.clear();
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    return took.count() / static_cast<double>(repeats * static_cast<int64_t>(sizes.size()));
}

double raw_pairs(const std::vector<int64_t>& sizes, int64_t alive, int64_t repeats) {
    auto* allocator = c10::cuda::CUDACachingAllocator::get();
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream();
    std::vector<void*> held(static_cast<size_t>(alive), nullptr);
    const auto start = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < repeats; ++r) {
        for (size_t i = 0; i < sizes.size(); ++i) {
            void*& slot = held[i % held.size()];
            if (slot != nullptr) allocator->raw_delete(slot);
            slot = allocator->raw_alloc_with_stream(static_cast<size_t>(sizes[i]), stream);
        }
    }
    for (void* pointer : held)
        if (pointer != nullptr) allocator->raw_delete(pointer);
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    return took.count() / static_cast<double>(repeats * static_cast<int64_t>(sizes.size()));
}

// ns per event of a recorded trace through the tensor path: event i allocates sizes[i] bytes
// into slots[i] where sizes[i] >= 0, else drops that slot's block; what is left is dropped after
// each pass, within its time.
double trace_events(const std::vector<int64_t>& slots, const std::vector<int64_t>& sizes, int64_t slot_count,
                    int64_t repeats) {
    auto* allocator = c10::cuda::CUDACachingAllocator::get();
    std::vector<c10::DataPtr> held(static_cast<size_t>(slot_count));
    const auto start = std::chrono::steady_clock::now();
    for (int64_t r = 0; r < repeats; ++r) {
        for (size_t i = 0; i < slots.size(); ++i) {
            auto& slot = held[static_cast<size_t>(slots[i])];
            if (sizes[i] >= 0) slot = allocator->allocate(static_cast<size_t>(sizes[i]));
            else slot = c10::DataPtr();
        }
        for (auto& block : held) block = c10::DataPtr();
    }
    const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
    return took.count() / static_cast<double>(repeats * static_cast<int64_t>(slots.size()));
}
"""

PATHS = ("tensor", "raw")
TRACE_PATHS = ("trace", "trace busy", "trace, side stream", "trace, side stream busy")
ALIVE = 16
REPEATS = 20  # passes over the 10,000 sizes per timing
TRACE_REPEATS = 3  # passes over a trace per timing
TIMINGS = 5  # of each path; its figure is the best


def trace_calls(path):
    """A trace's allocates and frees as (slots, sizes, slot_count): event i allocates sizes[i]
    bytes into slots[i], or frees that slot's block where sizes[i] is -1. A slot is reused once
    freed; frees of blocks allocated before the trace began are left out."""
    slots, sizes, live, vacant = [], [], {}, []
    count = 0
    for row in program_trace.trace_rows(path):
        if row["Action"] == "allocate":
            if vacant:
                slot = vacant.pop()
            else:
                slot, count = count, count + 1
            live[row["Pointer"]] = slot
            slots.append(slot)
            sizes.append(int(row["Size"]))
        elif row["Pointer"] in live:
            slot = live.pop(row["Pointer"])
            vacant.append(slot)
            slots.append(slot)
            sizes.append(-1)
    return slots, sizes, count


def busy(torch, seconds):
    """Keeps the current stream's GPU busy for at least `seconds` (a kernel that spins; 2 GHz is
    above the clock of the GPUs measured, so it spins at least that long)."""
    torch.cuda._sleep(int(2e9 * seconds))


def time_trace(torch, module, calls, stream, path, warm):
    """ns per event of one timing of TRACE_REPEATS passes of `calls` on `stream`, behind a kernel
    that keeps its GPU busy where `path` ends with "busy"; the pool first holds what the trace needs
    where `warm` (the path's first timing), outside the time."""
    slots, sizes, count = calls
    with torch.cuda.stream(stream):
        if warm:
            module.trace_events(slots, sizes, count, 1)
        torch.cuda.synchronize()
        if path.endswith("busy"):
            busy(torch, 2 * TRACE_REPEATS * len(slots) * 2e-6)  # outlasts 2 µs an event
        ns = module.trace_events(slots, sizes, count, TRACE_REPEATS)
        torch.cuda.synchronize()
    return ns


def time_pairs(torch, timed, sizes, warm):
    """ns per pair of one timing of REPEATS passes over `sizes` through `timed` (tensor_pairs or
    raw_pairs), warmed first outside the time where `warm`."""
    if warm:
        timed(sizes, ALIVE, 2)
        torch.cuda.synchronize()
    return timed(sizes, ALIVE, REPEATS)


def timings(torch, module, trace=None):
    """A child's timings in their order, TIMINGS of each path (TRACE_PATHS with a trace, else
    PATHS): (path, timing), where timing() makes one and returns its ns per event (per pair)."""
    if trace is not None:
        calls = trace_calls(trace)
        side = torch.cuda.Stream()
        for path in TRACE_PATHS:
            stream = side if "side" in path else torch.cuda.current_stream()
            for k in range(TIMINGS):
                yield path, functools.partial(time_trace, torch, module, calls, stream, path, k == 0)
    else:
        sizes = programs.alloc_free_sizes()
        for path in PATHS:
            for k in range(TIMINGS):
                yield path, functools.partial(time_pairs, torch, getattr(module, f"{path}_pairs"), sizes, k == 0)


def child(name, trace=None, lockstep=False):
    """Times every path under allocator `name` and prints {"ns_per_pair": {path: best}, "figures"};
    with `lockstep`, each timing is a step of allocators.lockstep_round."""
    allocators.install(name)
    import torch
    from torch.utils import cpp_extension
    module = cpp_extension.load_inline(name="poolkit_allocator_calls", cpp_sources=[_SOURCE],
                                       functions=["tensor_pairs", "raw_pairs", "trace_events"], with_cuda=True,
                                       extra_cflags=["-O2"], verbose=False)
    torch.empty(1, device="cuda")
    steps = list(timings(torch, module, trace))  # a trace is read before the first step
    torch.cuda.synchronize()
    if lockstep:
        allocators.lockstep_ready()
    figures = {}
    for path, timing in steps:
        if lockstep:
            allocators.lockstep_go()
        ns = timing()
        figures[path] = min(figures.get(path, ns), ns)
        if lockstep:
            allocators.lockstep_step(ns)
    torch.cuda.synchronize()
    print(json.dumps({"ns_per_pair": figures, "figures": allocators.figures(name)}))


def table(rounds, names):
    """rounds: one {allocator: {path: ns per pair}} per round. A line per allocator: for each path
    the median ns over rounds, and the median (least - most) of its ratio to the first allocator's
    in the same round (programs.paired)."""
    paths = list(rounds[0][names[0]])
    lines = [f"{'allocator':30} " + " ".join(f"{path + ' ns':>10} {'ratio (least - most)':>22}" for path in paths)]
    ratios = {path: programs.paired([{n: r[n][path] for n in names} for r in rounds], reference=names[0]) for path in paths}
    for name in names:
        cells = []
        for path in paths:
            median, least, most = ratios[path][name]
            cells.append(f"{statistics.median(r[name][path] for r in rounds):10.0f} {median:6.3f} ({least:.3f} - {most:.3f})")
        lines.append(f"{name:30} " + " ".join(cells))
    return "\n".join(lines)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        rest = sys.argv[3:]
        trace = rest[rest.index("--trace") + 1] if "--trace" in rest else None
        child(sys.argv[2], trace, lockstep="--lockstep" in rest)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allocators", default="pytorch,pytorch expandable_segments,poolkit caching,poolkit expandable",
                        help="comma-separated names of allocators.py's ALLOCATORS or CONTROLS (the first is the reference)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each allocator, interleaved (default 3)")
    parser.add_argument("--trace", help="time this recorded trace's calls (program_trace.py's) instead of alloc_free's")
    parser.add_argument("--lockstep", action="store_true",
                        help="run a round's allocators at once, their timings interleaved one by one")
    args = parser.parse_args()
    names, unknown = allocators.chosen(args.allocators)
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    if args.trace is not None:
        try:  # a bad file fails here, before any child
            slots, _, count = trace_calls(args.trace)
        except (OSError, EOFError, KeyError, ValueError, csv.Error) as error:
            parser.error(f"{args.trace}: not a readable trace ({type(error).__name__}: {error})")
        if not slots:
            parser.error(f"{args.trace}: no allocation in the trace")
    extra = ["--trace", args.trace] if args.trace is not None else []
    rounds = []
    steps = TIMINGS * len(TRACE_PATHS if args.trace is not None else PATHS)
    for index in range(max(1, args.rounds)):
        if args.lockstep:
            runs = {name: run["ns_per_pair"]
                    for name, run in allocators.lockstep_round(__file__, names, [*extra, "--lockstep"], steps, index).items()}
        else:
            runs = {name: allocators.run_child(__file__, name, extra)["ns_per_pair"] for name in allocators.rotated(names, index)}
        rounds.append({name: runs[name] for name in names})
    if args.trace is not None:
        print(f"ns per event of {args.trace} ({len(slots):,} events, at most {count:,} blocks alive) through PyTorch's "
              f"allocator interface, median over {len(rounds)} round(s); / {names[0]}'s in the same round")
    else:
        print(f"ns per allocate + free through PyTorch's allocator interface ({ALIVE} alive, alloc_free's sizes), "
              f"median over {len(rounds)} round(s); / {names[0]}'s in the same round")
    print(table(rounds, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
