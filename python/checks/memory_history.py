"""torch.cuda.memory._record_memory_history() under poolkit against PyTorch's allocator, each in a
process of its own:

- Two MLP training steps are recorded (context "all", stacks "all") after three warm-up steps and
  dumped with torch.cuda.memory._dump_snapshot(). The history must hold as many alloc and
  free_completed events as PyTorch's for the same program, every alloc must carry frames, some of
  them Python frames of this file and some C++ frames, none of the plugin's or the library's (the
  stack starts where PyTorch calls the allocator), and live blocks must carry their frames.
- PyTorch's viewer reads each dump: `python -m torch.cuda._memory_viz trace_plot` writes the HTML
  page of the timeline (the pickled snapshot is read back out of it and must hold the same
  events), and `python -m torch.cuda._memory_viz trace` prints one line per event.
- max_entries bounds the history: a step recorded with max_entries=50 keeps exactly 50 events.
- The cost: milliseconds per training step with history off, with Python stacks, and with
  Python and C++ stacks (medians of 20 steps).

    PYTHONPATH=python/src:python/checks POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so python3 python/checks/memory_history.py [OUT]

Prints one line per run, a table of the costs and a verdict; exits 1 if a check fails.
"""
import base64
import collections
import json
import os
import pickle
import re
import statistics
import subprocess
import sys
import tempfile
import time

import allocators

RUNS = ("pytorch", "poolkit caching", "poolkit expandable")
COST_STEPS = 20


def mlp_step(torch, model, optimizer, generator):
    inputs = torch.randn(256, 1024, device="cuda", generator=generator)
    optimizer.zero_grad(set_to_none=True)
    loss = model(inputs).square().mean()
    loss.backward()
    optimizer.step()
    return loss


def step_ms(torch, step, steps):
    times = []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def is_poolkits(frame):
    """A frame of poolkit's own machinery: the plugin or the library. The hooks extension's
    allocator (PyTorch's caller) may show, as PyTorch's own allocator's frames show in its stacks."""
    return "poolkit::" in frame["name"] or frame["filename"].endswith("poolkit_plugin.cpp") or "/include/poolkit/" in frame["filename"]


def is_cpp(frame):
    return frame["filename"].endswith((".cpp", ".h", ".cc", ".cu", ".hpp")) or "::" in frame["name"]


def child(name, folder):
    allocators.install(name)
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 1024)).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    generator = torch.Generator(device="cuda").manual_seed(0)
    step = lambda: mlp_step(torch, model, optimizer, generator)  # noqa: E731
    for _ in range(3):
        step()
    torch.cuda.synchronize()

    torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="all", max_entries=100_000)
    kept = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # live at the dump: its block carries frames
    for _ in range(2):
        step()
    torch.cuda.synchronize()
    path = os.path.join(folder, f"history-{allocators.snapshot_name(name).replace(' ', '-')}.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        snapshot = pickle.load(f)
    trace = snapshot["device_traces"][torch.cuda.current_device()]
    allocs = [e for e in trace if e["action"] == "alloc"]
    here = os.path.basename(__file__)
    kept_blocks = [b for s in snapshot["segments"] for b in s["blocks"] if b["address"] == kept.data_ptr() and b["state"] == "active_allocated"]
    result = {
        "path": path,
        "actions": dict(sorted(collections.Counter(e["action"] for e in trace).items())),
        "allocs_with_frames": sum(1 for e in allocs if e["frames"]),
        "allocs_with_python_frames_here": sum(1 for e in allocs if any(f["filename"].endswith(here) for f in e["frames"])),
        "allocs_with_cpp_frames": sum(1 for e in allocs if any(is_cpp(f) for f in e["frames"])),
        "allocs_with_poolkits_frames": sum(1 for e in allocs if any(is_poolkits(f) for f in e["frames"])),
        "live_block_has_frames": bool(kept_blocks and any(f["filename"].endswith(here) for f in kept_blocks[0]["frames"])),
    }
    del kept

    torch.cuda.memory._record_memory_history(max_entries=50)
    step()
    torch.cuda.synchronize()
    result["bounded_events"] = len(torch.cuda.memory._snapshot()["device_traces"][torch.cuda.current_device()])
    torch.cuda.memory._record_memory_history(enabled=None)

    costs = {"off": step_ms(torch, step, COST_STEPS)}
    for stacks in ("python", "all"):
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks=stacks, max_entries=100_000)
        costs[stacks] = step_ms(torch, step, COST_STEPS)
        torch.cuda.memory._record_memory_history(enabled=None)
    result["ms_per_step"] = costs
    print(json.dumps(result))


def viewer(path):
    """What PyTorch's viewer makes of a dump: the events in trace_plot's page, and the lines of `trace`."""
    page = path.removesuffix(".pickle") + "-trace.html"
    subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", path, "-o", page], check=True, capture_output=True)
    with open(page) as f:
        html = f.read()
    encoded = re.search(r'"base64": "([^"]+)"', html).group(1)
    embedded = pickle.loads(base64.b64decode(encoded).rstrip(b"\x00"))
    text = subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace", path], check=True, capture_output=True,
                          text=True).stdout
    return {"page_bytes": len(html), "page_events": sum(len(t) for t in embedded["device_traces"]),
            "trace_lines": len(text.splitlines()), "trace_total": "TOTAL MEM" in text}


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3])
        return
    folder = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp()
    os.makedirs(folder, exist_ok=True)
    runs = {name: allocators.run_child(__file__, name, [folder]) for name in RUNS}
    failures = []
    reference = runs["pytorch"]
    for name, run in runs.items():
        run["viewer"] = viewer(run["path"])
        print(f"{name:20} {json.dumps({k: v for k, v in run.items() if k != 'path'})}")
        actions = run["actions"]
        for action in ("alloc", "free_completed"):
            if actions.get(action, 0) != reference["actions"].get(action, 0):
                failures.append(f"{name}: {actions.get(action, 0)} {action} events, PyTorch's allocator {reference['actions'].get(action, 0)}")
        if actions.get("alloc", 0) == 0 or run["allocs_with_frames"] != actions["alloc"]:
            failures.append(f"{name}: {run['allocs_with_frames']} of {actions.get('alloc', 0)} allocs carry frames")
        if run["allocs_with_python_frames_here"] == 0 or run["allocs_with_cpp_frames"] == 0:
            failures.append(f"{name}: no alloc with Python frames of this file, or none with C++ frames")
        if run["allocs_with_poolkits_frames"] != 0:
            failures.append(f"{name}: {run['allocs_with_poolkits_frames']} allocs show poolkit's own frames (its gathering is trimmed)")
        if not run["live_block_has_frames"]:
            failures.append(f"{name}: the live block's frames are missing from the snapshot's segments")
        if run["bounded_events"] != 50:
            failures.append(f"{name}: max_entries=50 kept {run['bounded_events']} events")
        if run["viewer"]["page_events"] != sum(actions.values()) or not run["viewer"]["trace_total"]:
            failures.append(f"{name}: PyTorch's viewer read {run['viewer']} of {sum(actions.values())} events")
    print(f"\n{'allocator':20} {'history off':>12} {'python stacks':>14} {'python+C++':>11}  (ms per MLP training step)")
    for name, run in runs.items():
        costs = run["ms_per_step"]
        print(f"{name:20} {costs['off']:12.3f} {costs['python']:14.3f} {costs['all']:11.3f}")
    print("FAILED: " + "; ".join(failures) if failures else "OK: poolkit's history reads in PyTorch's viewer as PyTorch's does")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
