"""poolkit as PyTorch's CUDA allocator, with torch.cuda's statistics, summary and snapshot.

    import poolkit.torch
    poolkit.torch.use("expandable")       # before the first CUDA allocation of the process
    model = ...                           # every CUDA tensor now comes from poolkit
    poolkit.torch.memory_stats()          # torch.cuda.memory_stats() keys
    poolkit.torch.dump_snapshot("snap.pickle")

use() builds a small C++ extension against the installed torch on first use (cached; see
_torch_hooks.py) that wires PyTorch's allocator hooks to poolkit: Tensor.record_stream,
torch.cuda.empty_cache(), torch.cuda.memory_stats() and what is built on it (memory_allocated,
max_memory_reserved, memory_summary, reset_peak_memory_stats), CUDA graph pools
(torch.cuda.graph, graph_pool_handle() sharing, make_graphed_callables,
torch.compile(mode="reduce-overhead"), with its cudagraph trees off),
set_per_process_memory_fraction, and OutOfMemoryError with poolkit's figures. capabilities()
says which hooks are live. Where the extension cannot be built, only alloc and free reach
poolkit: ask this module for statistics, call record_stream() and
set_per_process_memory_fraction() here, and use() sets TORCH_NCCL_AVOID_RECORD_STREAMS=1 (unless
set) so that NCCL's collectives hold their tensors instead of calling Tensor.record_stream.
Either way use() makes torch.cuda.memory._snapshot(), _dump_snapshot() and memory_snapshot()
answer with poolkit's snapshot(), and _record_memory_history() record poolkit's history, which
snapshot() shows as device_traces for PyTorch's viewers (python -m torch.cuda._memory_viz
trace_plot); with the extension each event carries its Python and C++ call stack, as PyTorch's own
(PyTorch's functions only raise for a pluggable allocator).
"""
import os
import threading

from . import PRESETS, _frontend, _imports, _plugin, _torch_hooks
from ._plugin import PoolkitError

_lock = threading.Lock()
_in_use = None  # (preset, options) once use() succeeded
_hooks_missing = "use() has not run"  # why the hooks extension is not live; None once it is


def _torch():
    return _plugin.import_framework("torch", "torch", "PyTorch (with CUDA)")


def _current_device():
    return _torch().cuda.current_device()


def _as_index(device):
    if isinstance(device, int):
        return device
    torch = _torch()
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"poolkit serves CUDA devices, not {device}")
    return torch.cuda.current_device() if device.index is None else device.index


def use(preset="expandable", *, plugin=None, **options):
    """Makes poolkit PyTorch's CUDA allocator: preset "expandable" (the default: CUDA virtual
    memory, granules kept mapped as PyTorch's expandable_segments keeps them, over poolkit's
    placement) or "caching", options by their C++ names (e.g. use("expandable", peak_slack=0) for
    mapped memory that follows live memory, use("expandable", peak_slack=0, max_peak_slack=0,
    mapping_bytes=0) to follow it exactly). Must run before the first CUDA allocation of the process; raises PoolkitError if
    PyTorch already allocated, for an unknown preset or option, or for a second call with other
    settings (a repeated call with the same ones does nothing). `plugin` is a path to libpoolkit_plugin.so
    (default: POOLKIT_PLUGIN, else the one installed with this package)."""
    global _in_use, _hooks_missing
    if preset not in PRESETS:
        raise PoolkitError(f"no preset {preset!r} (expected one of {', '.join(PRESETS)})")
    wanted = (preset, dict(options))
    with _lock:
        if _in_use is not None:
            if _in_use == wanted:
                return
            raise PoolkitError(f"poolkit.torch.use() already ran with {_in_use}; the allocator cannot change in a process")
        announced = _captures_announced()  # checked before anything is installed
        torch = _torch()
        loaded = _plugin.load(plugin)
        if loaded.backend != "cuda":
            raise PoolkitError(f"{loaded.path} is the {loaded.backend} plugin: PyTorch needs the CUDA one")
        loaded.configure(preset, options)
        hooks, missing = _torch_hooks.load(torch)
        try:
            if hooks is not None:
                hooks.install(loaded.addresses(_torch_hooks.FUNCTIONS), torch.cuda.device_count())
                loaded.frontend_captures(announced)
            else:
                allocator = torch.cuda.memory.CUDAPluggableAllocator(loaded.path, "poolkit_alloc", "poolkit_free")
                torch.cuda.memory.change_current_allocator(allocator)
                # ProcessGroupNCCL calls record_stream on collective inputs unless told to hold them
                # until the collective is done; without the hooks record_stream reaches nothing.
                os.environ.setdefault("TORCH_NCCL_AVOID_RECORD_STREAMS", "1")
                loaded.frontend_captures(False)
        except RuntimeError as error:
            if "initialized" not in str(error):
                raise PoolkitError(f"poolkit.torch.use() could not install poolkit: {error} (POOLKIT_TORCH_HOOKS=0 "
                                   "installs alloc and free alone)") from None
            raise PoolkitError(
                "poolkit.torch.use() must run before PyTorch's first CUDA allocation in this process; PyTorch's "
                f"allocator is already in use (PyTorch said: {error}). Call it first thing, before any model or "
                "tensor is moved to the GPU.") from None
        _front.stacks = hooks  # history events labelled with call stacks where the extension is live
        _route_snapshots(torch)
        _compile_without_cudagraph_trees()
        _in_use = wanted
        _hooks_missing = missing


