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

    PYTHONPATH=<site>:python/checks python3 python/checks/allocator_calls.py [--allocators A,B] [--rounds R] [--trace FILE]

With --rounds R each allocator runs R times, the order rotated each round; the table gives the
median over rounds of each round's best of five repeats, in ns per pair (per event with --trace),
and its ratio to the first allocator's (PyTorch's) in the same round, median and range. Exits 1
when a child fails.
"""
import argparse
import csv
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


def time_trace(torch, module, calls):
    """TRACE_PATHS' figures: each the best of five timings of TRACE_REPEATS passes."""
    slots, sizes, count = calls
    side = torch.cuda.Stream()
    figures = {}
    for path in TRACE_PATHS:
        with torch.cuda.stream(side if "side" in path else torch.cuda.current_stream()):
            module.trace_events(slots, sizes, count, 1)  # warm: the pool holds what the trace needs
            timings = []
            for _ in range(5):
                torch.cuda.synchronize()
                if path.endswith("busy"):
                    busy(torch, 2 * TRACE_REPEATS * len(slots) * 2e-6)  # outlasts 2 µs an event
                timings.append(module.trace_events(slots, sizes, count, TRACE_REPEATS))
                torch.cuda.synchronize()
        figures[path] = min(timings)
    return figures


def child(name, trace=None):
    allocators.install(name)
    import torch
    from torch.utils import cpp_extension
    module = cpp_extension.load_inline(name="poolkit_allocator_calls", cpp_sources=[_SOURCE],
                                       functions=["tensor_pairs", "raw_pairs", "trace_events"], with_cuda=True,
                                       extra_cflags=["-O2"], verbose=False)
    torch.empty(1, device="cuda")
    if trace is not None:
        figures = time_trace(torch, module, trace_calls(trace))
    else:
        drawn = programs.alloc_free_sizes()
        figures = {}
        for path in PATHS:
            timed = getattr(module, f"{path}_pairs")
            timed(drawn, ALIVE, 2)  # warm: the pool holds what the loop needs
            torch.cuda.synchronize()
            figures[path] = min(timed(drawn, ALIVE, REPEATS) for _ in range(5))
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
        child(sys.argv[2], sys.argv[4] if len(sys.argv) >= 5 and sys.argv[3] == "--trace" else None)
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allocators", default="pytorch,pytorch expandable_segments,poolkit caching,poolkit expandable",
                        help="comma-separated names of allocators.py's ALLOCATORS or CONTROLS (the first is the reference)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each allocator, interleaved (default 3)")
    parser.add_argument("--trace", help="time this recorded trace's calls (program_trace.py's) instead of alloc_free's")
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
    for index in range(max(1, args.rounds)):
        runs = {name: allocators.run_child(__file__, name, extra)["ns_per_pair"] for name in programs.rotated(names, index)}
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
