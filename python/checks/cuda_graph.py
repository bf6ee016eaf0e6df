"""Captures a training step of a small MLP in a CUDA graph (torch.cuda.graph) and replays it,
under PyTorch's allocator (plain and expandable_segments) and poolkit's caching and expandable
presets, each in its own process. The replays' losses and final weights must equal PyTorch's, bit
for bit, and poolkit's snapshot must show the graph's memory in a pool of its own
(segment_pool_id).

    PYTHONPATH=python/src:python/checks POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so python3 python/checks/cuda_graph.py

Prints one line per run and a verdict; exits 1 if a check fails.
"""
import json
import sys

import allocators

RUNS = ("pytorch", "pytorch expandable_segments", "poolkit caching", "poolkit expandable")
REPLAYS = 20


def step(name):
    allocators.install(name)
    import torch

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # its buffers are made in warm-up
    inputs = torch.randn(256, 512, device="cuda")
    targets = torch.randn(256, 512, device="cuda")

    def train_step():
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        return loss

    side = torch.cuda.Stream()  # warm-up on a side stream, as torch.cuda.graph's documentation asks
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            train_step()
    torch.cuda.current_stream().wait_stream(side)

    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_loss = train_step()
    generator = torch.Generator(device="cuda").manual_seed(1)
    losses = []
    for _ in range(REPLAYS):
        inputs.copy_(torch.randn(256, 512, device="cuda", generator=generator))
        eager = torch.randn(1 << 20, device="cuda")  # eager work between replays, through the same allocator
        graph.replay()
        losses.append(static_loss.item())
        del eager
    torch.cuda.synchronize()
    weights = [float(p.double().sum()) for p in model.parameters()]
    result = {"losses": losses, "weights": weights}
    if allocators.ALLOCATORS[name][1] is not None:
        import poolkit.torch
        pools = {tuple(s["segment_pool_id"]) for s in poolkit.torch.snapshot()["segments"]}
        result["graph_pools"] = len([p for p in pools if p != (0, 0)])
    del graph
    print(json.dumps(result))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        step(sys.argv[2])
        return
    runs = {name: allocators.run_child(__file__, name, []) for name in RUNS}
    reference = runs["pytorch"]
    failures = []
    for name, run in runs.items():
        print(f"{name:28} losses {run['losses'][0]:.6f} .. {run['losses'][-1]:.6f}  graph pools {run.get('graph_pools', '-')}")
        if run["losses"] != reference["losses"] or run["weights"] != reference["weights"]:
            failures.append(f"{name}: replays differ from PyTorch's allocator")
        if "graph_pools" in run and run["graph_pools"] < 1:
            failures.append(f"{name}: the snapshot shows no graph pool")
    print("FAILED: " + "; ".join(failures) if failures else f"OK: {REPLAYS} replays equal PyTorch's under every allocator")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
