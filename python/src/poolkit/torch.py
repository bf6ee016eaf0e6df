"""poolkit as PyTorch's CUDA allocator, with torch.cuda's statistics, summary and snapshot.

    import poolkit.torch
    poolkit.torch.use("expandable")       # before the first CUDA allocation of the process
    model = ...                           # every CUDA tensor now comes from poolkit
    poolkit.torch.memory_stats()          # torch.cuda.memory_stats() keys
    poolkit.torch.dump_snapshot("snap.pickle")

Once PyTorch uses a pluggable allocator its own torch.cuda.memory_stats(), memory_summary() and
memory._snapshot() know nothing of it: ask this module instead. PyTorch's pluggable interface
does not pass Tensor.record_stream() on: for a tensor used on a stream other than the one it was
allocated on, call poolkit.torch.record_stream(tensor, stream). For torch.distributed, use() sets
TORCH_NCCL_AVOID_RECORD_STREAMS=1 (unless set): NCCL's collectives then hold their tensors until
done instead of calling record_stream.
"""
import os
import threading

from . import PRESETS, _frontend, _plugin
from ._plugin import PoolkitError

_lock = threading.Lock()
_in_use = None  # (preset, options) once use() succeeded


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


def use(preset="caching", *, plugin=None, **options):
    """Makes poolkit PyTorch's CUDA allocator: preset "caching" or "expandable", options by their
    C++ names (e.g. use("expandable", max_peak_slack=0.2, mapping_bytes=32 << 20)). Must run
    before the first CUDA allocation of the process; raises PoolkitError if PyTorch already
    allocated, for an unknown preset or option, or for a second call with other settings (a
    repeated call with the same ones does nothing). `plugin` is a path to libpoolkit_plugin.so
    (default: POOLKIT_PLUGIN, else the one installed with this package)."""
    global _in_use
    if preset not in PRESETS:
        raise PoolkitError(f"no preset {preset!r} (expected one of {', '.join(PRESETS)})")
    wanted = (preset, dict(options))
    with _lock:
        if _in_use is not None:
            if _in_use == wanted:
                return
            raise PoolkitError(f"poolkit.torch.use() already ran with {_in_use}; the allocator cannot change in a process")
        torch = _torch()
        loaded = _plugin.load(plugin)
        if loaded.backend != "cuda":
            raise PoolkitError(f"{loaded.path} is the {loaded.backend} plugin: PyTorch needs the CUDA one")
        loaded.configure(preset, options)
        # ProcessGroupNCCL calls record_stream on collective inputs unless told to hold them until
        # the collective is done; record_stream never reaches a pluggable allocator.
        os.environ.setdefault("TORCH_NCCL_AVOID_RECORD_STREAMS", "1")
        allocator = torch.cuda.memory.CUDAPluggableAllocator(loaded.path, "poolkit_alloc", "poolkit_free")
        try:
            torch.cuda.memory.change_current_allocator(allocator)
        except RuntimeError as error:
            raise PoolkitError(
                "poolkit.torch.use() must run before PyTorch's first CUDA allocation in this process; PyTorch's "
                f"allocator is already in use (PyTorch said: {error}). Call it first thing, before any model or "
                "tensor is moved to the GPU.") from None
        _in_use = wanted


def in_use():
    """The (preset, options) use() installed, or None."""
    return _in_use


def record_stream(tensor, stream):
    """Tensor.record_stream() for poolkit: the tensor's memory is not reused until the work queued
    on `stream` so far is done."""
    device = tensor.device.index if tensor.device.index is not None else _current_device()
    _plugin.load().record_stream(tensor.untyped_storage().data_ptr(), device, stream.cuda_stream)


_frontend.Frontend(_current_device, _as_index).export(globals())

__all__ = ["use", "in_use", "record_stream", *_frontend.Frontend.FUNCTIONS]
