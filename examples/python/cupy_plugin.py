"""Runs a CuPy array workload with poolkit as CuPy's allocator and checks its results against the
same workload on CuPy's default memory pool.

    python3 examples/python/cupy_plugin.py build/plugins/libpoolkit_plugin.so
    POOLKIT_ALLOCATOR=expandable python3 examples/python/cupy_plugin.py build/plugins/libpoolkit_plugin.so

POOLKIT_ALLOCATOR picks the plugin's preset: caching (the default) or expandable. CuPy calls
malloc(size) and free(pointer) from Python; the stream is CuPy's current one.
"""
import ctypes
import json
import os
import sys

import cupy
import numpy


def poolkit_allocator(path):
    library = ctypes.CDLL(path)
    library.poolkit_alloc.restype = ctypes.c_void_p
    library.poolkit_alloc.argtypes = [ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    library.poolkit_free.argtypes = [ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p]
    library.poolkit_allocator_name.restype = ctypes.c_char_p
    library.poolkit_last_error.restype = ctypes.c_char_p
    live = {}  # pointer -> (size, device, stream): CuPy's free passes only the pointer

    def malloc(size, device):
        stream = cupy.cuda.get_current_stream().ptr
        pointer = library.poolkit_alloc(size, device, stream)
        if not pointer:
            raise cupy.cuda.memory.OutOfMemoryError(size, 0, 0)
        live[pointer] = (size, device, stream)
        return pointer

    def free(pointer, device):
        size, device, stream = live.pop(pointer)
        library.poolkit_free(pointer, size, device, stream)

    return library, cupy.cuda.memory.PythonFunctionAllocator(malloc, free)


def workload():
    random = cupy.random.default_rng(7)
    total = cupy.zeros((), dtype=cupy.float64)
    for step in range(200):
        n = 256 + (step * 97) % 2048
        a = random.standard_normal((n, 512), dtype=cupy.float32)
        b = random.standard_normal((512, n % 700 + 64), dtype=cupy.float32)
        c = a @ b
        total += cupy.tanh(c).sum(dtype=cupy.float64) + cupy.sort(c.ravel())[: n].sum(dtype=cupy.float64)
    return float(total)


def main():
    path = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else "build/plugins/libpoolkit_plugin.so"
    expected = workload()
    library, allocator = poolkit_allocator(path)
    kind = library.poolkit_allocator_name()  # POOLKIT_ALLOCATOR, read by the plugin
    if kind is None:
        sys.exit(library.poolkit_last_error().decode())
    kind = kind.decode()
    cupy.get_default_memory_pool().free_all_blocks()
    cupy.cuda.set_allocator(allocator.malloc)
    got = workload()
    cupy.cuda.Device().synchronize()
    library.poolkit_memory_stats_json.restype = ctypes.c_long
    size = library.poolkit_memory_stats_json(0, None, 0)
    buffer = ctypes.create_string_buffer(size + 1)
    library.poolkit_memory_stats_json(0, buffer, size + 1)
    stats = json.loads(buffer.value.decode())
    print(f"default pool: {expected!r}")
    print(f"poolkit ({kind}): {got!r}")
    print(f"poolkit {kind} allocations: {stats['allocation.all.allocated']}, peak allocated "
          f"{stats['allocated_bytes.all.peak'] / 2**20:.1f} MiB, peak reserved {stats['reserved_bytes.all.peak'] / 2**20:.1f} MiB, "
          f"upstream allocs {stats['num_device_alloc']}")
    same = numpy.isclose(expected, got, rtol=1e-9, atol=0.0)
    print("results identical" if expected == got else ("results equal within 1e-9" if same else "RESULTS DIFFER"))
    return 0 if same and stats["allocation.all.allocated"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
