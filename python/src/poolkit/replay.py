"""Replays a PyTorch memory snapshot's allocation history under poolkit's compositions.

A program records its history with torch.cuda.memory._record_memory_history() and writes it with
torch.cuda.memory._dump_snapshot("snap.pickle"). This module turns the snapshot's device_traces
into poolkit's trace format (RMM's CSV: Thread,Time,Action,Pointer,Size,Stream) and runs
poolkit-replay on it, which prints each composition's ns/op and peak reserved / peak live:

    python -m poolkit.replay snap.pickle                        # every composition
    python -m poolkit.replay snap.pickle -- --composition=caching,expandable --svg=memory.svg
    python -m poolkit.replay snap.pickle --convert snap.csv.gz  # only convert, for sharing
    python -m poolkit.replay snap.pickle --device 1             # a snapshot of several devices
    python -m poolkit.replay snap.pickle --snapshot poolkit.pickle -- --composition=expandable
        # poolkit's layout of the program at its peak, for PyTorch's viewer:
        # python -m torch.cuda._memory_viz segment_plot poolkit.pickle -o poolkit.html

What is read: `alloc` is an allocation, `free_requested` (the program's free, on the block's stream)
a free, placed where its `free_completed` took effect when that came later (a block used on other
streams, record_stream: until then the memory could not be reused); segment and `snapshot` entries
describe PyTorch's own allocator and are left out. A history starts where recording began (the
model's weights are usually older) and keeps at most max_entries events: a block freed with no
allocation seen was alive from the start, and so is a block the snapshot's segments show allocated
that the history never mentions; both are allocated at the start of the trace and counted in the
report. poolkit-replay comes from --replay, POOLKIT_REPLAY or PATH. Exit status: poolkit-replay's;
2 for a file that is not a snapshot, or a bad command line.
"""
import argparse
import gzip
import os
import pickle
import shutil
import subprocess
import sys
import tempfile

from ._frontend import _segment
from ._plugin import PoolkitError

HEADER = "Thread,Time,Action,Pointer,Size,Stream\n"


def load_snapshot(path):
    """The snapshot dict of a PyTorch memory snapshot file, plain or gzip-compressed; PoolkitError
    naming the file otherwise."""
    try:
        with open(path, "rb") as f:
            compressed = f.read(2) == b"\x1f\x8b"
        with (gzip.open if compressed else open)(path, "rb") as f:
            snapshot = pickle.load(f)
    except FileNotFoundError:
        raise PoolkitError(f"{path}: no such file") from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError, ImportError, IndexError, OSError) as error:
        raise PoolkitError(f"{path}: not a PyTorch memory snapshot (pickle could not read it: {error})") from None
    if not isinstance(snapshot, dict) or not isinstance(snapshot.get("device_traces"), list):
        raise PoolkitError(f"{path}: not a PyTorch memory snapshot (no device_traces: was it written by "
                           "torch.cuda.memory._dump_snapshot() with history recorded?)")
    return snapshot


def _devices_with_events(snapshot):
    return [d for d, trace in enumerate(snapshot["device_traces"]) if trace]


