"""Builds and loads _torch_hooks.cpp, poolkit's CUDAPluggableAllocator with every hook wired,
against the torch this Python imports (torch.utils.cpp_extension: a C++ compiler, ninja and the
CUDA toolkit's headers). The build is cached per torch version and source under POOLKIT_CACHE
(default ~/.cache/poolkit), so only the first use in an environment pays for it (17 s on the
16-core H200 host).

POOLKIT_TORCH_HOOKS=0 skips it: poolkit.torch then installs alloc and free alone, as PyTorch's
Python CUDAPluggableAllocator can.
"""
import hashlib
import os
import sysconfig

_SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_torch_hooks.cpp")

# The plugin's functions the extension calls (include/poolkit/interop/c_api.h); poolkit_lasting_stream
# may be missing (a plugin built before it).
FUNCTIONS = ("poolkit_alloc", "poolkit_free", "poolkit_record_stream", "poolkit_empty_cache", "poolkit_reset_peak_stats",
             "poolkit_reset_accumulated_stats", "poolkit_memory_stats_json", "poolkit_capture_into", "poolkit_announce_capture",
             "poolkit_set_memory_fraction", "poolkit_record_history", "poolkit_last_error", "poolkit_lasting_stream")


def build_directory(torch):
    with open(_SOURCE, "rb") as source:
        digest = hashlib.sha256(source.read()).hexdigest()[:16]
    root = os.environ.get("POOLKIT_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "poolkit")
    cuda = torch.version.cuda or "none"
    python = (sysconfig.get_config_var("EXT_SUFFIX") or ".so").removesuffix(".so").strip(".").replace(".", "-")  # the ABI
    return os.path.join(root, f"torch_hooks-{torch.__version__}-cuda{cuda}-{python}-{digest}")


def load(torch):
    """(module, None) where the extension builds and loads; (None, why) otherwise."""
    if os.environ.get("POOLKIT_TORCH_HOOKS", "1") == "0":
        return None, "POOLKIT_TORCH_HOOKS=0"
    try:
        from torch.utils import cpp_extension
        directory = build_directory(torch)
        os.makedirs(directory, exist_ok=True)
        module = cpp_extension.load(name="poolkit_torch_hooks", sources=[_SOURCE], build_directory=directory,
                                    extra_cflags=["-O2", "-std=c++20"], with_cuda=True, verbose=False)
        return module, None
    except Exception as error:  # no compiler, no CUDA headers, an incompatible torch: the ctypes path
        return None, f"the hooks extension could not be built against torch {torch.__version__}: {str(error)[-2000:]}"