def _captures_announced():
    """Whether the pools may rely on the hooks' announcements of PyTorch's captures (each window
    from beginAllocateToPool to endAllocateToPool) and ask about captures only then:
    POOLKIT_CAPTURE_CHECKS=announced (the default) or every_call (for captures begun behind
    PyTorch's back, which PyTorch's own allocator cannot serve either)."""
    checks = os.environ.get("POOLKIT_CAPTURE_CHECKS", "announced")
    if checks not in ("announced", "every_call"):
        raise PoolkitError(f"POOLKIT_CAPTURE_CHECKS={checks} (expected announced or every_call)")
    return checks == "announced"


def in_use():
    """The (preset, options) use() installed, or None."""
    return _in_use


def _compile_without_cudagraph_trees():
    """torch.compile(mode="reduce-overhead") captures its CUDA graphs as torch.cuda.graph does
    (whose pools poolkit serves) instead of through cudagraph trees, which checkpoint and check the
    state of PyTorch's own allocator's private pools (a pluggable allocator's functions for those
    only raise), as under PyTorch's cudaMallocAsync backend. Set once torch._inductor.config is
    imported, which PyTorch does only when a compile needs inductor: importing it here would load
    inductor into every process that uses poolkit."""
    _imports.on_import("torch._inductor.config", _cudagraph_trees_off)


def _cudagraph_trees_off(inductor):
    inductor.triton.cudagraph_trees = False


def _route_snapshots(torch):
    """torch.cuda.memory._snapshot() (what _dump_snapshot() writes) and memory_snapshot() answer
    with poolkit's snapshot, and _record_memory_history() records poolkit's history: PyTorch's C++
    functions of a pluggable allocator only raise."""
    def snapshot(*_args, **_kwargs):
        return globals()["snapshot"]()

    def memory_snapshot(*_args, **_kwargs):
        return globals()["snapshot"]()["segments"]

    def record_history(*args, **kwargs):
        return globals()["record_memory_history"](*args, **kwargs)

    torch.cuda.memory._record_memory_history = record_history
    torch.cuda.memory._snapshot = snapshot
    torch.cuda.memory.memory_snapshot = memory_snapshot
    torch.cuda.memory_snapshot = memory_snapshot


# What each of PyTorch's allocator entry points does under poolkit once the hooks are live
# (docs/python.md has the whole table).
_HOOKED = ("record_stream", "empty_cache", "memory_stats", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
           "graph_pool_sharing", "out_of_memory_error", "out_of_memory_observers", "memory_fraction", "history_stacks")
_NOT_WIRED = {
    "mem_pool": "torch.cuda.MemPool and use_mem_pool are not supported: PyTorch's pluggable allocator refuses to make the pool "
                "(createOrIncrefPool), and poolkit's private pools serve CUDA graph captures only",
}


def capabilities():
    """Which of PyTorch's allocator entry points reach poolkit in this process: {name: bool}, and
    "why" (why the hooks are not live, or None) and "not_wired" ({name: what happens instead})."""
    live = _in_use is not None and _hooks_missing is None
    result = {name: live for name in _HOOKED}
    result.update({name: False for name in _NOT_WIRED})
    result["alloc_free"] = _in_use is not None
    # Hooks or not: captures are served from graph pools, and the snapshot and history are routed
    # in Python (history events carry call stacks only with the hooks: history_stacks).
    result["cuda_graphs"] = result["memory_snapshot"] = result["record_memory_history"] = _in_use is not None
    result["why"] = _hooks_missing
    result["not_wired"] = dict(_NOT_WIRED)
    return result


def record_stream(tensor, stream):
    """Tensor.record_stream() for poolkit: the tensor's memory is not reused until the work queued
    on `stream` so far is done. With the hooks live (capabilities()), tensor.record_stream(stream)
    does the same."""
    device = tensor.device.index if tensor.device.index is not None else _current_device()
    _plugin.load().record_stream(tensor.untyped_storage().data_ptr(), device, stream.cuda_stream)


_front = _frontend.Frontend(_current_device, _as_index)
_front.export(globals())

__all__ = ["use", "in_use", "capabilities", "record_stream", *_frontend.Frontend.FUNCTIONS]
