"""What the PyTorch checks share: the allocators they compare, each run in a process of its own
(PyTorch's allocator can only be replaced before its first CUDA allocation), and the checks of
poolkit's figures against its own snapshot.

A check script calls compare(__file__, args) in its main process; each child runs
`script --child NAME ...`, calls install(NAME) first thing, does its work and prints one JSON
line of results.
"""
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

# name: (environment, poolkit preset or None, options)
ALLOCATORS = {
    "pytorch": ({}, None, {}),
    "pytorch expandable_segments": ({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, None, {}),
    "poolkit caching": ({}, "caching", {}),
    "poolkit expandable": ({}, "expandable", {}),
    # Mapped memory following live memory whatever it costs in driver calls (the C++
    # expandable_options::exact_follow()): the least footprint where shapes repeat.
    "poolkit expandable/exact": ({}, "expandable", {"peak_slack": 0, "max_peak_slack": 0, "mapping_bytes": 0}),
    # Mapped memory following live memory, up to a fifth more kept where that remaps often (the
    # replay's expandable/follow).
    "poolkit expandable/follow": ({}, "expandable", {"peak_slack": 0}),
    # Without stitching: a large request that no free block holds maps new memory (the replay's
    # expandable/unstitched).
    "poolkit expandable/unstitched": ({}, "expandable", {"stitch": False}),
    # alloc and free alone, as PyTorch's Python CUDAPluggableAllocator wires them (no hooks extension)
    "poolkit caching without hooks": ({"POOLKIT_TORCH_HOOKS": "0"}, "caching", {}),
}

# Controls, named only on purpose (programs.py --allocators): an allocator above with one thing
# changed, to tell where in the process a difference comes from. name: (environment, poolkit preset
# or None, options, module imported first or None)
CONTROLS = {
    # PyTorch's own allocator where the module use() once imported to turn cudagraph trees off for
    # torch.compile(mode="reduce-overhead") is imported (use() now sets that once something else
    # imports it: poolkit/_imports.py)
    "pytorch with torch._inductor.config imported": ({}, None, {}, "torch._inductor.config"),
    # The default asking the driver whether a stream is in capture at every call, as without the
    # hooks, instead of only while PyTorch has a capture open
    "poolkit expandable asking about captures at every call": ({"POOLKIT_CAPTURE_CHECKS": "every_call"}, "expandable", {}, None),
    # The default from another build of the plugin, the file POOLKIT_BASELINE_PLUGIN names: two
    # builds side by side in one lockstep run (the hooks are this tree's for both)
    "poolkit expandable from the baseline plugin": ({"POOLKIT_PLUGIN": "$POOLKIT_BASELINE_PLUGIN"}, "expandable", {}, None),
}


def chosen(text):
    """The names in `text`, comma-separated (allocators or controls; no name holds a comma), and
    the unknown ones among them: (names, unknown). None or empty: every allocator but the run
    without hooks."""
    if not text:
        return [n for n in ALLOCATORS if "without hooks" not in n], []
    names = [n.strip() for n in text.split(",")]
    return names, [n for n in names if n not in ALLOCATORS and n not in CONTROLS]


def spec(name):
    """(environment, poolkit preset or None, options) of an allocator or a control. An environment
    value "$NAME" is the variable NAME of this process; SystemExit where it is unset or empty."""
    environment, preset, options = ALLOCATORS[name] if name in ALLOCATORS else CONTROLS[name][:3]
    resolved = {}
    for key, value in environment.items():
        if value.startswith("$"):
            value = os.environ.get(value[1:], "")
            if not value:
                raise SystemExit(f"{name!r} needs {environment[key][1:]} set")
        resolved[key] = value
    return resolved, preset, options


def install(name):
    """In a child, before anything touches CUDA: makes the named allocator PyTorch's."""
    _, preset, options = spec(name)
    if name in CONTROLS and CONTROLS[name][3] is not None:
        importlib.import_module(CONTROLS[name][3])
    if preset is not None:
        import poolkit.torch
        poolkit.torch.use(preset, **options)


def snapshot_name(name):
    """A file name for the snapshot of a poolkit run: "caching", "expandable-exact"."""
    return name.removeprefix("poolkit ").replace("/", "-")


def resnet18_step(batch, num_classes=10, seed=1, lr=0.1):
    """A torchvision ResNet-18 made on the GPU, and a function that runs one SGD training step of
    it on `batch` random 224x224 images from a generator seeded with `seed`."""
    import torch
    import torchvision
    model = torchvision.models.resnet18(num_classes=num_classes).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    generator = torch.Generator(device="cuda").manual_seed(seed)

    def step():
        images = torch.randn(batch, 3, 224, 224, device="cuda", generator=generator)
        labels = torch.randint(0, num_classes, (batch,), device="cuda", generator=generator)
        optimizer.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(model(images), labels).backward()
        optimizer.step()

    return step


def train_steps(model, steps, batch, seed):
    """ResNet-18-style training steps on random 224x224 images from a seeded generator: the losses
    and the median milliseconds per step after the first two (of every step when there are two or fewer)."""
    import torch
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator(device="cuda").manual_seed(seed)
    losses, times = [], []
    for _ in range(steps):
        torch.cuda.synchronize()
        start = time.perf_counter()
        images = torch.randn(batch, 3, 224, 224, device="cuda", generator=generator)
        labels = torch.randint(0, 10, (batch,), device="cuda", generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        times.append(time.perf_counter() - start)
    return losses, 1e3 * statistics.median(times[2:] or times)


def figures(name):
    """Peak allocated and reserved bytes of the allocator in use, its device allocations and the
    allocations it served (allocation.all.allocated), from PyTorch's statistics or poolkit's, and
    for poolkit the checks of its statistics against its snapshot."""
    import torch
    if spec(name)[1] is None:
        stats = torch.cuda.memory_stats()
        return {"peak_allocated": stats["allocated_bytes.all.peak"], "peak_reserved": stats["reserved_bytes.all.peak"],
                "device_allocations": stats.get("num_device_alloc", 0), "allocations": stats.get("allocation.all.allocated", 0)}
    import poolkit.torch
    torch.cuda.synchronize()
    stats = poolkit.torch.memory_stats()
    return {"peak_allocated": stats["allocated_bytes.all.peak"], "peak_reserved": stats["reserved_bytes.all.peak"],
            "device_allocations": stats.get("num_device_alloc", 0), "allocations": stats.get("allocation.all.allocated", 0),
            "consistency": consistency(stats, poolkit.torch.snapshot())}


def device_allocations(name):
    """The allocator's device allocations so far (num_device_alloc: cudaMalloc calls, or map calls
    of virtual memory, aliases among them)."""
    import torch
    if spec(name)[1] is None:
        return torch.cuda.memory_stats().get("num_device_alloc", 0)
    import poolkit.torch
    return poolkit.torch.memory_stats().get("num_device_alloc", 0)


def consistency(stats, snapshot):
    """Statements about poolkit's stats and snapshot that must all hold; returns those that do not."""
    segments = snapshot["segments"]
    live = [b for s in segments for b in s["blocks"] if b["state"] == "active_allocated"]
    checks = {
        "segments add up to reserved_bytes.all.current": sum(s["total_size"] for s in segments) == stats["reserved_bytes.all.current"],
        # A block may keep a remainder too small to split off; allocated_bytes counts each request
        # rounded up to 512 bytes (as PyTorch does), which a block on a finer grain may not reach:
        # the blocks hold at least the requests, and not much more than allocated_bytes.
        "live blocks hold requested_bytes.all.current, at most 1% more than allocated_bytes.all.current":
            stats["requested_bytes.all.current"] <= sum(b["size"] for b in live) <= 1.01 * stats["allocated_bytes.all.current"] + (1 << 20),
        "live blocks are allocation.all.current": len(live) == stats["allocation.all.current"],
        "requested sizes add up to requested_bytes.all.current":
            sum(b["requested_size"] for b in live) == stats["requested_bytes.all.current"],
        "blocks tile their segments": all(sum(b["size"] for b in s["blocks"]) == s["total_size"] for s in segments),
        "peaks are at least the current figures": all(
            stats[f"{m}.all.peak"] >= stats[f"{m}.all.current"] for m in ("allocated_bytes", "reserved_bytes")),
    }
    return [statement for statement, holds in checks.items() if not holds]


def cpu_set(text):
    """The CPUs of a list such as "2-5,8" (as taskset -c reads it), each one this process may run
    on; raises ValueError naming what is wrong."""
    cpus = set()
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        last = last if dash else first
        if not first.isdigit() or not last.isdigit() or int(last) < int(first):
            raise ValueError(f"not a CPU list: {text!r} (such as 2-5,8)")
        cpus.update(range(int(first), int(last) + 1))
    outside = sorted(cpus - os.sched_getaffinity(0))
    if outside:
        raise ValueError(f"this process may not run on CPU {', '.join(map(str, outside))} (it may on "
                         f"{len(os.sched_getaffinity(0))} CPUs)")
    return cpus


def start_child(script, name, arguments, cpus=None):
    """Starts `script --child NAME ...` with NAME's environment; its stdin and stdout are pipes
    (text, line-buffered on our side), its stderr a temporary file that finish_child shows on failure.
    With `cpus` (a set) the child runs only on those CPUs, from its first instruction."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF",)}
    env.update(spec(name)[0])
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    errors = tempfile.TemporaryFile(mode="w+")
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    child = subprocess.Popen([sys.executable, script, "--child", name, *arguments], env=env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=errors, text=True, bufsize=1, preexec_fn=pin)
    child.errors = errors
    return child


def finish_child(child, name):
    """Waits for a child of start_child; returns the JSON of its last line of output."""
    child.stdin.close()
    output = child.stdout.read()  # what a reader of its lines has not taken yet
    child.stdout.close()
    child.wait()
    child.errors.seek(0)
    errors = child.errors.read()
    child.errors.close()
    if child.returncode != 0:
        sys.stderr.write(output[-4000:] + errors[-8000:])
        raise SystemExit(f"{name}: the child run failed (exit {child.returncode})")
    return json.loads(output.strip().splitlines()[-1])


def stop_child(child):
    """Ends a child of start_child where a round stopped early: killed if still running, its pipes
    and error file closed. Does nothing more to one that finish_child ended."""
    if child.poll() is None:
        child.kill()
    child.wait()
    for stream in (child.stdin, child.stdout, child.errors):
        try:
            stream.close()
        except OSError:  # stdin: a line the killed child never read
            pass


def rotated(names, round_index):
    """The allocators in the order of one round: each round starts one further along."""
    shift = round_index % len(names)
    return names[shift:] + names[:shift]


# Lockstep: every allocator's child alive at once, their steps interleaved one by one, each alone
# on the GPU while the others wait (lockstep_round), so that a drift of the host or the GPU over a
# round reaches every allocator alike and a step's pair lies a step apart. A child says
# "lockstep ready" once built (lockstep_ready), then runs a step each time the parent writes "go"
# (lockstep_go) and says "lockstep step FIGURE" after it (lockstep_step).

def _say(line):
    print(line, flush=True)


def lockstep_ready():
    _say("lockstep ready")


def lockstep_go():
    if sys.stdin.readline().strip() != "go":
        raise SystemExit("lockstep: the parent stopped before the last step")


def lockstep_step(figure):
    _say(f"lockstep step {figure:.3f}")


def _expect(child, name, word):
    """Waits for a lockstep child's next "lockstep WORD ..." line; other output (a library's
    chatter on stdout) passes by."""
    while line := child.stdout.readline():
        if line.startswith(f"lockstep {word}"):
            return
    finish_child(child, name)  # raises with its output where it failed
    raise SystemExit(f"{name}: lockstep: the child ended before saying {word!r}")


def lockstep_round(script, names, arguments, steps, round_index=0, cpus=None):
    """One round of `script --child NAME *arguments` for every name at once, `steps` steps each:
    step i of each in turn (rotated(names, round_index + i)). Returns {allocator: the child's
    output}, as run_child's. With `cpus` every child runs on those CPUs alone: one steps at a time,
    so they share them without contending, and each step runs on the same cores whoever takes it."""
    children = {name: start_child(script, name, arguments, cpus) for name in names}
    try:
        for name, child in children.items():
            _expect(child, name, "ready")
        for i in range(steps):
            for name in rotated(names, round_index + i):
                children[name].stdin.write("go\n")
                children[name].stdin.flush()
                _expect(children[name], name, "step")
        return {name: finish_child(children[name], name) for name in names}
    finally:
        for child in children.values():
            stop_child(child)


def run_child(script, name, arguments):
    """Runs `script --child NAME ...` to its end; returns the JSON of its last line of output."""
    return finish_child(start_child(script, name, arguments), name)


def mib(count):
    return f"{count / 2**20:,.1f} MiB"


def table(runs):
    """Peak allocated, peak reserved, their ratio, the step time and the device allocations (cudaMalloc
    calls, or map calls of virtual memory: num_device_alloc) of each run; where a run counted them
    per step (step_allocs), also those of its second half: an allocator that has settled makes none."""
    lines = [f"{'allocator':30} {'peak allocated':>15} {'peak reserved':>15} {'ratio':>7} {'ms/step':>9} {'device allocs':>13}"
             f" {'in 2nd half':>11}"]
    for name, run in runs.items():
        f = run["figures"]
        counts = run.get("step_allocs", [])
        late = f"{counts[-1] - counts[len(counts) // 2 - 1]:11,}" if len(counts) >= 2 else f"{'':11}"
        lines.append(f"{name:30} {mib(f['peak_allocated']):>15} {mib(f['peak_reserved']):>15} "
                     f"{f['peak_reserved'] / max(f['peak_allocated'], 1):7.3f} {run['ms_per_step']:9.2f} "
                     f"{f.get('device_allocations', 0):13,} {late}")
    return "\n".join(lines)


def inconsistencies(runs):
    """Each poolkit run's failed consistency statements, as lines."""
    return [f"{name}: {statement}" for name, run in runs.items() for statement in run["figures"].get("consistency", [])]