def convert(snapshot, device=None):
    """The trace rows (time_us, action, address, size, stream) of one device's history, and a report
    (a dict of counts). `device` may be left out where only one device has events."""
    devices = _devices_with_events(snapshot)
    if device is None:
        if not devices:
            raise PoolkitError("the snapshot holds no allocation history: record it with "
                               "torch.cuda.memory._record_memory_history() before the work, then dump")
        if len(devices) > 1:
            raise PoolkitError(f"the snapshot has history on devices {devices}: choose one with --device")
        device = devices[0]
    if device < 0 or device >= len(snapshot["device_traces"]) or not snapshot["device_traces"][device]:
        raise PoolkitError(f"no allocation history on device {device} (devices with history: {devices})")
    report = {"device": device, "allocations": 0, "frees": 0, "freed_unseen": 0, "alive_throughout": 0, "ooms": 0,
              "left_out": 0, "frees_delayed": 0, "pending_at_end": 0}
    history = snapshot["device_traces"][device]
    # PyTorch 2.1+ records when a free took effect (free_completed): at once for most, after other
    # streams' work for a block used on them (record_stream). There the free goes where it took
    # effect, since until then the memory was not free to reuse. Older histories have only the request.
    completes = any(isinstance(e, dict) and e.get("action") == "free_completed" for e in history)
    live = {}  # address -> (size, stream)
    pending = {}  # address -> (time of the request, size, stream, rows and allocations by then): requested, not completed
    allocations_so_far = 0
    seen = set()
    rows, at_start = [], []
    first_time = None
    for index, entry in enumerate(history):
        try:
            action, address, size = entry["action"], int(entry["addr"]), int(entry["size"])
            stream = int(entry.get("stream", 0))
            time_us = int(entry.get("time_us", 0))
        except (KeyError, TypeError, ValueError) as error:
            raise PoolkitError(f"device_traces[{device}][{index}]: not a trace entry ({error!r})") from None
        if first_time is None:
            first_time = time_us
        when = max(time_us - first_time, 0)
        if action == "alloc":
            if address in live or address in pending:
                raise PoolkitError(f"device_traces[{device}][{index}]: alloc of {address:#x}, which is "
                                   + ("live already" if address in live else "freed but not yet completed"))
            live[address] = (size, stream)
            seen.add(address)
            rows.append((when, "allocate", address, size, stream))
            allocations_so_far += 1
            report["allocations"] += 1
        elif action == "free_requested":
            if address not in live:
                if address in seen:
                    raise PoolkitError(f"device_traces[{device}][{index}]: free of {address:#x}, which was freed already")
                # Allocated before the history begins (recorded later, or dropped by max_entries).
                at_start.append((0, "allocate", address, size, stream))
                seen.add(address)
                report["freed_unseen"] += 1
            else:
                size = live.pop(address)[0]
            report["frees"] += 1
            if completes:
                pending[address] = (when, size, stream, len(rows), allocations_so_far)
            else:
                rows.append((when, "free", address, size, stream))
        elif action == "free_completed" and address in pending:
            requested, size, stream, written, allocations = pending.pop(address)
            # As requested where no row came in between; else where it completed, and delayed where
            # allocations came in between (other frees completing are no delay).
            rows.append((requested if len(rows) == written else when, "free", address, size, stream))
            if allocations_so_far != allocations:
                report["frees_delayed"] += 1
        elif action == "oom":
            report["ooms"] += 1
        else:  # PyTorch's own entries; free_completed of a free it requested before the history began
            report["left_out"] += 1
    # Requested but not completed when the snapshot was taken: still held for other streams' work.
    report["pending_at_end"] = len(pending)
    for segment in snapshot.get("segments", []):
        if segment.get("device", device) != device:
            continue
        for block in segment.get("blocks", []):
            if block.get("state") == "active_allocated" and int(block["address"]) not in seen:
                at_start.append((0, "allocate", int(block["address"]), int(block["size"]), int(segment.get("stream", 0))))
                report["alive_throughout"] += 1
    return at_start + rows, report


def peak_live_bytes(rows, pytorch_blocks=False):
    """The most bytes live at once in convert()'s rows: as asked for (poolkit-replay's peak live),
    or with pytorch_blocks in PyTorch's block sizes (at least 512 bytes, in multiples of 512), which
    its allocator counts as active."""
    live = peak = 0
    for _, action, _, size, _ in rows:
        bytes_ = (max(size, 1) + 511) // 512 * 512 if pytorch_blocks else size
        live += bytes_ if action == "allocate" else -bytes_
        peak = max(peak, live)
    return peak


