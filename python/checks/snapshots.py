"""PyTorch memory snapshots of real programs, recorded under PyTorch's own allocator as a user would
record them, then replayed by `python -m poolkit.replay`, and poolkit's layout of one of them read
by PyTorch's viewer:

- resnet18_stacks: two ResNet-18 training steps, history with Python and C++ stacks;
- resnet18_no_stacks: the same with no stacks (context=None);
- record_stream: tensors made on the default stream, used on a side stream (record_stream) and
  freed while its work still runs, with a side stream's own allocations: frees that complete late;
- ring_overflow: a ResNet-18 step with max_entries=400, so that the history's start is dropped;
- transformer_varlen: a GPT-2 (transformers, built from a config) trained on batches of three
  lengths, where transformers is installed.

Each snapshot is replayed under caching and expandable. A complete history (every one but
ring_overflow) must give, in PyTorch's block sizes, a peak of live bytes equal to PyTorch's peak of
active bytes over the recorded steps (the blocks alive when recording began come from the
snapshot's segments); the
record_stream one must report frees that took effect late; ring_overflow must report its blocks
older than the history. poolkit's layout at ResNet-18's peak (--snapshot) must render: `python -m
torch.cuda._memory_viz segment_plot` writes the page, `stats` sums it, and its allocated blocks
must hold the replay's peak of live bytes. Where RAPIDS' rmm is installed, a log of its own logging_resource_adaptor is
replayed too.

    PYTHONPATH=python/src:python/checks POOLKIT_REPLAY=build/tools/poolkit-replay python3 python/checks/snapshots.py OUT

Writes each NAME.pickle, NAME.json (what was measured) and the replay's output into OUT; prints
one line per check and a verdict; exits 1 if a check fails.
"""
import json
import os
import pickle
import subprocess
import sys

import allocators
import poolkit.replay

failures = []


def check(ok, text):
    print(("ok    " if ok else "FAIL  ") + text, flush=True)
    if not ok:
        failures.append(text)


def record(torch, name, folder, work, **history):
    """Runs work() with history recorded from a reset peak; writes NAME.pickle and NAME.json."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.memory._record_memory_history(enabled="all", **history)
    work()
    torch.cuda.synchronize()
    path = os.path.join(folder, name + ".pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    stats = torch.cuda.memory_stats()
    measured = {"max_memory_allocated": torch.cuda.max_memory_allocated(), "active_peak": stats["active_bytes.all.peak"],
                "history": {k: str(v) for k, v in history.items()},
                "torch": torch.__version__, "bytes": os.path.getsize(path)}
    with open(os.path.join(folder, name + ".json"), "w") as f:
        json.dump(measured, f, indent=1)
    return path, measured


def resnet18():
    step = allocators.resnet18_step(32, num_classes=1000, seed=0, lr=0.01)
    step()  # warm-up: the optimizer's state exists before recording
    return step


def record_stream_work(torch):
    side = torch.cuda.Stream()
    generator = torch.Generator(device="cuda").manual_seed(0)

    def work():
        for i in range(6):
            x = torch.randn(4096, 4096, device="cuda", generator=generator)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                y = x
                for _ in range(8):  # long enough that x is freed while this still runs
                    y = y @ x
                z = y.sum()  # a side-stream allocation of its own
            x.record_stream(side)
            del x, y
            scratch = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")  # allocations while the frees wait
            del scratch
            torch.cuda.current_stream().wait_stream(side)
            del z
            if i == 2:
                # PyTorch completes such frees when it next polls their events (a cache miss, or
                # here empty_cache, which also waits for them).
                torch.cuda.empty_cache()
        torch.cuda.empty_cache()

    return work


def transformer_work(torch):
    import transformers
    config = transformers.GPT2Config(n_layer=4, n_embd=512, n_head=8, vocab_size=8192, n_positions=512)
    model = transformers.GPT2LMHeadModel(config).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device="cuda").manual_seed(0)

    def step(length):
        tokens = torch.randint(0, 8192, (8, length), device="cuda", generator=generator)
        optimizer.zero_grad(set_to_none=True)
        model(tokens, labels=tokens).loss.backward()
        optimizer.step()

    step(128)
    return lambda: [step(length) for length in (384, 128, 256)]


def replay(folder, name, *passed):
    """python -m poolkit.replay on NAME.pickle; its exit status, stderr report and JSON rows."""
    path = os.path.join(folder, name + ".pickle")
    done = subprocess.run([sys.executable, "-m", "poolkit.replay", path, *passed], capture_output=True, text=True)
    with open(os.path.join(folder, name + "-replay.txt"), "w") as f:
        f.write(done.stdout + done.stderr)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, done.stderr, rows


def rmm_log(folder):
    """A log of RAPIDS rmm's own logging_resource_adaptor, where rmm is installed; else None."""
    try:
        import rmm
    except ImportError:
        return None
    path = os.path.join(folder, "rmm_log.csv")
    upstream = rmm.mr.CudaMemoryResource()
    logged = rmm.mr.LoggingResourceAdaptor(upstream, log_file_name=path)
    buffers = [rmm.DeviceBuffer(size=(i % 7 + 1) << 20, mr=logged) for i in range(40)]
    del buffers[::2]
    buffers.clear()
    logged.flush()
    del logged
    return path


