"""Records the allocation history of one of programs.py's programs under PyTorch's own allocator
and writes it as a poolkit trace, so that poolkit-replay can time every composition and PyTorch's
allocators on a real program's exact calls, with none of the program's own time around them:

    PYTHONPATH=python/src:python/checks python3 python/checks/program_trace.py PROGRAM OUT.csv.gz [--steps N]
    build/tools/poolkit-replay --upstream=cuda OUT.csv.gz --composition expandable,pytorch/expandable_segments

The program first runs two steps unrecorded (its model built, its kernels chosen, as a warm
program's are), then N steps (default 4) with the history recorded; the trace is what
`python -m poolkit.replay --convert` makes of that snapshot. Prints the trace's path, its events
and its streams. Exit status 2 for an unknown program.
"""
import argparse
import csv
import gzip
import sys
import tempfile

import programs


def trace_rows(path):
    """The events of a trace file (poolkit's CSV, gzipped or not), each a dict by the header's
    names (Thread, Time, Action, Pointer, Size, Stream)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", newline="") as f:
        yield from csv.DictReader(f)


def trace_figures(path):
    """The events and the distinct streams of a trace file."""
    streams = [row["Stream"] for row in trace_rows(path)]
    return len(streams), len(set(streams))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("program", help=f"of {', '.join(programs.PROGRAMS)}")
    parser.add_argument("out", help="the trace to write (.csv or .csv.gz)")
    parser.add_argument("--steps", type=int, default=4, help="steps recorded after the two unrecorded ones")
    args = parser.parse_args()
    if args.program not in programs.PROGRAMS:
        parser.error(f"unknown program {args.program!r}")

    import torch
    import poolkit.replay
    import snapshots

    programs.deterministic()
    step = programs.PROGRAMS[args.program]()
    for i in range(2):
        step(i)

    def recorded():
        for i in range(2, 2 + args.steps):
            step(i)

    with tempfile.TemporaryDirectory() as folder:
        snapshot, _ = snapshots.record(torch, "snapshot", folder, recorded, context=None, max_entries=10_000_000)
        status = poolkit.replay.main([snapshot, "--convert", args.out])
    if status != 0:
        return status
    events, streams = trace_figures(args.out)
    print(f"{args.out}: {events:,} events, {streams} stream(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
