"""PyTorch's own allocator entry points under poolkit (the hooks extension, poolkit/_torch_hooks.cpp),
each allocator in its own process:

- Tensor.record_stream under reuse pressure: a side stream sleeps, then sums `x`; `x.record_stream(side)`,
  `del x`, and a same-size tensor is filled at once on the current stream. Every sum must be right.
  The run with alloc and free alone ("without hooks") must get some wrong, or the check could not fail.
- torch.cuda.empty_cache() returns poolkit's cached memory (memory_reserved() falls by 1 GiB).
- torch.cuda.memory_stats() after an MLP training step, and after two ResNet-18 steps:
  allocated_bytes.all.current and allocation.all.current equal poolkit's own figures and PyTorch's
  allocator's for the same program (each block counted as its request rounded up to 512 bytes;
  after ResNet-18, PyTorch's default mode also counts the unsplit remainders of some blocks, so
  poolkit's figure equals expandable_segments' and is at most the default's); reset_peak_memory_stats() brings the peak down to the current
  figure; after reset_accumulated_memory_stats() and one allocation and free the totals equal PyTorch's;
  memory_summary() and max_memory_reserved() answer.
- make_graphed_callables of an MLP: its gradients equal the eager module's.
- torch.compile(mode="reduce-overhead") of an MLP: inference equals eager, training steps run.
- torch.cuda.memory._snapshot() shows the live memory (poolkit's snapshot under poolkit).
- Two graphs captured with one graph_pool_handle() share one poolkit graph pool, and their replays
  equal eager results.
- An impossible request raises torch.OutOfMemoryError in PyTorch's words ("Tried to allocate ...")
  naming poolkit, after the out-of-memory observers are told; 4 GiB is refused under
  set_per_process_memory_fraction(0.01), the observers told the bytes allowed, and served at 1.0;
  get_per_process_memory_fraction() reads the fraction back.

    PYTHONPATH=python/src:python/checks POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so python3 python/checks/torch_hooks.py

Prints one line per run and a verdict; exits 1 if a check fails.
"""
import json
import sys

import allocators

RUNS = ("pytorch", "pytorch expandable_segments", "poolkit caching", "poolkit expandable", "poolkit caching without hooks")
ROUNDS = 12


def record_stream_rounds(torch):
    """How many of ROUNDS side-stream sums saw another tensor's bytes."""
    side = torch.cuda.Stream()
    wrong = 0
    count = 1 << 22  # 16 MiB of float32
    for round_ in range(ROUNDS):
        x = torch.full((count,), float(round_ + 1), device="cuda")
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            torch.cuda._sleep(20_000_000)  # ~10 ms, so that the refill below runs first if allowed
            total = x.sum()
        x.record_stream(side)
        del x
        y = torch.full((count,), -1.0, device="cuda")  # must not take x's memory before side is done
        torch.cuda.synchronize()
        wrong += int(total.item() != float(round_ + 1) * count)
        del y, total
    return wrong


def empty_cache_figures(torch):
    """memory_reserved() with 1 GiB cached, and after torch.cuda.empty_cache()."""
    blocks = [torch.empty(256 << 20, dtype=torch.uint8, device="cuda") for _ in range(4)]
    del blocks
    torch.cuda.synchronize()
    before = torch.cuda.memory_reserved()
    torch.cuda.empty_cache()
    return before, torch.cuda.memory_reserved()


def mlp_step(torch):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 512)).cuda()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(256, 512, device="cuda")
    loss = torch.nn.functional.mse_loss(model(inputs), torch.zeros(256, 512, device="cuda"))
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    return model, optimizer, inputs


