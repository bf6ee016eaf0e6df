"""poolkit's CUDA allocators for PyTorch and CuPy.

    import poolkit.torch
    poolkit.torch.use("caching")          # before the first CUDA allocation
    ...
    print(poolkit.torch.memory_summary())
    poolkit.torch.dump_snapshot("snap.pickle")   # python -m torch.cuda._memory_viz segment_plot snap.pickle -o snap.html

    import poolkit.cupy
    poolkit.cupy.use("expandable")

Presets: "caching" (stream-ordered caching pools over cudaMalloc, PyTorch's rules) and "expandable"
(CUDA virtual memory mapped only while used: the smallest footprint). Options are the C++ names
of caching_options / expandable_options (poolkit/strategy/caching_pool.hpp, expandable.hpp).
Both frameworks share one plugin (libpoolkit_plugin.so) and so the same pools.
"""
from ._plugin import PoolkitError, Plugin, find_plugin, load

__version__ = "0.1.0"
PRESETS = ("caching", "expandable")

__all__ = ["PoolkitError", "Plugin", "find_plugin", "load", "PRESETS", "__version__"]
