"""Trains ResNet-18 for a few steps on random data with four CUDA allocators and checks that each
run's losses equal those of PyTorch's default allocator (deterministic kernels, fixed seed):
PyTorch's default, PyTorch with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, and the poolkit
plugin with its caching and its expandable preset (POOLKIT_ALLOCATOR=caching|expandable).

    python3 examples/python/pytorch_plugin.py build/plugins/libpoolkit_plugin.so

Each allocator runs in its own process: PyTorch's allocator can only be replaced before CUDA starts.
Prints the losses side by side, each run's peak allocated and peak reserved bytes (PyTorch's from
torch.cuda.memory_stats(), poolkit's from the plugin's stats), poolkit's memory summaries, and
whether poolkit expandable's peak reserved is below expandable_segments' (information only);
exits 1 unless every run's losses equal PyTorch's default run's.
"""
import ctypes
import json
import os
import subprocess
import sys

STEPS = 8

# name, environment of the child, whether it loads the plugin
RUNS = (
    ("pytorch", {}, False),
    ("pytorch expandable_segments", {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}, False),
    ("poolkit caching", {"POOLKIT_ALLOCATOR": "caching"}, True),
    ("poolkit expandable", {"POOLKIT_ALLOCATOR": "expandable"}, True),
)


def plugin_text(function):
    function.restype = ctypes.c_long
    size = function(0, None, 0)
    buffer = ctypes.create_string_buffer(size + 1)
    function(0, buffer, size + 1)
    return buffer.value.decode()


def train(plugin):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import torchvision

    library = None
    if plugin:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(plugin, "poolkit_alloc", "poolkit_free")
        torch.cuda.memory.change_current_allocator(allocator)
        library = ctypes.CDLL(plugin)  # the same loaded library, so the same pools
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    model = torchvision.models.resnet18(num_classes=10).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for _ in range(STEPS):
        images = torch.randn(64, 3, 224, 224, device="cuda", generator=generator)
        labels = torch.randint(0, 10, (64,), device="cuda", generator=generator)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    result = {"losses": losses}
    if library is not None:
        library.poolkit_allocator_name.restype = ctypes.c_char_p
        result["allocator"] = library.poolkit_allocator_name().decode()
        result["summary"] = plugin_text(library.poolkit_memory_summary)
        stats = json.loads(plugin_text(library.poolkit_memory_stats_json))
    else:
        stats = torch.cuda.memory_stats()
    result["stats"] = {k: stats[k] for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak")}
    print(json.dumps(result))


def run_child(plugin, environment):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTORCH_CUDA_ALLOC_CONF", "POOLKIT_ALLOCATOR")}
    env.update(environment)
    child = subprocess.run([sys.executable, __file__, "--child", plugin], env=env, capture_output=True, text=True)
    if child.returncode != 0:
        sys.stderr.write(child.stderr)
        raise SystemExit(f"child run failed (exit {child.returncode}) with {environment or 'the default environment'}")
    return json.loads(child.stdout.strip().splitlines()[-1])


def mib(count):
    return f"{count / 2**20:.1f} MiB"


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        train(sys.argv[2] if sys.argv[2] != "-" else None)
        return 0
    plugin = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/plugins/libpoolkit_plugin.so")
    runs = {name: run_child(plugin if uses_plugin else "-", environment) for name, environment, uses_plugin in RUNS}

    print("step" + "".join(f"  {name:>28}" for name in runs))
    for step, losses in enumerate(zip(*(run["losses"] for run in runs.values()))):
        print(f"{step:4d}" + "".join(f"  {loss:28.9f}" for loss in losses))
    print()
    print(f"{'run':28}  {'peak allocated':>14}  {'peak reserved':>14}")
    for name, run in runs.items():
        stats = run["stats"]
        print(f"{name:28}  {mib(stats['allocated_bytes.all.peak']):>14}  {mib(stats['reserved_bytes.all.peak']):>14}")
    for name, run in runs.items():
        if "summary" in run:
            print(f"\n{name} (the plugin reports allocator {run['allocator']!r}):\n{run['summary']}")

    ours = runs["poolkit expandable"]["stats"]["reserved_bytes.all.peak"]
    theirs = runs["pytorch expandable_segments"]["stats"]["reserved_bytes.all.peak"]
    print(f"poolkit expandable peak reserved {mib(ours)} is {'below' if ours < theirs else 'NOT below'} "
          f"PyTorch expandable_segments' {mib(theirs)}")

    expected = runs["pytorch"]["losses"]
    differing = [name for name, run in runs.items() if run["losses"] != expected]
    print("losses identical in every run" if not differing else "LOSSES DIFFER from pytorch's: " + ", ".join(differing))
    return 0 if not differing else 1


if __name__ == "__main__":
    sys.exit(main())