def stats_figures(torch, name):
    kept = mlp_step(torch)
    stats = torch.cuda.memory_stats()
    result = {"allocated": stats["allocated_bytes.all.current"], "allocations": stats["allocation.all.current"],
              "peak_allocated": stats["allocated_bytes.all.peak"], "max_reserved": torch.cuda.max_memory_reserved(),
              "summary_lines": len(torch.cuda.memory_summary().splitlines())}
    torch.cuda.reset_peak_memory_stats()
    result["peak_after_reset_is_current"] = torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated()
    # reset_accumulated_memory_stats(): totals from 0, then one allocation and its free counted.
    torch.cuda.reset_accumulated_memory_stats()
    after = torch.cuda.memory_stats()
    extra = torch.empty(1 << 20, device="cuda")
    del extra
    torch.cuda.synchronize()
    counted = torch.cuda.memory_stats()
    result["accumulated_after_reset"] = [after["allocation.all.allocated"], after["allocation.all.freed"], after["num_ooms"],
                                         counted["allocation.all.allocated"], counted["allocation.all.freed"],
                                         counted["allocated_bytes.all.allocated"]]
    if allocators.ALLOCATORS[name][1] is not None:
        import poolkit.torch
        own = poolkit.torch.memory_stats()
        result["poolkit_agrees"] = (own["allocated_bytes.all.current"], own["allocation.all.current"]) == (
            result["allocated"], result["allocations"])
    del kept
    return result


def shared_graph_pool(torch, name):
    """Two graphs in one pool: whether replays equal eager, and how many graph pools poolkit shows."""
    static = torch.randn(1 << 20, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up, as torch.cuda.graph's documentation asks
        (static * 2).sum(), (static + 1).square().mean()
    torch.cuda.current_stream().wait_stream(side)
    pool = torch.cuda.graph_pool_handle()
    first, second = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(first, pool=pool):
        out_first = (static * 2).sum()
    with torch.cuda.graph(second, pool=pool):
        out_second = (static + 1).square().mean()
    equal = True
    for seed in range(5):
        static.copy_(torch.randn(1 << 20, device="cuda", generator=torch.Generator(device="cuda").manual_seed(seed)))
        first.replay()
        second.replay()
        equal = equal and bool(torch.equal(out_first, (static * 2).sum())) and bool(torch.equal(out_second, (static + 1).square().mean()))
    result = {"graphs_equal_eager": equal}
    if allocators.ALLOCATORS[name][1] is not None:
        import poolkit.torch
        pools = {tuple(s["segment_pool_id"]) for s in poolkit.torch.snapshot()["segments"]}
        result["graph_pools"] = len([p for p in pools if p != (0, 0)])
    del first, second
    return result


def resnet18_stats(torch):
    """torch.cuda.memory_stats() after two ResNet-18 training steps (batch 8): what stays allocated
    (weights, gradients, momentum), in bytes and blocks."""
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).cuda()
    allocators.train_steps(model, 2, 8, seed=0)
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    result = {"allocated": stats["allocated_bytes.all.current"], "allocations": stats["allocation.all.current"]}
    del model
    return result