def main(folder):
    os.makedirs(folder, exist_ok=True)
    import torch
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}", flush=True)
    step = resnet18()
    made = {}
    made["resnet18_stacks"] = record(torch, "resnet18_stacks", folder, lambda: [step() for _ in range(2)], context="all",
                                     stacks="all", max_entries=1_000_000)
    made["resnet18_no_stacks"] = record(torch, "resnet18_no_stacks", folder, lambda: [step() for _ in range(2)], context=None,
                                        max_entries=1_000_000)
    made["ring_overflow"] = record(torch, "ring_overflow", folder, step, context=None, max_entries=400)
    made["record_stream"] = record(torch, "record_stream", folder, record_stream_work(torch), context=None, max_entries=1_000_000)
    try:
        made["transformer_varlen"] = record(torch, "transformer_varlen", folder, transformer_work(torch), context=None,
                                            max_entries=1_000_000)
    except ImportError:
        print("skip  transformer_varlen: transformers is not installed")
    for name, (path, measured) in made.items():
        status, report, rows = replay(folder, name, "--", "--composition=caching,expandable", "--json", "--no-progress")
        peaks = {row["composition"]: row["peak_live_bytes"] for row in rows}
        check(status == 0 and len(rows) == 2, f"{name}: replayed ({measured['bytes']} bytes of snapshot, exit {status}, {len(rows)} rows)"
              + f": {report.strip().splitlines()[-1] if report.strip() else ''}")
        with open(path, "rb") as f:
            history, _ = poolkit.replay.convert(pickle.load(f))
        if name == "ring_overflow":
            check("older than the history" in report, f"{name}: the blocks older than the history are reported")
            check(all(0 < p <= measured["max_memory_allocated"] for p in peaks.values()),
                  f"{name}: peak live {sorted(set(peaks.values()))} at most PyTorch's {measured['max_memory_allocated']}")
        else:
            # poolkit-replay's live bytes are the sizes asked for; PyTorch's, its blocks' sizes.
            # PyTorch leaves a block unsplit where the rest would be small: its active bytes may
            # be a little above the sizes rounded (within 1% here).
            rounded = poolkit.replay.peak_live_bytes(history, pytorch_blocks=True)
            check(rounded <= measured["active_peak"] <= rounded * 1.01 and all(p <= measured["active_peak"] for p in peaks.values()),
                  f"{name}: peak live in PyTorch's rounding {rounded} vs PyTorch's peak of active bytes "
                  f"{measured['active_peak']} (asked for: {sorted(set(peaks.values()))})")
        if name == "record_stream":
            check("took effect after other streams' work" in report, f"{name}: the frees that waited for the side stream are reported")
        for row in rows:
            print(f"      {row['composition']:12} ratio {row['ratio']:.3f}  peak reserved {row['peak_reserved_bytes'] >> 20} MiB", flush=True)
    # poolkit's layout at ResNet-18's peak, in PyTorch's viewer.
    layout = os.path.join(folder, "poolkit_layout.pickle")
    status, report, rows = replay(folder, "resnet18_stacks", "--snapshot", layout, "--", "--composition=expandable", "--json",
                                  "--no-progress")
    check(status == 0 and os.path.exists(layout), f"resnet18_stacks: layout under expandable written (exit {status})")
    if status == 0:
        page = os.path.join(folder, "poolkit_layout.html")
        drawn = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "segment_plot", layout, "-o", page],
                               capture_output=True, text=True)
        check(drawn.returncode == 0 and os.path.getsize(page) > 1000, f"segment_plot of the layout (exit {drawn.returncode})")
        stats = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "stats", layout], capture_output=True, text=True)
        with open(os.path.join(folder, "poolkit_layout-stats.txt"), "w") as f:
            f.write(stats.stdout + stats.stderr)
        summary = [line for line in stats.stdout.splitlines() if line.startswith(("total_reserved", "total_allocated"))]
        check(stats.returncode == 0 and len(summary) == 2, f"stats of the layout (exit {stats.returncode}): {'; '.join(summary)}")
        with open(layout, "rb") as f:
            segments = pickle.load(f)["segments"]
        allocated = sum(b["requested_size"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated")
        peak = rows[0]["peak_live_bytes"] if rows else None
        check(allocated == peak, f"the layout's allocated blocks were asked for {allocated} bytes = the replay's peak live {peak}")
        check(all(s["total_size"] == sum(b["size"] for b in s["blocks"]) for s in segments),
              f"the layout's {len(segments)} segments are tiled by their blocks")
    log = rmm_log(folder)
    if log is None:
        print("skip  rmm: RAPIDS rmm is not installed")
    else:
        replay_program = os.environ.get("POOLKIT_REPLAY", "poolkit-replay")
        done = subprocess.run([replay_program, log, "--composition=caching", "--json", "--no-progress"], capture_output=True, text=True)
        check(done.returncode == 0, f"rmm: logging_resource_adaptor's log replayed (exit {done.returncode}) {done.stderr.strip()[-200:]}")
    print("verdict: " + ("all checks passed" if not failures else f"{len(failures)} checks FAILED"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "snapshots"))
