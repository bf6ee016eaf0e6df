"""The CUDA plugin's C ABI through the Python package, on a GPU: memory written and read back
through the CUDA runtime, both presets, statistics, snapshot, out of memory, bad frees and options
refused. Exits 77 (ctest: skipped) where the plugin sees no GPU.

    PYTHONPATH=python/src python3 tests/python/check_cuda_plugin.py build/plugins/libpoolkit_plugin.so
"""
import ctypes
import os
import shutil
import sys
import tempfile
import unittest

from poolkit import _plugin

MiB = 1 << 20
PLUGIN = None  # the path under test, from argv


def fresh_plugin():
    folder = tempfile.mkdtemp(prefix="poolkit-cuda-plugin-")
    path = os.path.join(folder, "libpoolkit_plugin.so")
    shutil.copyfile(PLUGIN, path)
    return _plugin.Plugin(path)


def cudart():
    for name in ("libcudart.so.13", "libcudart.so.12", "libcudart.so"):
        try:
            return ctypes.CDLL(name)  # the one the plugin loaded
        except OSError:
            continue
    raise unittest.SkipTest("no libcudart to check memory with")


class CudaPlugin(unittest.TestCase):
    def round_trip(self, plugin, size, stream):
        runtime = cudart()
        pointer = plugin.alloc(size, 0, stream)
        self.assertEqual(runtime.cudaMemsetAsync(ctypes.c_void_p(pointer), 0x5A, ctypes.c_size_t(size), ctypes.c_void_p(stream)), 0)
        back = (ctypes.c_ubyte * size)()
        self.assertEqual(runtime.cudaStreamSynchronize(ctypes.c_void_p(stream)), 0)
        self.assertEqual(runtime.cudaMemcpy(back, ctypes.c_void_p(pointer), ctypes.c_size_t(size), 2), 0)  # device to host
        self.assertTrue(all(b == 0x5A for b in back))
        return pointer

    def test_both_presets_hand_out_device_memory(self):
        for preset in ("caching", "expandable"):
            with self.subTest(preset=preset):
                plugin = fresh_plugin()
                plugin.configure(preset, {})
                runtime = cudart()
                stream = ctypes.c_void_p()
                self.assertEqual(runtime.cudaStreamCreate(ctypes.byref(stream)), 0)
                sizes = [4096, 3 * MiB + 1, 96 * MiB]
                pointers = [self.round_trip(plugin, size, stream.value or 0) for size in sizes[:2]]
                pointers.append(plugin.alloc(sizes[2], 0, stream.value))
                plugin.record_stream(pointers[0], 0, 0)
                stats = plugin.memory_stats(0)
                self.assertEqual(stats["allocation.all.current"], 3)
                self.assertEqual(stats["requested_bytes.all.current"], sum(sizes))
                segments = plugin.segments(0)
                self.assertEqual(sum(s["total_size"] for s in segments), stats["reserved_bytes.all.current"])
                live = {b["address"] for s in segments for b in s["blocks"] if b["state"] == "active_allocated"}
                self.assertEqual(live, set(pointers))
                for pointer, size in zip(pointers, sizes):
                    plugin.free(pointer, size, 0, stream.value)
                self.assertEqual(runtime.cudaStreamSynchronize(stream), 0)
                plugin.empty_cache()
                self.assertEqual(plugin.memory_stats(0)["allocated_bytes.all.current"], 0)
                self.assertIn("Allocated memory", plugin.memory_summary(0))
                self.assertEqual(runtime.cudaStreamDestroy(stream), 0)

    def test_an_announced_capture_is_served_by_its_graph_pool(self):
        # Under "announced" checks a call asks the driver about captures only while one is announced
        # (poolkit.torch's hooks announce PyTorch's): a call outside any capture asks nothing, and a
        # call in an announced capture allocates from the graph pool without breaking the capture.
        for preset in ("caching", "expandable"):
            with self.subTest(preset=preset):
                plugin = fresh_plugin()
                plugin.configure(preset, {})
                plugin.set_capture_checks("announced")
                runtime = cudart()
                stream = ctypes.c_void_p()
                self.assertEqual(runtime.cudaStreamCreateWithFlags(ctypes.byref(stream), 1), 0)  # non-blocking
                eager = self.round_trip(plugin, MiB, stream.value)
                plugin.announce_capture(True)
                self.assertEqual(runtime.cudaStreamBeginCapture(stream, 0), 0)  # cudaStreamCaptureModeGlobal
                pool = 1 << 62
                plugin.capture_into(0, stream.value, pool)
                size = 2 * MiB
                captured = plugin.alloc(size, 0, stream.value)
                self.assertEqual(runtime.cudaMemsetAsync(ctypes.c_void_p(captured), 0x3C, ctypes.c_size_t(size), stream), 0)
                graph = ctypes.c_void_p()
                self.assertEqual(runtime.cudaStreamEndCapture(stream, ctypes.byref(graph)), 0)  # not invalidated
                plugin.announce_capture(False)
                self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 2)
                launchable = ctypes.c_void_p()
                self.assertEqual(runtime.cudaGraphInstantiate(ctypes.byref(launchable), graph, ctypes.c_ulonglong(0)), 0)
                self.assertEqual(runtime.cudaGraphLaunch(launchable, stream), 0)
                self.assertEqual(runtime.cudaStreamSynchronize(stream), 0)
                back = (ctypes.c_ubyte * size)()
                self.assertEqual(runtime.cudaMemcpy(back, ctypes.c_void_p(captured), ctypes.c_size_t(size), 2), 0)
                self.assertTrue(all(b == 0x3C for b in back))
                plugin.free(captured, size, 0, stream.value)
                self.assertEqual(runtime.cudaGraphExecDestroy(launchable), 0)
                self.assertEqual(runtime.cudaGraphDestroy(graph), 0)
                plugin.release_graph_pool(0, pool)
                plugin.free(eager, MiB, 0, stream.value)
                self.assertEqual(runtime.cudaStreamSynchronize(stream), 0)
                self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 0)
                self.assertEqual(runtime.cudaStreamDestroy(stream), 0)

    def test_bad_frees_are_refused_and_change_nothing(self):
        for preset in ("caching", "expandable"):
            with self.subTest(preset=preset):
                plugin = fresh_plugin()
                plugin.configure(preset, {})
                pointer = plugin.alloc(3000, 0, 0)
                before = plugin.memory_stats(0)
                for bad, size, why in ((pointer + 512, 3000, "inside the block"), (pointer, 1000, "allocated with 3000"),
                                       (pointer + (1 << 40), 3000, "not a live block")):
                    with self.assertRaisesRegex(_plugin.PoolkitError, why):
                        plugin.free(bad, size, 0, 0)
                with self.assertRaisesRegex(_plugin.PoolkitError, "record_stream of .* inside the block"):
                    plugin.record_stream(pointer + 512, 0, 0)
                self.assertEqual(plugin.memory_stats(0), before)
                plugin.free(pointer, 3000, 0, 0)
                with self.assertRaisesRegex(_plugin.PoolkitError, "not a live block"):
                    plugin.free(pointer, 3000, 0, 0)
                self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 0)

    def test_options_the_pool_would_refuse_are_refused_when_set(self):
        plugin = fresh_plugin()
        for preset, name, value in (("caching", "rounding", 3), ("expandable", "mapping_bytes", 3),
                                    ("expandable", "cache_fraction", float("inf"))):
            with self.assertRaisesRegex(_plugin.PoolkitError, f"option {name}=.* refused"):
                plugin.configure(preset, {name: value})

    def test_more_than_the_device_has_is_a_memory_error(self):
        plugin = fresh_plugin()
        with self.assertRaisesRegex(MemoryError, "out of memory"):
            plugin.alloc(1 << 50, 0, 0)
        self.assertEqual(plugin.memory_stats(0)["num_ooms"], 1)


def main():
    global PLUGIN
    if len(sys.argv) < 2:
        sys.exit("usage: check_cuda_plugin.py PATH/libpoolkit_plugin.so")
    PLUGIN = os.path.abspath(sys.argv.pop(1))
    if _plugin.Plugin(PLUGIN).device_count == 0:
        print("SKIP: the CUDA plugin sees no GPU on this machine")
        return 77
    result = unittest.main(exit=False, verbosity=2).result
    return 0 if result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