def write_trace(rows, path):
    """Writes rows as poolkit's trace format; gzip where `path` ends in .gz."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt", encoding="ascii", newline="") as f:
        f.write(HEADER)
        for when, action, address, size, stream in rows:
            f.write(f"0,{when // 1_000_000}.{when % 1_000_000:06d},{action},{address:#x},{size},{stream}\n")


def describe(report):
    text = (f"device {report['device']}: {report['allocations']} allocations, {report['frees']} frees"
            f" ({report['left_out']} entries of PyTorch's own allocator left out")
    if report["ooms"]:
        text += f", {report['ooms']} out-of-memory events"
    text += ")"
    if report["frees_delayed"]:
        text += (f"; {report['frees_delayed']} frees took effect after other streams' work (record_stream) and are "
                 f"replayed there")
    if report["pending_at_end"]:
        text += f"; {report['pending_at_end']} frees still waiting on other streams at the end, replayed as live"
    if report["freed_unseen"] or report["alive_throughout"]:
        text += (f"; {report['freed_unseen']} blocks freed with no allocation seen and {report['alive_throughout']} alive "
                 f"throughout are older than the history (recording began later, or max_entries dropped the oldest "
                 f"entries): allocated at the start")
    return text


def _replay_program(given):
    program = given or os.environ.get("POOLKIT_REPLAY") or shutil.which("poolkit-replay")
    if not program:
        raise PoolkitError("poolkit-replay not found: build it (cmake --build build --target poolkit-replay), "
                           "then give --replay PATH, set POOLKIT_REPLAY or put it on PATH")
    return program


def _composition(passed):
    """The one composition named in poolkit-replay's arguments (--composition=NAME or
    --composition NAME), or None."""
    for i, argument in enumerate(passed):
        if argument.startswith("--composition="):
            return argument.split("=", 1)[1]
        if argument == "--composition" and i + 1 < len(passed):
            return passed[i + 1]
    return None


def write_layout(layout_json, path, device, composition):
    """poolkit-replay --snapshot's segments (JSON) as the pickle of torch.cuda.memory._snapshot()
    that PyTorch's viewer reads: the blocks at poolkit's addresses, with no frames (the replay's
    addresses are not the program's) and no device_traces."""
    import json
    with open(layout_json) as f:
        segments = json.load(f)["segments"]
    expandable = (composition or "").startswith("expandable")
    layout = {
        "segments": [_segment(device, s, expandable, {}) for s in segments],
        "device_traces": [[] for _ in range(device + 1)],
        "allocator_settings": {"poolkit_composition": composition},
        "external_annotations": [],
    }
    # Beside `path`, then renamed over it: a failed write leaves what was there.
    folder = os.path.dirname(os.path.abspath(path))
    with tempfile.NamedTemporaryFile("wb", dir=folder, prefix=os.path.basename(path) + ".partial-", delete=False) as f:
        partial = f.name
        try:
            pickle.dump(layout, f)
        except BaseException:
            f.close()
            os.remove(partial)
            raise
    os.replace(partial, path)


def check_layout_path(path, snapshot_path):
    """Refuses, before anything runs, a --snapshot path that is the input snapshot or lies in a
    missing folder."""
    if os.path.abspath(path) == os.path.abspath(snapshot_path) or (
            os.path.exists(path) and os.path.exists(snapshot_path) and os.path.samefile(path, snapshot_path)):
        raise PoolkitError(f"--snapshot {path} is the input snapshot; refusing to write over it")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise PoolkitError(f"--snapshot {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise PoolkitError(f"--snapshot {path} is a directory")


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m poolkit.replay",
                                     description="Replays a PyTorch memory snapshot's allocation history under poolkit's "
                                                 "compositions (poolkit-replay); arguments after -- go to poolkit-replay.")
    parser.add_argument("snapshot", help="a pickle from torch.cuda.memory._dump_snapshot(), with history recorded (or it gzipped)")
    parser.add_argument("--device", type=int, help="the device whose history to replay (needed where several have one)")
    parser.add_argument("--convert", metavar="OUT.csv[.gz]", help="only write the trace there")
    parser.add_argument("--replay", metavar="PATH", help="the poolkit-replay program")
    parser.add_argument("--snapshot", metavar="OUT.pickle", dest="layout",
                        help="also write the layout of the composition named after -- (--composition=NAME, one) when the "
                             "program's live bytes first peak, as the pickle PyTorch's viewer reads")
    argv = list(sys.argv[1:] if argv is None else argv)
    passed = argv[argv.index("--") + 1:] if "--" in argv else []
    options = parser.parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    try:
        if options.layout:
            check_layout_path(options.layout, options.snapshot)
        rows, report = convert(load_snapshot(options.snapshot), options.device)
        print(f"{options.snapshot}: {describe(report)}", file=sys.stderr)
        if options.convert:
            write_trace(rows, options.convert)
            return 0
        program = _replay_program(options.replay)
        with tempfile.TemporaryDirectory() as folder:
            name = os.path.splitext(os.path.basename(options.snapshot))[0] or "snapshot"
            trace = os.path.join(folder, name + ".csv")
            write_trace(rows, trace)
            if not options.layout:
                return subprocess.call([program, trace, *passed])
            layout = os.path.join(folder, "layout.json")
            status = subprocess.call([program, trace, *passed, "--snapshot", layout])
            if status == 0:
                write_layout(layout, options.layout, report["device"], _composition(passed))
            return status
    except PoolkitError as error:
        print(f"poolkit.replay: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