def graphed_callables(torch):
    """make_graphed_callables of a small MLP: forward and backward of the graphed module equal the
    eager module's, on the same inputs, over 5 steps."""
    torch.manual_seed(0)
    eager = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
    graphed_module = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
    graphed_module.load_state_dict(eager.state_dict())
    sample = torch.randn(64, 256, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(graphed_module, (sample,))
    generator = torch.Generator(device="cuda").manual_seed(3)
    equal = True
    for _ in range(5):
        inputs = torch.randn(64, 256, device="cuda", generator=generator)
        a = inputs.clone().requires_grad_(True)
        b = inputs.clone().requires_grad_(True)
        eager(a).square().sum().backward()
        graphed(b).square().sum().backward()
        equal = equal and bool(torch.allclose(a.grad, b.grad, rtol=1e-5, atol=1e-6))
    return equal


def compiled_reduce_overhead(torch):
    """torch.compile(mode="reduce-overhead") of an MLP: 6 inference calls equal eager, then 4
    training steps run (CUDA graphs of the compiled forward and backward)."""
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 256)).cuda()
        compiled = torch.compile(model, mode="reduce-overhead")
        equal = True
        for _ in range(6):
            inputs = torch.randn(64, 256, device="cuda")
            with torch.no_grad():
                equal = equal and bool(torch.allclose(model(inputs), compiled(inputs), rtol=1e-4, atol=1e-5))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(4):
            compiled(torch.randn(64, 256, device="cuda")).square().mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        return {"equal_eager": equal}
    except Exception as error:
        return {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"}


# What the out-of-memory observers were told, (alloc, device total or allowed) per call.
OBSERVED = []


def attach_observer(torch):
    try:
        torch._C._cuda_attach_out_of_memory_observer(lambda device, alloc, total, free: OBSERVED.append((alloc, total)))
    except Exception as error:
        OBSERVED.append(f"attach failed: {type(error).__name__}")


def out_of_memory(torch):
    """An impossible request: the error raised, whether it reads as PyTorch's ("Tried to
    allocate", the device's capacity) and names the allocator, and how many observers were told."""
    told = len(OBSERVED)
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        return {"error": None}
    except Exception as error:
        text = str(error)
        return {"error": type(error).__name__, "names_poolkit": "poolkit" in text,
                "pytorch_words": "Tried to allocate" in text and "total capacity" in text,
                "observers_told": len(OBSERVED) - told}


def memory_fraction(torch):
    """Whether 4 GiB is refused under a fraction of 1% of the device (1.4 GiB of an H200), with
    the observers told the bytes allowed, and served again at 100%; and what
    get_per_process_memory_fraction reads back."""
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.01)
    try:  # alloc and free alone: PyTorch's pluggable allocator raises
        # PyTorch's own allocator reads the fraction back from its byte limit (0.00999999999866...).
        read_back = round(torch.cuda.get_per_process_memory_fraction(), 9) if hasattr(torch.cuda, "get_per_process_memory_fraction") else 0.01
    except RuntimeError:
        read_back = None
    told = len(OBSERVED)
    try:
        torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
        refused = False
    except torch.OutOfMemoryError:
        refused = True
    total = torch.cuda.get_device_properties(0).total_memory
    allowed_told = [limit for alloc, limit in OBSERVED[told:]] if refused else []
    torch.cuda.set_per_process_memory_fraction(1.0)
    served = torch.empty(4 << 30, dtype=torch.uint8, device="cuda").numel() == 4 << 30
    return {"refused_past_fraction": refused, "served_at_full": served, "fraction_read_back": read_back,
            "observers_told_allowed": bool(allowed_told) and all(abs(limit - 0.01 * total) < (2 << 20) for limit in allowed_told)}


