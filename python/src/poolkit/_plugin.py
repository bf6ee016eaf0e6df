"""The plugin's C ABI (include/poolkit/interop/c_api.h) through ctypes.

One plugin per process: PyTorch and CuPy load the same file, so they share its pools. The file is
POOLKIT_PLUGIN when set, else the libpoolkit_plugin.so installed inside this package.
"""
import ctypes
import importlib
import json
import os
import threading


class PoolkitError(RuntimeError):
    """A call into the plugin failed; the message is the plugin's own."""


_LIBRARY = "libpoolkit_plugin.so"


def import_framework(name, user, install):
    """The module `name` (torch, cupy) that poolkit.`user` serves; where it is not installed, a
    PoolkitError that says what to install (`install`)."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        if error.name != name:
            raise
        raise PoolkitError(f"poolkit.{user} needs {install}, which this Python cannot import: install {name} first, "
                           "or use another of poolkit's front ends (poolkit.torch, poolkit.cupy) or the C++ library") from None


def find_plugin():
    """The path of the plugin this process will load."""
    named = os.environ.get("POOLKIT_PLUGIN")
    if named:
        if not os.path.isfile(named):
            raise PoolkitError(f"POOLKIT_PLUGIN={named} names no file")
        return os.path.abspath(named)
    bundled = os.path.join(os.path.dirname(os.path.abspath(__file__)), _LIBRARY)
    if os.path.isfile(bundled):
        return bundled
    raise PoolkitError(
        f"no {_LIBRARY}: install the package with `pip install ./python` (it builds the plugin), "
        "or build it (cmake --build build --target poolkit_plugin) and set POOLKIT_PLUGIN to its path")


class Plugin:
    """The C ABI of one loaded plugin, in Python's terms: errors raise PoolkitError."""

    def __init__(self, path):
        self.path = os.path.abspath(path)
        try:
            lib = ctypes.CDLL(self.path)
        except OSError as error:
            raise PoolkitError(f"cannot load {self.path}: {error}") from None
        self._lib = lib
        self.configured = None  # (preset, options) of the last configure() that succeeded
        self._unannounced = False  # a frontend routes captures here that it cannot announce
        self._captures_lock = threading.Lock()
        c = ctypes
        self._bind("poolkit_alloc", c.c_void_p, [c.c_ssize_t, c.c_int, c.c_void_p])
        self._bind("poolkit_free", None, [c.c_void_p, c.c_ssize_t, c.c_int, c.c_void_p])
        self._bind("poolkit_record_stream", None, [c.c_void_p, c.c_int, c.c_void_p])
        self._bind("poolkit_capture_into", c.c_int, [c.c_int, c.c_void_p, c.c_ulonglong])
        self._bind("poolkit_release_graph_pool", c.c_int, [c.c_int, c.c_ulonglong])
        self._bind("poolkit_set_capture_checks", c.c_int, [c.c_char_p])
        self._bind("poolkit_announce_capture", None, [c.c_int])
        self._bind("poolkit_capture_checks", c.c_char_p, [])
        self._bind("poolkit_set_memory_fraction", c.c_int, [c.c_int, c.c_double])
        self._bind("poolkit_empty_cache", None, [])
        self._bind("poolkit_reset_peak_stats", c.c_int, [c.c_int])
        self._bind("poolkit_reset_accumulated_stats", c.c_int, [c.c_int])
        for text in ("poolkit_memory_stats_json", "poolkit_memory_summary", "poolkit_snapshot_json"):
            self._bind(text, c.c_long, [c.c_int, c.c_char_p, c.c_size_t])
        self._bind("poolkit_history_json", c.c_long, [c.c_int, c.c_char_p, c.c_size_t])
        self._bind("poolkit_record_history", c.c_int, [c.c_size_t, _HistoryCallbacks])
        self._bind("poolkit_set_allocator", c.c_int, [c.c_char_p])
        self._bind("poolkit_set_option", c.c_int, [c.c_char_p, c.c_char_p])
        self._bind("poolkit_allocator_name", c.c_char_p, [])
        self._bind("poolkit_device_count", c.c_int, [])
        self._bind("poolkit_backend", c.c_char_p, [])
        self._bind("poolkit_last_error", c.c_char_p, [])

    def _bind(self, name, result, arguments):
        try:
            function = getattr(self._lib, name)
        except AttributeError:
            raise PoolkitError(f"{self.path} has no {name}: it is older than this package; rebuild it") from None
        function.restype = result
        function.argtypes = arguments

    def _error(self, what):
        message = self._lib.poolkit_last_error().decode()
        return PoolkitError(message or what)

    def _name(self, function, what):
        """The text a C function returns, where NULL means it failed (poolkit_last_error says why)."""
        name = function()
        if name is None:
            raise self._error(what)
        return name.decode()

    def _check(self):
        # For the functions that return nothing: every call sets the last error, "" on success.
        message = self._lib.poolkit_last_error().decode()
        if message:
            raise PoolkitError(message)

    @property
    def backend(self):
        """'cuda', or 'simulated' for the plugin over simulated memory (tests without a GPU)."""
        return self._lib.poolkit_backend().decode()

    @property
    def device_count(self):
        count = self._lib.poolkit_device_count()
        if count < 0:
            raise self._error("poolkit_device_count failed")
        return count

    @property
    def allocator(self):
        """'caching' or 'expandable': the kind in use, or the one the first pool would have."""
        return self._name(self._lib.poolkit_allocator_name, "poolkit_allocator_name failed")

    def configure(self, preset, options):
        """Chooses the allocator kind and its options; only before the first pool is made, unless
        they are those already chosen through this object (PyTorch and CuPy sharing the pools)."""
        if self.configured == (preset, dict(options)):
            return
        self.configured = None
        if self._lib.poolkit_set_allocator(str(preset).encode()) != 0:
            raise self._error(f"cannot choose allocator {preset!r}")
        for name, value in options.items():
            if isinstance(value, bool):
                text = "true" if value else "false"
            elif isinstance(value, (int, float)):
                text = repr(value)
            else:
                raise PoolkitError(f"option {name}={value!r}: expected a number or a bool")
            if self._lib.poolkit_set_option(name.encode(), text.encode()) != 0:
                raise self._error(f"cannot set option {name}")
        self.configured = (preset, dict(options))

    def alloc(self, size, device, stream):
        """The address of `size` bytes usable by work on `stream` (a cudaStream_t as an int);
        raises MemoryError when the device is out of memory, PoolkitError for other failures.
        0 bytes are no allocation: the address is 0 (and freeing it does nothing)."""
        if size <= 0:
            return 0
        pointer = self._lib.poolkit_alloc(size, device, stream)
        if not pointer:
            message = self._lib.poolkit_last_error().decode()
            if "out of memory" in message or not message:
                raise MemoryError(message or f"poolkit: out of memory allocating {size} bytes on device {device}")
            raise PoolkitError(message)
        return pointer

    def free(self, pointer, size, device, stream):
        """Gives back a block alloc() returned, with the size it was allocated with; raises
        PoolkitError, changing nothing, for a pointer that is no live block of the device (never
        allocated there, freed already, inside a block) or another size. Freeing 0 does nothing."""
        self._lib.poolkit_free(pointer, size, device, stream)
        self._check()

    def record_stream(self, pointer, device, stream):
        """The block is also used by work on `stream`; raises PoolkitError for a pointer that is
        no live block of the device. 0 (an empty tensor's) does nothing."""
        self._lib.poolkit_record_stream(pointer, device, stream)
        self._check()

    def lasting_stream(self, stream):
        """Declares `stream` (a cudaStream_t, as an int) never destroyed while the process runs, so
        that the pools tell it apart from other streams without asking the driver at each call on
        it. Raises PoolkitError where it cannot be declared (in capture, say). Bound at first use:
        a plugin built before it still serves everything else."""
        self._bind("poolkit_lasting_stream", ctypes.c_int, [ctypes.c_void_p])  # says so where the plugin lacks it
        if self._lib.poolkit_lasting_stream(stream) != 0:
            raise self._error(f"cannot declare stream {stream:#x} lasting")

    def capture_into(self, device, stream, pool):
        """The capture `stream` is in allocates from the graph pool named `pool` (an int below
        2**64), shared by the captures given the same name; before the capture's first allocation.
        Raises PoolkitError for a stream not in capture."""
        if self._lib.poolkit_capture_into(device, stream, pool) != 0:
            raise self._error(f"cannot route the capture to graph pool {pool}")

    def release_graph_pool(self, device, pool):
        """Waits for the device; then the graph pool's memory serves eager work again."""
        if self._lib.poolkit_release_graph_pool(device, pool) != 0:
            raise self._error(f"cannot release graph pool {pool}")

    def set_capture_checks(self, mode):
        """How every pool learns that a stream is in capture: "every_call" or "announced"."""
        if self._lib.poolkit_set_capture_checks(str(mode).encode()) != 0:
            raise self._error(f"cannot set capture checks {mode!r}")

    @property
    def capture_checks(self):
        """The mode set_capture_checks set ("every_call" until then)."""
        return self._name(self._lib.poolkit_capture_checks, "poolkit_capture_checks failed")

    def announce_capture(self, begins):
        """A capture through the plugin begins (True) or has ended (False); see set_capture_checks."""
        self._lib.poolkit_announce_capture(1 if begins else 0)

    def frontend_captures(self, announced):
        """A frontend now routes allocations here: announced=True where it announces every capture
        (PyTorch's hooks, from beginAllocateToPool to endAllocateToPool), False where it cannot
        (CuPy, PyTorch without the hooks). While every such frontend announces, the pools ask the
        driver about captures only during one; once one cannot, at every call for good."""
        with self._captures_lock:
            self._unannounced = self._unannounced or not announced
            self.set_capture_checks("every_call" if self._unannounced else "announced")

    def set_memory_fraction(self, fraction, device):
        """Caps what the device's pool may reserve at `fraction` (0 to 1) of its memory
        (torch.cuda.set_per_process_memory_fraction): past it, the cache is returned first, then
        the request fails as out of memory."""
        if self._lib.poolkit_set_memory_fraction(device, float(fraction)) != 0:
            raise self._error(f"cannot set the memory fraction of device {device}")

    def addresses(self, names):
        """{name: address} of C functions of the plugin, for a C++ caller (poolkit.torch's hooks);
        0 for one the plugin lacks (an older build)."""
        return {name: ctypes.cast(getattr(self._lib, name), ctypes.c_void_p).value if hasattr(self._lib, name) else 0
                for name in names}

    def empty_cache(self):
        self._lib.poolkit_empty_cache()
        self._check()

    def reset_peak_stats(self, device):
        if self._lib.poolkit_reset_peak_stats(device) != 0:
            raise self._error(f"cannot reset the peaks of device {device}")

    def reset_accumulated_stats(self, device):
        if self._lib.poolkit_reset_accumulated_stats(device) != 0:
            raise self._error(f"cannot reset the totals of device {device}")

    def _text(self, function, device):
        # The text can grow between the sizing call and the copy: retry until it fits.
        size = function(device, None, 0)
        while size >= 0:
            buffer = ctypes.create_string_buffer(size + 1)
            written = function(device, buffer, size + 1)
            if 0 <= written <= size:
                return buffer.value.decode()
            size = written
        raise self._error(f"no pool for device {device}")

    def memory_stats(self, device):
        return json.loads(self._text(self._lib.poolkit_memory_stats_json, device))

    def memory_summary(self, device):
        return self._text(self._lib.poolkit_memory_summary, device)

    def segments(self, device):
        return json.loads(self._text(self._lib.poolkit_snapshot_json, device))["segments"]

    def record_history(self, max_entries):
        """Every pool records its history (unlabelled) into a ring of `max_entries` events; 0 stops."""
        if self._lib.poolkit_record_history(max_entries, _HistoryCallbacks()) != 0:
            raise self._error("cannot record the history")

    def history(self, device):
        """The device's history, oldest first: [{"action", "addr", "size", "stream", "time_us"} ...]."""
        return json.loads(self._text(self._lib.poolkit_history_json, device))


class _HistoryCallbacks(ctypes.Structure):
    # poolkit_history_callbacks; from Python always empty (no labels).
    _fields_ = [("label", ctypes.c_void_p), ("release", ctypes.c_void_p), ("user", ctypes.c_void_p)]


_lock = threading.Lock()
_loaded = None


def load(path=None):
    """The process's plugin, loaded on first call (from `path`, or find_plugin()); a later call
    naming another file raises PoolkitError, since pools cannot move between plugins."""
    global _loaded
    with _lock:
        wanted = os.path.abspath(path) if path else None
        if _loaded is None:
            _loaded = Plugin(wanted or find_plugin())
        elif wanted and wanted != _loaded.path:
            raise PoolkitError(f"poolkit is already loaded from {_loaded.path}; cannot switch to {wanted}")
        return _loaded
