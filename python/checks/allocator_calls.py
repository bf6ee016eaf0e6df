"""The allocator's own cost per call through PyTorch, without Python: a small C++ extension
(built once per torch with torch.utils.cpp_extension, cached) times allocate + free pairs through
PyTorch's current CUDA allocator, each allocator in a process of its own.

Two paths are timed, with programs.py alloc_free's sizes (512 B to 8 MiB) and 16 blocks alive:
- tensor: CUDAAllocator::allocate, the DataPtr dropped (what torch.empty and every op's output
  reach);
- raw: raw_alloc_with_stream and raw_delete (torch.cuda.caching_allocator_alloc, cuDNN and cuBLAS
  workspaces, NCCL buffers).

    PYTHONPATH=<site>:python/checks python3 python/checks/allocator_calls.py [--allocators A,B] [--rounds R]

With --rounds R each allocator runs R times, the order rotated each round; the table gives the
median over rounds of each round's best of five repeats, in ns per pair, and its ratio to the first
allocator's (PyTorch's) in the same round, median and range. Exits 1 when a child fails.
"""
import argparse
import json
import statistics
import sys

import allocators
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
"""

PATHS = ("tensor", "raw")
ALIVE = 16
REPEATS = 20  # passes over the 10,000 sizes per timing


def child(name):
    allocators.install(name)
    import torch
    from torch.utils import cpp_extension
    module = cpp_extension.load_inline(name="poolkit_allocator_calls", cpp_sources=[_SOURCE],
                                       functions=["tensor_pairs", "raw_pairs"], with_cuda=True,
                                       extra_cflags=["-O2"], verbose=False)
    drawn = programs.alloc_free_sizes()
    torch.empty(1, device="cuda")
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
    lines = [f"{'allocator':30} " + " ".join(f"{path + ' ns':>10} {'ratio (least - most)':>22}" for path in PATHS)]
    ratios = {path: programs.paired([{n: r[n][path] for n in names} for r in rounds], reference=names[0]) for path in PATHS}
    for name in names:
        cells = []
        for path in PATHS:
            median, least, most = ratios[path][name]
            cells.append(f"{statistics.median(r[name][path] for r in rounds):10.0f} {median:6.3f} ({least:.3f} - {most:.3f})")
        lines.append(f"{name:30} " + " ".join(cells))
    return "\n".join(lines)


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--allocators", default="pytorch,pytorch expandable_segments,poolkit caching,poolkit expandable",
                        help="comma-separated names of allocators.py's (the first is the reference)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each allocator, interleaved (default 3)")
    args = parser.parse_args()
    names = args.allocators.split(",")
    unknown = [n for n in names if n not in allocators.ALLOCATORS]
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    rounds = []
    for index in range(max(1, args.rounds)):
        runs = {name: allocators.run_child(__file__, name, [])["ns_per_pair"] for name in programs.rotated(names, index)}
        rounds.append({name: runs[name] for name in names})
    print(f"ns per allocate + free through PyTorch's allocator interface ({ALIVE} alive, alloc_free's sizes), "
          f"median over {len(rounds)} round(s); / {names[0]}'s in the same round")
    print(table(rounds, names))
    return 0


if __name__ == "__main__":
    sys.exit(main())