def child(name):
    allocators.install(name)
    import torch
    result = {"record_stream_wrong": record_stream_rounds(torch)}
    try:
        result["reserved_before_after_empty_cache"] = empty_cache_figures(torch)
    except RuntimeError as error:  # alloc and free alone: PyTorch's pluggable allocator has no statistics
        result["reserved_before_after_empty_cache"] = str(error).splitlines()[0][:120]
    try:
        result["stats"] = stats_figures(torch, name)
    except RuntimeError as error:
        result["stats"] = str(error).splitlines()[0][:120]
    keep = torch.empty(8 << 20, device="cuda")
    result["snapshot_segments"] = len(torch.cuda.memory._snapshot()["segments"])
    del keep
    try:
        result["resnet18_stats"] = resnet18_stats(torch)
    except RuntimeError as error:
        result["resnet18_stats"] = str(error).splitlines()[0][:120]
    result["graphs"] = shared_graph_pool(torch, name)
    result["graphed_callables_equal_eager"] = graphed_callables(torch)
    result["compiled_reduce_overhead"] = compiled_reduce_overhead(torch)
    attach_observer(torch)
    result["out_of_memory"] = out_of_memory(torch)
    result["memory_fraction"] = memory_fraction(torch)
    if allocators.ALLOCATORS[name][1] is not None:
        import poolkit.torch
        result["capabilities"] = {k: v for k, v in poolkit.torch.capabilities().items() if isinstance(v, bool)}
        result["hooks_missing"] = poolkit.torch.capabilities()["why"]
        from poolkit import _plugin
        result["capture_checks"] = _plugin.load().capture_checks
    print(json.dumps(result))


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "--child":
        child(sys.argv[2])
        return
    runs = {name: allocators.run_child(__file__, name, []) for name in RUNS}
    failures = []
    reference = runs["pytorch"]
    for name, run in runs.items():
        print(f"{name:28} {json.dumps(run)}")
        hooked = allocators.ALLOCATORS[name][1] is None or "without hooks" not in name
        if run["snapshot_segments"] < 1:
            failures.append(f"{name}: torch.cuda.memory._snapshot() shows no segment with 32 MiB live")
        if hooked and run["record_stream_wrong"] != 0:
            failures.append(f"{name}: {run['record_stream_wrong']} of {ROUNDS} record_stream rounds read another tensor's bytes")
        if "capture_checks" in run and run["capture_checks"] != ("announced" if hooked else "every_call"):
            failures.append(f"{name}: the pools check captures as {run['capture_checks']!r}")
        if not hooked:
            if run["record_stream_wrong"] == 0:
                failures.append(f"{name}: without the hook record_stream was never wrong: the check cannot fail")
            continue
        before_after = run["reserved_before_after_empty_cache"]
        if not isinstance(before_after, list) or before_after[0] - before_after[1] < (1 << 30) - (64 << 20):
            failures.append(f"{name}: torch.cuda.empty_cache() did not return the 1 GiB cached: {before_after}")
        stats = run["stats"]
        if not isinstance(stats, dict):
            failures.append(f"{name}: torch.cuda.memory_stats() failed: {stats}")
        else:
            if (stats["allocated"], stats["allocations"]) != (reference["stats"]["allocated"], reference["stats"]["allocations"]):
                failures.append(f"{name}: allocated figures differ from PyTorch's allocator's: {stats} against {reference['stats']}")
            if not stats["peak_after_reset_is_current"]:
                failures.append(f"{name}: reset_peak_memory_stats() left the peak above the current figure")
            if stats["accumulated_after_reset"] != reference["stats"]["accumulated_after_reset"]:
                failures.append(f"{name}: after reset_accumulated_memory_stats() and one allocation the totals are "
                                f"{stats['accumulated_after_reset']}, PyTorch's {reference['stats']['accumulated_after_reset']}")
            if not stats.get("poolkit_agrees", True):
                failures.append(f"{name}: torch.cuda.memory_stats() differs from poolkit.torch.memory_stats()")
        # Both allocators count a block as its request rounded up to 512 bytes; PyTorch's default
        # mode also counts the remainder of a block it did not split (under 1 MiB), so its figure
        # can only be higher: expandable_segments' is the one to equal.
        resnet, resnet_reference = run["resnet18_stats"], runs["pytorch expandable_segments"]["resnet18_stats"]
        if name == "pytorch":
            if not isinstance(resnet, dict) or resnet["allocations"] != resnet_reference["allocations"] or resnet["allocated"] < resnet_reference["allocated"]:
                failures.append(f"{name}: after ResNet-18 steps {resnet}, against expandable_segments' {resnet_reference}")
        elif resnet != resnet_reference:
            failures.append(f"{name}: after ResNet-18 steps the allocated figures differ from PyTorch's allocator's "
                            f"(expandable_segments): {resnet} against {resnet_reference}")
        if not run["graphed_callables_equal_eager"]:
            failures.append(f"{name}: make_graphed_callables' gradients differ from the eager module's")
        if run["compiled_reduce_overhead"] != {"equal_eager": True}:
            failures.append(f"{name}: torch.compile(mode='reduce-overhead'): {run['compiled_reduce_overhead']}")
        if not run["graphs"]["graphs_equal_eager"]:
            failures.append(f"{name}: graph replays differ from eager results")
        if run["graphs"].get("graph_pools", 1) != 1:
            failures.append(f"{name}: two graphs with one graph_pool_handle() used {run['graphs']['graph_pools']} graph pools")
        oom = run["out_of_memory"]
        if oom["error"] != "OutOfMemoryError" or (allocators.ALLOCATORS[name][1] is not None and not oom["names_poolkit"]):
            failures.append(f"{name}: an impossible request raised {oom}")
        elif oom["observers_told"] < 1:
            failures.append(f"{name}: the out-of-memory observer was not told")
        elif not oom["pytorch_words"]:
            failures.append(f"{name}: the out-of-memory message is not in PyTorch's words: {oom}")
        if run["memory_fraction"] != {"refused_past_fraction": True, "served_at_full": True, "fraction_read_back": 0.01,
                                      "observers_told_allowed": True}:
            failures.append(f"{name}: set_per_process_memory_fraction was not honoured: {run['memory_fraction']}")
    print("FAILED: " + "; ".join(failures) if failures else "OK: PyTorch's allocator entry points reach poolkit under every preset")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
