"""Trains ResNet-18 for a few steps on random data with poolkit as PyTorch's CUDA allocator, and
checks that the losses equal those of PyTorch's own allocator (deterministic kernels, fixed seed).

    python3 examples/python/pytorch_plugin.py build/plugins/libpoolkit_plugin.so

Each allocator runs in its own process: PyTorch's allocator can only be replaced before CUDA starts.
Prints the losses of both runs, poolkit's memory summary and PyTorch's peak figures; exits 1 if the
losses differ.
"""
import ctypes
import json
import os
import subprocess
import sys

STEPS = 8


def train(plugin):
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    import torch
    import torchvision

    library = None
    if plugin:
        allocator = torch.cuda.memory.CUDAPluggableAllocator(plugin, "poolkit_alloc", "poolkit_free")
        torch.cuda.memory.change_current_allocator(allocator)
        library = ctypes.CDLL(plugin)
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
        for name, fn in (("summary", library.poolkit_memory_summary), ("stats", library.poolkit_memory_stats_json)):
            fn.restype = ctypes.c_long
            size = fn(0, None, 0)
            buffer = ctypes.create_string_buffer(size + 1)
            fn(0, buffer, size + 1)
            result[name] = buffer.value.decode()
        result["stats"] = json.loads(result["stats"])
    else:
        stats = torch.cuda.memory_stats()
        result["stats"] = {k: stats[k] for k in ("allocated_bytes.all.peak", "reserved_bytes.all.peak")}
    print(json.dumps(result))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        train(sys.argv[2] if sys.argv[2] != "-" else None)
        return 0
    plugin = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/plugins/libpoolkit_plugin.so"
    runs = {}
    for name, argument in (("pytorch", "-"), ("poolkit", plugin)):
        output = subprocess.run([sys.executable, __file__, "--child", argument], check=True, capture_output=True, text=True)
        runs[name] = json.loads(output.stdout.strip().splitlines()[-1])
    print("step  pytorch allocator   poolkit allocator")
    for step, (a, b) in enumerate(zip(runs["pytorch"]["losses"], runs["poolkit"]["losses"])):
        print(f"{step:4d}  {a:17.9f}   {b:17.9f}")
    print(runs["poolkit"]["summary"])
    ours, theirs = runs["poolkit"]["stats"], runs["pytorch"]["stats"]
    print(f"peak allocated: pytorch {theirs['allocated_bytes.all.peak'] / 2**20:.1f} MiB, "
          f"poolkit {ours['allocated_bytes.all.peak'] / 2**20:.1f} MiB")
    print(f"peak reserved:  pytorch {theirs['reserved_bytes.all.peak'] / 2**20:.1f} MiB, "
          f"poolkit {ours['reserved_bytes.all.peak'] / 2**20:.1f} MiB")
    same = runs["pytorch"]["losses"] == runs["poolkit"]["losses"]
    print("losses identical" if same else "LOSSES DIFFER")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
