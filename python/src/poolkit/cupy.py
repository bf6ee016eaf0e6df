"""poolkit as CuPy's allocator, with torch.cuda-shaped statistics, summary and snapshot.

    import poolkit.cupy
    poolkit.cupy.use("caching")
    x = cupy.zeros(1 << 20)               # from poolkit, on CuPy's current stream
    poolkit.cupy.memory_stats()

CuPy may switch allocators at any time (arrays already made keep their memory); the plugin's
preset is fixed by its first allocation, and shared with PyTorch in the same process.
"""
import threading

from . import PRESETS, _frontend, _plugin
from ._plugin import PoolkitError

_lock = threading.Lock()
_in_use = None


def _cupy():
    return _plugin.import_framework("cupy", "cupy", "CuPy (for your CUDA version)")


def _current_device():
    return _cupy().cuda.Device().id


class _Allocator:
    """CuPy's malloc and free over the plugin. CuPy's free passes only the pointer: each block's
    size, device and stream are remembered until it is freed (the block is freed on the stream
    it was allocated on)."""

    def __init__(self, plugin):
        self._plugin = plugin
        self._live = {}
        self._lock = threading.Lock()

    def malloc(self, size, device):
        cupy = _cupy()
        stream = cupy.cuda.get_current_stream().ptr
        try:
            pointer = self._plugin.alloc(size, device, stream)
        except MemoryError:
            raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0) from None
        if pointer == 0:
            return 0
        with self._lock:
            self._live[pointer] = (size, device, stream)
        return pointer

    def free(self, pointer, device):
        if pointer == 0:
            return  # a 0-byte allocation
        with self._lock:
            size, device, stream = self._live.pop(pointer)
        self._plugin.free(pointer, size, device, stream)


def use(preset="expandable", *, plugin=None, **options):
    """Makes poolkit CuPy's allocator (cupy.cuda.set_allocator): preset "expandable" (the default,
    as for poolkit.torch.use(), with which it shares the plugin's pools) or "caching", options by
    their C++ names. Raises PoolkitError for an unknown preset or
    option, or when the plugin's pools were already made with other settings."""
    global _in_use
    if preset not in PRESETS:
        raise PoolkitError(f"no preset {preset!r} (expected one of {', '.join(PRESETS)})")
    with _lock:
        cupy = _cupy()
        loaded = _plugin.load(plugin)
        if loaded.backend != "cuda":
            raise PoolkitError(f"{loaded.path} is the {loaded.backend} plugin: CuPy needs the CUDA one")
        loaded.configure(preset, options)
        allocator = _Allocator(loaded)
        loaded.frontend_captures(announced=False)  # CuPy's captures are begun where poolkit cannot see
        cupy.cuda.set_allocator(cupy.cuda.memory.PythonFunctionAllocator(allocator.malloc, allocator.free).malloc)
        _in_use = (preset, dict(options))


def in_use():
    """The (preset, options) use() installed, or None."""
    return _in_use


_frontend.Frontend(_current_device).export(globals())

__all__ = ["use", "in_use", *_frontend.Frontend.FUNCTIONS]
