"""Data-parallel training of ResNet-18 with torch.distributed (NCCL, one process per GPU, launched
by torchrun) under the allocators of allocators.py: each rank switches to poolkit (or keeps
PyTorch's allocator) before its first CUDA allocation. Every rank's losses must equal those of the
same run on PyTorch's default allocator; prints each rank's peak allocated / reserved and time per
step beside PyTorch's.

    PYTHONPATH=python/src POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so python3 python/checks/ddp_resnet18.py [GPUS]

GPUS defaults to every visible device (at least 2 are needed). DDP's gradient buckets and NCCL's
inputs are used on NCCL's stream: ProcessGroupNCCL's record_stream calls reach poolkit through its
hooks (poolkit.torch.capabilities()), and the check fails if TORCH_NCCL_AVOID_RECORD_STREAMS is set
in a rank where they are live; without them (the "without hooks" run) poolkit.torch.use() sets it
(unless set), so that ProcessGroupNCCL holds those tensors until its work is done.
"""
import json
import os
import subprocess
import sys

import allocators

STEPS = 10
BATCH = 32  # per rank


def train(name):
    allocators.install(name)
    import torch
    import torch.distributed as dist
    import torchvision

    rank = int(os.environ["RANK"])
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    model = torch.nn.parallel.DistributedDataParallel(torchvision.models.resnet18(num_classes=10).cuda(), device_ids=[local_rank])
    losses, ms_per_step = allocators.train_steps(model, STEPS, BATCH, seed=1 + rank)
    figures = allocators.figures(name)
    dist.barrier()
    dist.destroy_process_group()
    hooked = False
    if allocators.ALLOCATORS[name][1] is not None:
        import poolkit.torch
        hooked = poolkit.torch.capabilities()["record_stream"]
    # With the hooks, NCCL's record_stream calls reach poolkit: the workaround must not be set.
    avoid = os.environ.get("TORCH_NCCL_AVOID_RECORD_STREAMS")
    print(json.dumps({"rank": rank, "losses": losses, "ms_per_step": ms_per_step, "figures": figures, "record_stream_hooked": hooked,
                      "avoid_record_streams": avoid}), flush=True)


def run(name, gpus):
    env = {k: v for k, v in os.environ.items() if k != "PYTORCH_CUDA_ALLOC_CONF"}
    env.update(allocators.ALLOCATORS[name][0])
    env.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={gpus}", __file__, "--child", name]
    child = subprocess.run(command, env=env, capture_output=True, text=True)
    ranks = {}
    for line in child.stdout.splitlines():
        if line.startswith('{"rank"'):
            result = json.loads(line)
            ranks[result["rank"]] = result
    if child.returncode != 0 or len(ranks) != gpus:
        sys.stderr.write(child.stdout[-4000:] + child.stderr[-8000:])
        raise SystemExit(f"{name}: torchrun failed (exit {child.returncode}, {len(ranks)} of {gpus} ranks reported)")
    return [ranks[r] for r in range(gpus)]


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        train(sys.argv[2])
        return 0
    import torch
    gpus = int(sys.argv[1]) if len(sys.argv) > 1 else torch.cuda.device_count()
    if gpus < 2:
        print(f"SKIP: DistributedDataParallel needs 2 GPUs; this machine has {torch.cuda.device_count()}")
        return 77
    runs = {name: run(name, gpus) for name in allocators.ALLOCATORS}
    print(f"ResNet-18, DistributedDataParallel over {gpus} GPUs (NCCL), batch {BATCH} per rank, {STEPS} steps\n")
    print("step" + "".join(f"  {name + ' r' + str(r):>32}" for name in runs for r in range(gpus) if name in ("pytorch", "poolkit caching")))
    for step in range(STEPS):
        print(f"{step:4d}" + "".join(f"  {runs[name][r]['losses'][step]:32.9f}"
                                     for name in runs for r in range(gpus) if name in ("pytorch", "poolkit caching")))
    print()
    print(allocators.table({f"{name} rank {r}": runs[name][r] for name in runs for r in range(gpus)}))
    failures = [f"{name} rank {r}: {statement}" for name, ranks in runs.items() for r, result in enumerate(ranks)
                for statement in result["figures"].get("consistency", [])]
    failures += [f"{name} rank {r}: losses differ from pytorch's" for name, ranks in runs.items() for r in range(gpus)
                 if ranks[r]["losses"] != runs["pytorch"][r]["losses"]]
    failures += [f"{name} rank {r}: record_stream is hooked, yet TORCH_NCCL_AVOID_RECORD_STREAMS={ranks[r]['avoid_record_streams']}"
                 for name, ranks in runs.items() for r in range(gpus) if ranks[r]["record_stream_hooked"] and ranks[r]["avoid_record_streams"]]
    print("\n" + ("every check passed: every rank's losses identical under every allocator, poolkit's stats agree with its snapshots"
                  if not failures else "FAILED:\n  " + "\n  ".join(failures)))
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
