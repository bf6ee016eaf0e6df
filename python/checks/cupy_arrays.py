"""Runs a CuPy array workload with poolkit.cupy.use(PRESET) and checks its results against the
same workload on CuPy's default memory pool.

    PYTHONPATH=python/src POOLKIT_PLUGIN=build/plugins/libpoolkit_plugin.so python3 python/checks/cupy_arrays.py [caching|expandable]
"""
import sys

import cupy
import numpy

import poolkit.cupy


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
    preset = sys.argv[1] if len(sys.argv) > 1 else "caching"
    expected = workload()
    cupy.get_default_memory_pool().free_all_blocks()
    poolkit.cupy.use(preset)
    got = workload()
    cupy.cuda.Device().synchronize()
    stats = poolkit.cupy.memory_stats()
    print(f"default pool: {expected!r}")
    print(f"poolkit {preset}: {got!r}")
    print(f"poolkit {preset} allocations: {stats['allocation.all.allocated']}, peak allocated "
          f"{stats['allocated_bytes.all.peak'] / 2**20:.1f} MiB, peak reserved {stats['reserved_bytes.all.peak'] / 2**20:.1f} MiB, "
          f"upstream allocs {stats['num_device_alloc']}")
    same = numpy.isclose(expected, got, rtol=1e-9, atol=0.0)
    print("results identical" if expected == got else ("results equal within 1e-9" if same else "RESULTS DIFFER"))
    return 0 if same and stats["allocation.all.allocated"] > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
