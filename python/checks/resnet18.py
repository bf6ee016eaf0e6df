"""Trains ResNet-18 for a few steps on random data under the five allocators of allocators.py,
each in its own process: PyTorch's default, PyTorch with expandable_segments, and
poolkit.torch.use() with "caching", "expandable" and "expandable" following live memory exactly.
Deterministic kernels and fixed seeds, so every run's losses must equal those of PyTorch's default
allocator.

    PYTHONPATH=python/src POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so python3 python/checks/resnet18.py OUT_DIR

Prints the losses side by side, peak allocated / reserved and time per step of each run, checks
poolkit's memory_stats() against its snapshot (segments add up to the reserved bytes, live blocks
to the allocated ones ...), writes each poolkit run's memory_summary() and snapshot
(OUT_DIR/resnet18-<run>.pickle, for python -m torch.cuda._memory_viz), and checks that
poolkit.torch.use() after PyTorch's first CUDA allocation raises PoolkitError. Exits 1 if any
check fails.
"""
import json
import os
import sys

import allocators

STEPS = 10
BATCH = 64


def train(name, out_dir):
    allocators.install(name)
    import torch
    import torchvision

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet18(num_classes=10).cuda()
    losses, ms_per_step = allocators.train_steps(model, STEPS, BATCH, seed=1)
    result = {"losses": losses, "ms_per_step": ms_per_step, "figures": allocators.figures(name)}
    if allocators.ALLOCATORS[name][1] is not None:
        import poolkit.torch
        result["summary"] = poolkit.torch.memory_summary()
        poolkit.torch.dump_snapshot(os.path.join(out_dir, f"resnet18-{allocators.snapshot_name(name)}.pickle"))
    print(json.dumps(result))


def too_late():
    """poolkit.torch.use() after PyTorch allocated: a PoolkitError that says what to do."""
    import torch
    import poolkit.torch
    torch.zeros(1, device="cuda")
    try:
        poolkit.torch.use("caching")
    except poolkit.PoolkitError as error:
        print(json.dumps({"raised": str(error)}))
        return
    print(json.dumps({"raised": None}))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        if sys.argv[2] == "too-late":
            too_late()
        else:
            train(sys.argv[2], sys.argv[3])
        return 0
    out_dir = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else ".")
    os.makedirs(out_dir, exist_ok=True)
    runs = {name: allocators.run_child(__file__, name, [out_dir]) for name in allocators.ALLOCATORS}

    print("step" + "".join(f"  {name:>28}" for name in runs))
    for step, losses in enumerate(zip(*(run["losses"] for run in runs.values()))):
        print(f"{step:4d}" + "".join(f"  {loss:28.9f}" for loss in losses))
    print()
    print(allocators.table(runs))
    for name, run in runs.items():
        if "summary" in run:
            print(f"\n{name}:\n{run['summary']}")

    failures = allocators.inconsistencies(runs)
    expected = runs["pytorch"]["losses"]
    failures += [f"{name}: losses differ from pytorch's" for name, run in runs.items() if run["losses"] != expected]
    late = _too_late_run()
    print(f"\npoolkit.torch.use() after PyTorch's first allocation: {late['raised']!r}")
    if not late["raised"] or "before PyTorch's first CUDA allocation" not in late["raised"]:
        failures.append("use() after the first allocation did not raise the PoolkitError that says so")
    print("\n" + ("every check passed: losses identical in every run, poolkit's stats agree with its snapshots"
                  if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return 0 if not failures else 1


def _too_late_run():
    import subprocess
    child = subprocess.run([sys.executable, __file__, "--child", "too-late"], capture_output=True, text=True)
    if child.returncode != 0:
        sys.stderr.write(child.stderr[-4000:])
        return {"raised": None}
    return json.loads(child.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    sys.exit(main())
