"""Where a step's time goes under each allocator: a program of programs.py (default: ResNet-18
training, batch 64 at 224x224) under torch.profiler, each allocator in a process of its own.
Prints per allocator the median step time, the GPU's kernel time per step, the host's time in
the CUDA calls that wait (synchronize, event and stream waits) and in the runtime's allocation
and event calls, and how many of each per step. torch.profiler records runtime API calls only:
the driver calls that map virtual memory (cuMemMap, cuMemCreate, ...) are not among them, so they
show as host time between the recorded calls, not in these columns.

    PYTHONPATH=<site>:python/checks python3 python/checks/step_profile.py [PROGRAM] [--allocators A,B] [--steps N]

A step slower under one allocator with the same kernel time is slower on the host (allocator
calls, waits); with more kernel time, on the device (where blocks lie). Exits 1 when a child fails.
"""
import argparse
import json
import statistics
import sys
import time

import allocators
import programs

WAITS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaStreamWaitEvent")
ALLOCATOR_CALLS = ("cudaMalloc", "cudaFree", "cudaEventRecord", "cudaEventQuery", "cudaMallocAsync", "cudaFreeAsync")


def child(name, program, steps):
    allocators.install(name)
    import torch
    programs.deterministic()
    step = programs.PROGRAMS[program]()
    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    times = []
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as profiler:
        for i in range(3, 3 + steps):
            start = time.perf_counter()
            step(i)
            torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
    kernel_us = waits_us = calls_us = 0.0
    counts = {}
    for event in profiler.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            kernel_us += event.time_range.elapsed_us()
        elif event.name in WAITS or event.name in ALLOCATOR_CALLS:
            counts[event.name] = counts.get(event.name, 0) + 1
            if event.name in WAITS:
                waits_us += event.cpu_time_total
            else:
                calls_us += event.cpu_time_total
    print(json.dumps({"ms_per_step": 1e3 * statistics.median(times), "kernel_ms": kernel_us / 1e3 / steps,
                      "wait_ms": waits_us / 1e3 / steps, "allocator_call_ms": calls_us / 1e3 / steps,
                      "per_step": {k: v / steps for k, v in sorted(counts.items())}}))


def main():
    if len(sys.argv) >= 5 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", nargs="?", default="resnet18_train", choices=list(programs.PROGRAMS))
    parser.add_argument("--allocators", help="comma-separated names of allocators.py's (default: every allocator but the run without hooks)")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    names, unknown = allocators.chosen(args.allocators)
    if unknown:
        parser.error(f"unknown: {', '.join(unknown)}")
    print(f"{'allocator':32} {'ms/step':>8} {'kernel ms':>10} {'waits ms':>9} {'alloc calls ms':>15}  calls per step")
    for name in names:
        run = allocators.run_child(__file__, name, [args.program, str(args.steps)])
        calls = ", ".join(f"{k} {v:g}" for k, v in run["per_step"].items())
        print(f"{name:32} {run['ms_per_step']:8.2f} {run['kernel_ms']:10.2f} {run['wait_ms']:9.3f} {run['allocator_call_ms']:15.3f}  {calls}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
