"""The plugin's C ABI and the Python package over it, on libpoolkit_plugin_simulated.so: the same
pools and C ABI as the CUDA plugin over simulated memory, so these run without a GPU.

    POOLKIT_TEST_PLUGIN=build/plugins/libpoolkit_plugin_simulated.so PYTHONPATH=python/src \
        python3 -m unittest discover -s tests/python -v

Each test loads its own copy of the plugin (a copy of the file is a separate library with its own
pools), since the allocator kind is fixed once a pool is made. Addresses from the simulated
plugin are never touched. Tests of calls that a broken plugin answers by aborting run in a
process of their own.
"""
import atexit
import functools
import os
import pickle
import resource
import shutil
import subprocess
import sys
import tempfile
import unittest

import poolkit
from poolkit import _frontend, _plugin, _torch_hooks

MiB = 1 << 20
GiB = 1 << 30
STREAM_A = 0x1000  # simulated streams: handles that are only compared
STREAM_B = 0x2000


def plugin_under_test():
    source = os.environ.get("POOLKIT_TEST_PLUGIN")
    if not source:
        raise unittest.SkipTest("POOLKIT_TEST_PLUGIN is not set")
    return source


def fresh_plugin(memory=None, devices=None, read_devices=True):
    """A new instance of the simulated plugin: its own pools, kind and options. With
    read_devices, its registry reads POOLKIT_SIMULATED_DEVICES now."""
    folder = tempfile.mkdtemp(prefix="poolkit-plugin-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)  # the library stays loaded until exit
    path = os.path.join(folder, "libpoolkit_plugin_simulated.so")
    shutil.copyfile(plugin_under_test(), path)
    for name, value in (("POOLKIT_SIMULATED_MEMORY", memory), ("POOLKIT_SIMULATED_DEVICES", devices)):
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = str(value)
    plugin = _plugin.Plugin(path)
    if read_devices:
        plugin.device_count
    return plugin


def in_own_process(address_space=None):
    """Runs the test in a child process of its own (with at most `address_space` bytes of address
    space, when given), so that a plugin that aborts, or runs away with memory, fails this test
    instead of ending the whole run."""
    def wrap(test):
        @functools.wraps(test)
        def run(self):
            plugin_under_test()
            name = f"{os.path.splitext(os.path.basename(__file__))[0]}.{type(self).__name__}.{self._testMethodName}"
            if os.environ.get("POOLKIT_TEST_CHILD") == name:
                return test(self)

            def limit():
                if address_space:
                    resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
            # The same working folder (paths given relative to it still hold), and this folder
            # on the path, so that the child finds this module.
            paths = [os.path.dirname(os.path.abspath(__file__))]
            paths += [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
            env = dict(os.environ, POOLKIT_TEST_CHILD=name, PYTHONPATH=os.pathsep.join(paths))
            child = subprocess.run([sys.executable, "-m", "unittest", name], env=env, preexec_fn=limit, capture_output=True,
                                   text=True, timeout=120)
            if child.returncode != 0:
                self.fail(f"in a process of its own, exit status {child.returncode}:\n{child.stderr[-4000:]}")
            if "OK (skipped=" in child.stderr:
                self.skipTest(f"skipped in its own process:\n{child.stderr[-1000:]}")
        return run
    return wrap


def check_tiling(test, snapshot):
    """Blocks tile their segment, and the segment's figures are its blocks' (what PyTorch's
    _memory_viz stats asserts: free + allocated == total for every segment)."""
    for segment in snapshot["segments"]:
        address = segment["address"]
        for block in segment["blocks"]:
            test.assertEqual(block["address"], address)
            address += block["size"]
        test.assertEqual(address - segment["address"], segment["total_size"])
        allocated = [b for b in segment["blocks"] if b["state"] == "active_allocated"]
        test.assertEqual(segment["allocated_size"], sum(b["size"] for b in allocated))
        test.assertEqual(segment["requested_size"], sum(b["requested_size"] for b in allocated))
        for block in allocated:
            test.assertLessEqual(block["requested_size"], block["size"])


class CApi(unittest.TestCase):
    def test_identity(self):
        plugin = fresh_plugin(devices=3)
        self.assertEqual(plugin.backend, "simulated")
        self.assertEqual(plugin.device_count, 3)
        self.assertEqual(plugin.allocator, "caching")

    def test_allocated_bytes_count_blocks_as_pytorch_does(self):
        plugin = fresh_plugin()
        pointers = [(plugin.alloc(size, 0, STREAM_A), size) for size in (1, 512, 513, 1000)]
        self.assertEqual(plugin.memory_stats(0)["allocated_bytes.all.current"], 512 + 512 + 1024 + 1024)  # requests rounded to 512
        for pointer, size in pointers:
            plugin.free(pointer, size, 0, STREAM_A)

    def test_history_labels_go_through_the_callbacks_and_come_back_once(self):
        import ctypes
        plugin = fresh_plugin(devices=1)
        asked, released = [], []
        label_type = ctypes.CFUNCTYPE(ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_int)
        release_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ulonglong)

        def label(_user, action):
            asked.append(action)
            return len(asked)

        keep = (label_type(label), release_type(lambda _user, value: released.append(value)))
        callbacks = _plugin._HistoryCallbacks(ctypes.cast(keep[0], ctypes.c_void_p), ctypes.cast(keep[1], ctypes.c_void_p), None)
        self.assertEqual(plugin._lib.poolkit_record_history(4, callbacks), 0)
        for _ in range(2):
            plugin.free(plugin.alloc(MiB, 0, STREAM_A), MiB, 0, STREAM_A)
        self.assertEqual(asked, [0, 1, 0, 1])  # alloc, free_requested, twice
        events = plugin.history(0)
        self.assertEqual([e["action"] for e in events], ["free_completed", "alloc", "free_requested", "free_completed"])
        self.assertEqual([e.get("label") for e in events], [None, 3, 4, None])
        self.assertEqual(sorted(released), [1, 2])  # the first alloc's and free's left the ring of 4
        plugin.record_history(0)
        self.assertEqual(sorted(released), [1, 2, 3, 4])
        self.assertEqual(plugin.history(0), [])

    def test_allocations_show_in_the_stats(self):
        plugin = fresh_plugin()
        sizes = [1000, 3 * MiB + 7, 300 * MiB]
        pointers = [plugin.alloc(size, 0, STREAM_A) for size in sizes]
        self.assertEqual(len(set(pointers)), len(pointers))
        stats = plugin.memory_stats(0)
        self.assertEqual(stats["allocation.all.current"], 3)
        self.assertEqual(stats["requested_bytes.all.current"], sum(sizes))
        self.assertGreaterEqual(stats["allocated_bytes.all.current"], sum(sizes))
        self.assertGreaterEqual(stats["reserved_bytes.all.current"], stats["allocated_bytes.all.current"])
        self.assertGreater(stats["num_device_alloc"], 0)
        for pointer, size in zip(pointers, sizes):
            plugin.free(pointer, size, 0, STREAM_A)
        stats = plugin.memory_stats(0)
        self.assertEqual(stats["allocation.all.current"], 0)
        self.assertEqual(stats["allocated_bytes.all.current"], 0)
        self.assertEqual(stats["allocation.all.freed"], 3)
        self.assertEqual(stats["requested_bytes.all.peak"], sum(sizes))

    def test_zero_bytes_are_no_allocation(self):
        plugin = fresh_plugin()
        self.assertEqual(plugin.alloc(0, 0, STREAM_A), 0)
        plugin.free(0, 0, 0, STREAM_A)
        self.assertEqual(plugin.memory_stats(0), {})

    def test_devices_have_their_own_pools(self):
        plugin = fresh_plugin()
        pointer = plugin.alloc(4 * MiB, 1, STREAM_A)
        self.assertEqual(plugin.memory_stats(1)["allocation.all.current"], 1)
        self.assertEqual(plugin.memory_stats(0), {})  # no pool made on device 0
        plugin.free(pointer, 4 * MiB, 1, STREAM_A)

    def test_a_device_that_does_not_exist_is_an_error(self):
        plugin = fresh_plugin(devices=2)
        with self.assertRaisesRegex(poolkit.PoolkitError, r"no device 5 \(there are 2\)"):
            plugin.alloc(1024, 5, STREAM_A)
        with self.assertRaisesRegex(poolkit.PoolkitError, "no device -1"):
            plugin.memory_stats(-1)
        with self.assertRaisesRegex(poolkit.PoolkitError, "no device 2"):
            plugin.reset_peak_stats(2)

    def test_out_of_memory_raises_memory_error_and_counts(self):
        plugin = fresh_plugin(memory=GiB)
        with self.assertRaisesRegex(MemoryError, "out of memory"):
            plugin.alloc(2 * GiB, 0, STREAM_A)
        self.assertEqual(plugin.memory_stats(0)["num_ooms"], 1)
        pointer = plugin.alloc(256 * MiB, 0, STREAM_A)  # the pool still serves what fits
        plugin.free(pointer, 256 * MiB, 0, STREAM_A)

    def test_the_kind_and_options_are_fixed_by_the_first_pool(self):
        plugin = fresh_plugin()
        plugin.memory_stats(0)  # looking makes no pool
        plugin.configure("expandable", {"cache_fraction": 0.05, "mapping_bytes": 32 * MiB})
        self.assertEqual(plugin.allocator, "expandable")
        pointer = plugin.alloc(MiB, 0, STREAM_A)
        plugin.configure("expandable", {"cache_fraction": 0.05, "mapping_bytes": 32 * MiB})  # the same: nothing to do
        with self.assertRaisesRegex(poolkit.PoolkitError, "before the first pool"):
            plugin.configure("caching", {})
        plugin.free(pointer, MiB, 0, STREAM_A)

    def test_bad_presets_and_options_say_what_is_wrong(self):
        plugin = fresh_plugin()
        with self.assertRaisesRegex(poolkit.PoolkitError, r'no allocator named "buddy" \(expected caching or expandable\)'):
            plugin.configure("buddy", {})
        with self.assertRaisesRegex(poolkit.PoolkitError, r'no option "cache_fraction" \(the options are rounding, '):
            plugin.configure("caching", {"cache_fraction": 0.1})
        with self.assertRaisesRegex(poolkit.PoolkitError, r"option power2_divisions=-4 is not a number of at least 0"):
            plugin.configure("caching", {"power2_divisions": -4})
        with self.assertRaisesRegex(poolkit.PoolkitError, r"expected a number or a bool"):
            plugin.configure("caching", {"power2_divisions": "four"})
        with self.assertRaisesRegex(poolkit.PoolkitError, "mapping_bytes=3145728 refused: .* 0 or a power of two"):
            plugin.configure("expandable", {"mapping_bytes": 3 * MiB})

    def test_caching_options_take_effect(self):
        plugin = fresh_plugin()
        plugin.configure("caching", {"large_chunk": 0, "release_before_growth": False})
        pointer = plugin.alloc(5 * MiB, 0, STREAM_A)
        # as needed in 2 MiB steps: 6 MiB, not the default 256 MiB chunk
        self.assertEqual(plugin.memory_stats(0)["reserved_bytes.all.current"], 6 * MiB)
        plugin.free(pointer, 5 * MiB, 0, STREAM_A)

    def test_a_failed_configuration_leaves_no_option_behind(self):
        plugin = fresh_plugin()
        with self.assertRaisesRegex(poolkit.PoolkitError, 'no option "bogus"'):
            plugin.configure("caching", {"large_chunk": 0, "bogus": 1})
        plugin.configure("caching", {})
        pointer = plugin.alloc(5 * MiB, 0, STREAM_A)
        self.assertEqual(plugin.memory_stats(0)["reserved_bytes.all.current"], 256 * MiB)  # the default chunk, not 6 MiB
        plugin.free(pointer, 5 * MiB, 0, STREAM_A)

    def test_every_call_sets_the_last_error(self):
        """To why it failed, or to "" when it succeeded: a NULL from poolkit_alloc(0) is no
        failure, and a function that returns nothing can be checked."""
        plugin = fresh_plugin()
        lib = plugin._lib

        def fail():
            self.assertIsNone(lib.poolkit_alloc(1024, 5, STREAM_A))
            self.assertIn(b"no device 5", lib.poolkit_last_error())

        fail()
        self.assertIsNone(lib.poolkit_alloc(0, 0, STREAM_A))  # no allocation, and no failure
        self.assertEqual(lib.poolkit_last_error(), b"")
        fail()
        self.assertGreater(lib.poolkit_memory_stats_json(0, None, 0), 0)
        self.assertEqual(lib.poolkit_last_error(), b"")
        fail()
        lib.poolkit_free(None, 0, 0, STREAM_A)  # nothing to free
        self.assertEqual(lib.poolkit_last_error(), b"")

    def test_empty_cache_returns_free_chunks(self):
        plugin = fresh_plugin()
        pointer = plugin.alloc(300 * MiB, 0, STREAM_A)
        plugin.free(pointer, 300 * MiB, 0, STREAM_A)
        self.assertGreater(plugin.memory_stats(0)["reserved_bytes.all.current"], 0)
        plugin.empty_cache()
        stats = plugin.memory_stats(0)
        self.assertEqual(stats["reserved_bytes.all.current"], 0)
        self.assertGreater(stats["num_device_free"], 0)

    def test_reset_peak_stats(self):
        plugin = fresh_plugin()
        pointer = plugin.alloc(64 * MiB, 0, STREAM_A)
        plugin.free(pointer, 64 * MiB, 0, STREAM_A)
        small = plugin.alloc(MiB, 0, STREAM_A)
        plugin.reset_peak_stats(0)
        stats = plugin.memory_stats(0)
        self.assertEqual(stats["allocated_bytes.all.peak"], stats["allocated_bytes.all.current"])
        self.assertEqual(stats["reserved_bytes.all.peak"], stats["reserved_bytes.all.current"])
        plugin.free(small, MiB, 0, STREAM_A)

    def test_reset_accumulated_stats(self):
        plugin = fresh_plugin()
        pointer = plugin.alloc(64 * MiB, 0, STREAM_A)
        plugin.free(pointer, 64 * MiB, 0, STREAM_A)
        small = plugin.alloc(MiB, 0, STREAM_A)
        plugin.empty_cache()
        before = plugin.memory_stats(0)
        self.assertEqual(before["allocation.all.allocated"], 2)
        self.assertGreater(before["num_device_free"], 0)
        plugin.reset_accumulated_stats(0)
        stats = plugin.memory_stats(0)
        for key in ("allocation.all.allocated", "allocation.all.freed", "allocated_bytes.all.freed", "num_device_alloc",
                    "num_device_free", "num_ooms"):
            self.assertEqual(stats[key], 0, key)
        self.assertEqual(stats["allocated_bytes.all.current"], before["allocated_bytes.all.current"])
        plugin.free(small, MiB, 0, STREAM_A)
        self.assertEqual(plugin.memory_stats(0)["allocation.all.freed"], 1)
        with self.assertRaisesRegex(poolkit.PoolkitError, "no device 7"):
            plugin.reset_accumulated_stats(7)

    def test_summary_is_a_table_of_the_stats(self):
        plugin = fresh_plugin()
        empty = plugin.memory_summary(0)
        self.assertIn("poolkit memory summary", empty)
        pointer = plugin.alloc(3 * MiB, 0, STREAM_A)
        text = plugin.memory_summary(0)
        self.assertIn("Allocated memory", text)
        self.assertIn("3.00 MiB", text)
        plugin.free(pointer, 3 * MiB, 0, STREAM_A)

    def test_snapshot_shows_each_block(self):
        plugin = fresh_plugin()
        live = {plugin.alloc(size, 0, STREAM_A): size for size in (1000, 2 * MiB, 40 * MiB)}
        freed = plugin.alloc(8 * MiB, 0, STREAM_A)
        plugin.free(freed, 8 * MiB, 0, STREAM_A)
        segments = plugin.segments(0)
        blocks = {b["address"]: b for s in segments for b in s["blocks"]}
        for pointer, size in live.items():
            self.assertEqual(blocks[pointer]["state"], "active_allocated")
            self.assertEqual(blocks[pointer]["requested_size"], size)
        self.assertNotIn(freed, [a for a, b in blocks.items() if b["state"] == "active_allocated"])
        check_tiling(self, {"segments": segments})
        self.assertEqual(sum(s["total_size"] for s in segments), plugin.memory_stats(0)["reserved_bytes.all.current"])
        for pointer, size in live.items():
            plugin.free(pointer, size, 0, STREAM_A)

    def test_a_block_freed_on_another_stream_is_pending_until_it_returns(self):
        plugin = fresh_plugin()
        pointer = plugin.alloc(2 * MiB, 0, STREAM_A)
        plugin.free(pointer, 2 * MiB, 0, STREAM_B)  # parked on B's lane until its batch goes home
        states = {b["address"]: b["state"] for s in plugin.segments(0) for b in s["blocks"]}
        self.assertIn(states[pointer], ("active_pending_free", "inactive"))
        self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 0)

    def test_expandable_segments_are_the_mapped_granules(self):
        plugin = fresh_plugin()
        plugin.configure("expandable", {})
        sizes = [3 * MiB, 10 * MiB + 5, 100, 64 * MiB]
        pointers = [plugin.alloc(size, 0, STREAM_A) for size in sizes]
        plugin.free(pointers[1], sizes[1], 0, STREAM_A)
        segments = plugin.segments(0)
        check_tiling(self, {"segments": segments})
        mapped = plugin.memory_stats(0)["reserved_bytes.all.current"]
        self.assertEqual(sum(s["total_size"] for s in segments), mapped)
        self.assertLess(mapped, GiB)  # the spans' address space is not shown
        for segment in segments:
            self.assertEqual(segment["total_size"] % (2 * MiB), 0)
        for pointer, size in zip(pointers, sizes):
            if size != sizes[1]:
                plugin.free(pointer, size, 0, STREAM_A)
        plugin.empty_cache()
        self.assertEqual(plugin.segments(0), [])
        self.assertEqual(plugin.memory_stats(0)["reserved_bytes.all.current"], 0)

    def test_stitching_serves_a_large_block_from_free_pieces_and_empty_cache_gives_all_back(self):
        plugin = fresh_plugin()
        plugin.configure("expandable", {})  # stitching is the default
        pieces = [plugin.alloc(32 * MiB, 0, STREAM_A) for _ in range(6)]
        for pointer in pieces[0::2]:
            plugin.free(pointer, 32 * MiB, 0, STREAM_A)
        reserved = plugin.memory_stats(0)["reserved_bytes.all.current"]
        large = plugin.alloc(96 * MiB, 0, STREAM_A)
        stats = plugin.memory_stats(0)
        self.assertEqual(stats["reserved_bytes.all.current"], reserved)  # the three holes, aliased
        self.assertEqual(stats["allocated_bytes.all.current"], 192 * MiB)
        check_tiling(self, {"segments": plugin.segments(0)})
        plugin.free(large, 96 * MiB, 0, STREAM_A)
        for pointer in pieces[1::2]:
            plugin.free(pointer, 32 * MiB, 0, STREAM_A)
        plugin.empty_cache()
        self.assertEqual(plugin.memory_stats(0)["reserved_bytes.all.current"], 0)
        self.assertEqual(plugin.segments(0), [])


class BadFrees(unittest.TestCase):
    """A free the plugin cannot honour is refused with the pointer and the reason, and changes
    nothing, in every build (a plugin built with assertions used to abort the process)."""

    @in_own_process()
    def test_a_second_free_or_an_unknown_pointer_is_refused(self):
        for preset in ("caching", "expandable"):
            with self.subTest(preset=preset):
                plugin = fresh_plugin()
                plugin.configure(preset, {})
                freed, kept = plugin.alloc(1000, 0, STREAM_A), plugin.alloc(3 * MiB, 0, STREAM_A)
                plugin.free(freed, 1000, 0, STREAM_A)
                before = plugin.memory_stats(0)
                for pointer, device, why in ((freed, 0, "freed twice"), (0x7000000, 0, "never allocated"),
                                             (kept, 1, "another device's")):
                    with self.subTest(why):
                        with self.assertRaisesRegex(poolkit.PoolkitError, f"free of {pointer:#x} on device {device}: not a live block"):
                            plugin.free(pointer, 1000 if pointer == freed else 3 * MiB, device, STREAM_A)
                        self.assertEqual(plugin.memory_stats(0), before)
                self.assertEqual(before["allocation.all.current"], 1)
                self.assertGreaterEqual(before["allocated_bytes.all.current"], 3 * MiB)
                plugin.free(kept, 3 * MiB, 0, STREAM_A)
                self.assertEqual(plugin.memory_stats(0)["allocated_bytes.all.current"], 0)

    @in_own_process()
    def test_an_interior_pointer_or_another_size_is_refused_and_the_block_stays_freeable(self):
        for preset in ("caching", "expandable"):
            with self.subTest(preset=preset):
                plugin = fresh_plugin()
                plugin.configure(preset, {})
                pointer = plugin.alloc(3000, 0, STREAM_A)
                before = plugin.memory_stats(0)
                with self.assertRaisesRegex(poolkit.PoolkitError,
                                            rf"free of {pointer + 512:#x} on device 0: inside the block at {pointer:#x} \(3000 bytes\), not its start"):
                    plugin.free(pointer + 512, 3000 - 512, 0, STREAM_A)
                with self.assertRaisesRegex(poolkit.PoolkitError, rf"free of {pointer:#x} with 1000 bytes on device 0: the block was allocated with 3000"):
                    plugin.free(pointer, 1000, 0, STREAM_A)
                for size in (0, -1):
                    with self.assertRaisesRegex(poolkit.PoolkitError, rf"free of {pointer:#x} with {size} bytes"):
                        plugin.free(pointer, size, 0, STREAM_A)
                self.assertEqual(plugin.memory_stats(0), before)
                states = {b["address"]: b["state"] for s in plugin.segments(0) for b in s["blocks"]}
                self.assertEqual(states[pointer], "active_allocated")
                plugin.free(pointer, 3000, 0, STREAM_A)  # the block was not lost
                stats = plugin.memory_stats(0)
                self.assertEqual((stats["allocation.all.current"], stats["allocated_bytes.all.current"]), (0, 0))


class RecordStream(unittest.TestCase):
    @in_own_process()
    def test_record_stream_of_a_pointer_that_is_no_live_block_is_an_error(self):
        plugin = fresh_plugin()
        pointer = plugin.alloc(MiB, 0, STREAM_A)
        plugin.record_stream(pointer, 0, STREAM_B)
        plugin.record_stream(0, 0, STREAM_B)  # an empty tensor's: nothing to do
        with self.assertRaisesRegex(poolkit.PoolkitError, rf"record_stream of {pointer + 256:#x} on device 0: inside the block at {pointer:#x}"):
            plugin.record_stream(pointer + 256, 0, STREAM_B)
        with self.assertRaisesRegex(poolkit.PoolkitError, "record_stream of 0x7000000 on device 0: not a live block"):
            plugin.record_stream(0x7000000, 0, STREAM_B)
        with self.assertRaisesRegex(poolkit.PoolkitError, rf"record_stream of {pointer:#x} on device 1: not a live block \(nothing was allocated there\)"):
            plugin.record_stream(pointer, 1, STREAM_B)
        plugin.free(pointer, MiB, 0, STREAM_A)
        with self.assertRaisesRegex(poolkit.PoolkitError, "not a live block"):
            plugin.record_stream(pointer, 0, STREAM_B)
        self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 0)


class GraphPools(unittest.TestCase):
    @in_own_process()
    def test_capture_into_needs_a_stream_in_capture_and_release_of_no_pool_does_nothing(self):
        plugin = fresh_plugin()
        pointer = plugin.alloc(MiB, 0, STREAM_A)
        with self.assertRaisesRegex(poolkit.PoolkitError, "capture_into of a stream not in capture"):
            plugin.capture_into(0, STREAM_A, 1 << 62)
        plugin.release_graph_pool(0, 1 << 62)  # no graph pool of that name: nothing to do
        with self.assertRaisesRegex(poolkit.PoolkitError, "no device 7"):
            plugin.capture_into(7, STREAM_A, 1)
        with self.assertRaisesRegex(poolkit.PoolkitError, "no device 7"):
            plugin.release_graph_pool(7, 1)
        plugin.free(pointer, MiB, 0, STREAM_A)
        self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 0)

    def test_capture_checks_take_two_modes_and_refuse_others(self):
        plugin = fresh_plugin()
        self.assertEqual(plugin.capture_checks, "every_call")
        plugin.set_capture_checks("announced")  # before the first pool: applied when it is made
        pointer = plugin.alloc(MiB, 0, STREAM_A)
        self.assertEqual(plugin.capture_checks, "announced")
        with self.assertRaisesRegex(poolkit.PoolkitError, r'capture checks "sometimes" \(expected every_call or announced\)'):
            plugin.set_capture_checks("sometimes")
        self.assertEqual(plugin.capture_checks, "announced")
        plugin.announce_capture(True)
        plugin.free(pointer, MiB, 0, STREAM_A)
        plugin.announce_capture(False)
        plugin.set_capture_checks("every_call")
        self.assertEqual(plugin.capture_checks, "every_call")

    def test_captures_are_asked_about_at_every_call_once_a_frontend_cannot_announce_them(self):
        plugin = fresh_plugin()
        plugin.frontend_captures(announced=True)
        self.assertEqual(plugin.capture_checks, "announced")
        plugin.frontend_captures(announced=False)
        self.assertEqual(plugin.capture_checks, "every_call")
        plugin.frontend_captures(announced=True)  # the other frontend still cannot
        self.assertEqual(plugin.capture_checks, "every_call")

    def test_pytorchs_capture_checks_come_from_the_environment(self):
        from unittest import mock
        import poolkit.torch
        for value, announced in ((None, True), ("announced", True), ("every_call", False)):
            environment = {} if value is None else {"POOLKIT_CAPTURE_CHECKS": value}
            with self.subTest(value=value), mock.patch.dict(os.environ, environment):
                if value is None:
                    os.environ.pop("POOLKIT_CAPTURE_CHECKS", None)
                self.assertEqual(poolkit.torch._captures_announced(), announced)
        with mock.patch.dict(os.environ, {"POOLKIT_CAPTURE_CHECKS": "sometimes"}):
            with self.assertRaisesRegex(poolkit.PoolkitError, "POOLKIT_CAPTURE_CHECKS=sometimes .expected announced or every_call"):
                poolkit.torch._captures_announced()

    def test_the_hooks_extension_is_handed_every_function_it_calls(self):
        addresses = fresh_plugin().addresses(_torch_hooks.FUNCTIONS)
        self.assertEqual(set(addresses), set(_torch_hooks.FUNCTIONS))
        self.assertEqual(len(set(addresses.values())), len(_torch_hooks.FUNCTIONS))
        self.assertNotIn(None, addresses.values())
        self.assertNotIn(0, addresses.values())

    def test_a_stream_declared_lasting_keeps_being_served(self):
        plugin = fresh_plugin()
        plugin.lasting_stream(STREAM_B)
        plugin.lasting_stream(STREAM_B)  # again: nothing changes
        plugin.lasting_stream(0)  # the default stream needs no declaring
        pointer = plugin.alloc(MiB, 0, STREAM_B)
        plugin.free(pointer, MiB, 0, STREAM_B)
        self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 0)


class MemoryFraction(unittest.TestCase):
    """torch.cuda.set_per_process_memory_fraction's cap on what a device's pool reserves."""

    def check_cap(self, preset):
        plugin = fresh_plugin(memory=GiB)
        plugin.configure(preset, {})
        plugin.set_memory_fraction(0.25, 0)  # before the pool is made: applied when it is
        first = plugin.alloc(200 * MiB, 0, STREAM_A)
        with self.assertRaisesRegex(MemoryError, "out of memory"):
            plugin.alloc(100 * MiB, 0, STREAM_A)
        self.assertLessEqual(plugin.memory_stats(0)["reserved_bytes.all.peak"], 256 * MiB)
        plugin.free(first, 200 * MiB, 0, STREAM_A)
        second = plugin.alloc(100 * MiB, 0, STREAM_A)  # the cache is returned first where it must be
        plugin.set_memory_fraction(0.05, 0)  # below what is reserved: only growth stops
        with self.assertRaisesRegex(MemoryError, "out of memory"):
            plugin.alloc(200 * MiB, 0, STREAM_A)  # more than the reserved memory has free
        plugin.set_memory_fraction(1.0, 0)
        third = plugin.alloc(600 * MiB, 0, STREAM_A)
        plugin.free(second, 100 * MiB, 0, STREAM_A)
        plugin.free(third, 600 * MiB, 0, STREAM_A)
        self.assertEqual(plugin.memory_stats(0)["allocation.all.current"], 0)

    @in_own_process()
    def test_caching(self):
        self.check_cap("caching")

    @in_own_process()
    def test_expandable(self):
        self.check_cap("expandable")

    @in_own_process()
    def test_a_fraction_outside_0_to_1_or_an_unknown_device_is_refused(self):
        plugin = fresh_plugin()
        for fraction in (-0.1, 1.5, float("nan")):
            with self.assertRaisesRegex(poolkit.PoolkitError, "expected a number from 0 to 1"):
                plugin.set_memory_fraction(fraction, 0)
        with self.assertRaisesRegex(poolkit.PoolkitError, "no device 7"):
            plugin.set_memory_fraction(0.5, 7)
        plugin.set_memory_fraction(0.0, 1)
        with self.assertRaisesRegex(MemoryError, "out of memory"):
            plugin.alloc(MiB, 1, STREAM_A)
        plugin.free(plugin.alloc(MiB, 0, STREAM_A), MiB, 0, STREAM_A)  # device 0 is not capped


class Environment(unittest.TestCase):
    # 4 GiB of address space: a plugin that believes 2147483647 devices runs out at once instead
    # of filling 16 GiB (no pool is made, so the simulated memory reserves no address space).
    @in_own_process(address_space=4 * GiB)
    def test_a_device_count_that_is_not_one_is_an_error_not_an_abort(self):
        for value in ("abc", "3x", "-1", "1025", "2147483647", "99999999999999999999"):
            with self.subTest(value=value):
                plugin = fresh_plugin(devices=value, read_devices=False)
                message = rf"POOLKIT_SIMULATED_DEVICES={value} is not a count from 0 to 1024"
                with self.assertRaisesRegex(poolkit.PoolkitError, message):
                    plugin.device_count
                with self.assertRaisesRegex(poolkit.PoolkitError, message):
                    plugin.alloc(MiB, 0, STREAM_A)
                with self.assertRaisesRegex(poolkit.PoolkitError, message):
                    plugin.memory_stats(0)
                with self.assertRaisesRegex(poolkit.PoolkitError, message):
                    plugin.capture_checks
                with self.assertRaisesRegex(poolkit.PoolkitError, message):
                    plugin.set_capture_checks("announced")
        self.assertEqual(fresh_plugin(devices=1024).device_count, 1024)
        self.assertEqual(fresh_plugin(devices=0).device_count, 0)

    def test_a_device_memory_that_is_not_one_is_an_error(self):
        for value in ("lots", "0", 2 * MiB - 1, (4 << 40) + 1, 1 << 63):
            with self.subTest(value=value):
                plugin = fresh_plugin(memory=value)
                with self.assertRaisesRegex(poolkit.PoolkitError, f"POOLKIT_SIMULATED_MEMORY={value} is not a count from {2 * MiB} to {4 << 40}"):
                    plugin.alloc(MiB, 0, STREAM_A)


class OptionsCheckedWhenSet(unittest.TestCase):
    """A value the pool would refuse is refused by poolkit_set_option, naming the option and the
    rule, and leaves the options as they were: not as a NULL at the first allocation, which
    PyTorch reports as out of memory."""

    REFUSED = (
        ("caching", "rounding", 3, r"caching_options.rounding must be a power of two"),
        ("caching", "rounding", 0, r"caching_options.rounding must be a power of two"),
        ("caching", "power2_divisions", 3, r"caching_options.power2_divisions must be 0, 1 or a power of two"),
        ("caching", "small_chunk", 0, r"caching_options.small_chunk must be positive"),
        ("caching", "small_size", 4 * MiB, r"caching_options.small_chunk \(2097152\) must hold a small request: at least small_size \(4194304\)"),
        ("expandable", "mapping_bytes", 3, r"expandable_options.mapping_bytes must be 0 or a power of two"),
        ("expandable", "span_bytes", 2**64 - 1, r"expandable_options.span_bytes must be at most 2\^48 bytes"),
        ("expandable", "small_size", 2**63, r"expandable_options.small_size must be at most 2\^48 bytes"),
        ("expandable", "rounding", 4 * MiB, r"expandable_options.rounding must be a power of two of at most a granule \(2097152 bytes\)"),
        ("expandable", "cache_fraction", float("inf"), r"expandable_options.cache_fraction must be a finite number of at least 0"),
        ("expandable", "cache_fraction", float("nan"), r"expandable_options.cache_fraction must be a finite number"),
        ("expandable", "peak_slack", float("nan"), r"expandable_options.peak_slack must be at least 0, or infinity"),
        ("expandable", "max_peak_slack", float("nan"), r"expandable_options.max_peak_slack must be at least 0, or infinity"),
    )

    def test_values_the_pool_would_refuse_are_refused_when_set(self):
        for preset, name, value, rule in self.REFUSED:
            with self.subTest(preset=preset, name=name, value=value):
                plugin = fresh_plugin(memory=GiB)
                with self.assertRaisesRegex(poolkit.PoolkitError, rf"option {name}={value!r} refused: {rule}"):
                    plugin.configure(preset, {name: value})
                pointer = plugin.alloc(5 * MiB, 0, STREAM_A)  # the options set before still make a pool
                plugin.free(pointer, 5 * MiB, 0, STREAM_A)

    def test_a_refused_value_leaves_the_options_as_they_were(self):
        plugin = fresh_plugin()
        lib = plugin._lib
        self.assertEqual(lib.poolkit_set_allocator(b"caching"), 0)
        self.assertEqual(lib.poolkit_set_option(b"large_chunk", b"0"), 0)
        self.assertEqual(lib.poolkit_set_option(b"rounding", b"3"), -1)
        self.assertIn(b"option rounding=3 refused", lib.poolkit_last_error())
        pointer = plugin.alloc(5 * MiB, 0, STREAM_A)
        self.assertEqual(plugin.memory_stats(0)["reserved_bytes.all.current"], 6 * MiB)  # large_chunk=0 kept; 512 B rounding
        plugin.free(pointer, 5 * MiB, 0, STREAM_A)

    def test_options_that_depend_on_each_other_are_checked_in_the_order_set(self):
        plugin = fresh_plugin()
        plugin.configure("caching", {"small_chunk": 8 * MiB, "small_size": 4 * MiB})
        pointer = plugin.alloc(3 * MiB, 0, STREAM_A)  # a small request now: one 8 MiB small chunk
        self.assertEqual(plugin.memory_stats(0)["reserved_bytes.all.current"], 8 * MiB)
        plugin.free(pointer, 3 * MiB, 0, STREAM_A)

    def test_values_at_the_bounds_are_taken(self):
        plugin = fresh_plugin()
        plugin.configure("expandable", {"span_bytes": 2**48, "mapping_bytes": 2**48, "rounding": 2 * MiB, "cache_fraction": 0.0,
                                        "peak_slack": float("inf"), "max_peak_slack": float("inf")})
        self.assertEqual(plugin.allocator, "expandable")


class Frontend(unittest.TestCase):
    """The module functions of poolkit.torch / poolkit.cupy, with the framework's current device
    replaced by device 0."""

    def setUp(self):
        self.plugin = fresh_plugin()
        self.saved, _plugin._loaded = _plugin._loaded, self.plugin
        self.front = _frontend.Frontend(lambda: 0)

    def tearDown(self):
        _plugin._loaded = self.saved

    def test_functions_read_the_plugin(self):
        pointer = self.plugin.alloc(5 * MiB, 0, STREAM_A)
        self.assertEqual(self.front.memory_allocated(), self.plugin.memory_stats(0)["allocated_bytes.all.current"])
        self.assertEqual(list(self.front.memory_stats()), sorted(self.front.memory_stats()))
        self.assertGreaterEqual(self.front.memory_reserved(), self.front.memory_allocated())
        self.assertEqual(self.front.max_memory_allocated(0), self.front.memory_allocated(0))
        self.plugin.free(pointer, 5 * MiB, 0, STREAM_A)
        self.front.reset_peak_memory_stats()
        self.assertEqual(self.front.max_memory_allocated(), 0)
        self.assertEqual(self.front.memory_allocated(1), 0)  # no pool on device 1
        self.front.empty_cache()
        self.assertEqual(self.front.memory_reserved(), 0)
        self.assertGreater(self.front.max_memory_reserved(), 0)  # a peak stays until reset
        self.assertEqual(self.front.memory_stats()["allocation.all.allocated"], 1)
        self.front.reset_accumulated_memory_stats(0)
        self.assertEqual(self.front.memory_stats()["allocation.all.allocated"], 0)
        self.assertEqual(self.front.memory_stats()["num_device_free"], 0)

    def test_history_is_off_until_recorded_and_bounded(self):
        self.plugin.free(self.plugin.alloc(MiB, 0, STREAM_A), MiB, 0, STREAM_A)
        self.assertEqual(self.front.snapshot()["device_traces"], [[], []])
        self.front.record_memory_history(max_entries=5)
        a = self.plugin.alloc(MiB, 0, STREAM_A)
        self.plugin.free(a, MiB, 0, STREAM_A)
        b = self.plugin.alloc(3 * MiB, 1, STREAM_B)
        traces = self.front.snapshot()["device_traces"]
        self.assertEqual([e["action"] for e in traces[0]], ["alloc", "free_requested", "free_completed"])
        self.assertEqual([(e["addr"], e["size"], e["stream"]) for e in traces[0]], [(a, MiB, STREAM_A)] * 3)
        self.assertEqual(sorted(traces[1][-1]), ["action", "addr", "frames", "size", "stream", "time_us"])
        self.assertEqual(traces[1][-1]["action"], "alloc")
        self.assertIn("segment_alloc", [e["action"] for e in traces[1]])  # device 1's first pool chunk
        self.assertTrue(all(e["frames"] == [] for trace in traces for e in trace))  # no labeller: no stacks
        for _ in range(4):
            self.plugin.free(self.plugin.alloc(MiB, 0, STREAM_A), MiB, 0, STREAM_A)
        self.assertEqual(len(self.front.snapshot()["device_traces"][0]), 5)  # the newest max_entries
        with self.assertRaises(MemoryError):
            self.plugin.alloc(1 << 60, 0, STREAM_A)
        refused = self.front.snapshot()["device_traces"][0][-1]
        self.assertEqual((refused["action"], refused["size"]), ("oom", 1 << 60))
        self.assertIn("device_free", refused)
        self.front.record_memory_history("state")
        self.assertEqual(self.front.snapshot()["device_traces"], [[], []])  # state: no trace shown
        self.front.record_memory_history(None)
        self.plugin.free(b, 3 * MiB, 1, STREAM_B)
        self.assertEqual(self.plugin.history(1), [])
        with self.assertRaisesRegex(ValueError, "enabled='yes'"):
            self.front.record_memory_history("yes")

    def test_history_labels_become_frames(self):
        import ctypes
        front = self.front
        label_type = ctypes.CFUNCTYPE(ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_int)
        release_type = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ulonglong)

        class Stacks:  # what poolkit.torch's extension does: labels through the C ABI, frames from labels
            def __init__(self):
                self.asked, self.next = None, 0
                self.callbacks = (label_type(self.label), release_type(lambda _user, _label: None))

            def label(self, _user, action):
                if action != 0:  # allocs only
                    return 0
                self.next += 1
                return self.next

            def record_history(self, entries, python, cpp, frees):
                self.asked = (entries, python, cpp, frees)
                callbacks = _plugin._HistoryCallbacks(ctypes.cast(self.callbacks[0], ctypes.c_void_p),
                                                      ctypes.cast(self.callbacks[1], ctypes.c_void_p), None)
                self.assert_ok(_plugin.load()._lib.poolkit_record_history(entries, callbacks))

            def assert_ok(self, status):
                assert status == 0, _plugin.load()._lib.poolkit_last_error()

            def history_frames(self, labels):
                return [[{"filename": "x.py", "line": label, "name": "f"}] if label else [] for label in labels]

        front.stacks = Stacks()
        front.record_memory_history(context="alloc", stacks="python", max_entries=100)
        self.assertEqual(front.stacks.asked, (100, True, False, False))
        front.record_memory_history(context=None)
        self.assertEqual(front.stacks.asked[1:], (False, False, False))
        front.record_memory_history()
        self.assertEqual(front.stacks.asked[0], sys.maxsize)
        pointer = self.plugin.alloc(MiB, 0, STREAM_A)
        snapshot = front.snapshot()
        allocs = [e for e in snapshot["device_traces"][0] if e["action"] == "alloc"]
        self.assertEqual([(e["addr"], e["frames"]) for e in allocs], [(pointer, [{"filename": "x.py", "line": 1, "name": "f"}])])
        live = [b for s in snapshot["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
        self.assertEqual([(b["address"], b["frames"]) for b in live], [(pointer, allocs[0]["frames"])])  # the live block's stack
        self.plugin.free(pointer, MiB, 0, STREAM_A)
        front.record_memory_history(None)

    def test_snapshot_has_pytorchs_structure(self):
        pointers = [(self.plugin.alloc(size, device, STREAM_A), size, device) for size, device in ((MiB, 0), (7 * MiB, 1))]
        snapshot = self.front.snapshot()
        self.assertEqual(set(snapshot), {"segments", "device_traces", "allocator_settings", "external_annotations"})
        self.assertEqual(snapshot["device_traces"], [[], []])
        self.assertEqual({s["device"] for s in snapshot["segments"]}, {0, 1})
        for segment in snapshot["segments"]:
            self.assertEqual(list(segment), ["device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                                             "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"])
            self.assertFalse(segment["is_expandable"])
            for block in segment["blocks"]:
                self.assertEqual(list(block), ["address", "size", "requested_size", "state", "frames"])
        check_tiling(self, snapshot)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "snap.pickle")
            self.front.dump_snapshot(path)
            with open(path, "rb") as f:
                self.assertEqual(pickle.load(f), snapshot)
        for pointer, size, device in pointers:
            self.plugin.free(pointer, size, device, STREAM_A)


class Loading(unittest.TestCase):
    def test_a_missing_plugin_says_how_to_get_one(self):
        saved = os.environ.pop("POOLKIT_PLUGIN", None)
        try:
            os.environ["POOLKIT_PLUGIN"] = "/nonexistent/libpoolkit_plugin.so"
            with self.assertRaisesRegex(poolkit.PoolkitError, "names no file"):
                poolkit.find_plugin()
            del os.environ["POOLKIT_PLUGIN"]
            if not os.path.isfile(os.path.join(os.path.dirname(poolkit.__file__), "libpoolkit_plugin.so")):
                with self.assertRaisesRegex(poolkit.PoolkitError, "pip install ./python"):
                    poolkit.find_plugin()
        finally:
            if saved is not None:
                os.environ["POOLKIT_PLUGIN"] = saved

    def test_a_file_that_is_not_the_plugin_is_refused(self):
        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(b"not a library")
            f.flush()
            with self.assertRaisesRegex(poolkit.PoolkitError, "cannot load"):
                _plugin.Plugin(f.name)

    def test_a_framework_that_is_not_installed_is_named(self):
        import poolkit.cupy
        import poolkit.torch
        for module, name in ((poolkit.torch, "torch"), (poolkit.cupy, "cupy")):
            saved = sys.modules.get(name)
            sys.modules[name] = None  # what an import then raises: ModuleNotFoundError, as where it is missing
            try:
                with self.assertRaisesRegex(poolkit.PoolkitError, f"needs .*install {name}"):
                    module.use("caching")
                self.assertIsNone(module.in_use())
            finally:
                if saved is None:
                    del sys.modules[name]
                else:
                    sys.modules[name] = saved

    def test_unknown_presets_are_refused_before_a_framework_is_imported(self):
        import poolkit.cupy
        import poolkit.torch
        for module in (poolkit.torch, poolkit.cupy):
            with self.assertRaisesRegex(poolkit.PoolkitError, r"no preset 'fast' \(expected one of caching, expandable\)"):
                module.use("fast")
            self.assertIsNone(module.in_use())

    def test_a_bad_capture_check_setting_is_refused_before_torch_is_imported(self):
        from unittest import mock
        import poolkit.torch
        with mock.patch.dict(os.environ, {"POOLKIT_CAPTURE_CHECKS": "never"}), \
                mock.patch.object(poolkit.torch, "_torch", side_effect=AssertionError("torch imported")):
            with self.assertRaisesRegex(poolkit.PoolkitError, "POOLKIT_CAPTURE_CHECKS=never"):
                poolkit.torch.use()
        self.assertIsNone(poolkit.torch.in_use())

    def test_capabilities_say_nothing_reaches_poolkit_before_use(self):
        import poolkit.torch
        capabilities = poolkit.torch.capabilities()
        self.assertFalse(any(v for v in capabilities.values() if isinstance(v, bool)))
        self.assertEqual(capabilities["why"], "use() has not run")
        self.assertIn("mem_pool", capabilities["not_wired"])
        self.assertNotIn("record_memory_history", capabilities["not_wired"])

    def test_torchs_snapshot_functions_answer_with_poolkits(self):
        import types
        import poolkit.torch
        plugin = fresh_plugin()
        saved, _plugin._loaded = _plugin._loaded, plugin
        original = poolkit.torch.snapshot
        try:
            poolkit.torch.snapshot = _frontend.Frontend(lambda: 0).snapshot
            pointer = plugin.alloc(3 * MiB, 0, STREAM_A)
            torch = types.SimpleNamespace(cuda=types.SimpleNamespace(memory=types.SimpleNamespace()))
            poolkit.torch._route_snapshots(torch)
            snapshot = torch.cuda.memory._snapshot()
            self.assertEqual(snapshot, poolkit.torch.snapshot())
            self.assertEqual(torch.cuda.memory.memory_snapshot(), snapshot["segments"])
            self.assertEqual(torch.cuda.memory_snapshot(None), snapshot["segments"])
            self.assertIn(pointer, [b["address"] for s in snapshot["segments"] for b in s["blocks"]])
            plugin.free(pointer, 3 * MiB, 0, STREAM_A)
        finally:
            poolkit.torch.snapshot = original
            _plugin._loaded = saved

    def test_the_hooks_extension_can_be_turned_off(self):
        saved = os.environ.get("POOLKIT_TORCH_HOOKS")
        os.environ["POOLKIT_TORCH_HOOKS"] = "0"
        try:
            self.assertEqual(_torch_hooks.load(torch=None), (None, "POOLKIT_TORCH_HOOKS=0"))
        finally:
            if saved is None:
                del os.environ["POOLKIT_TORCH_HOOKS"]
            else:
                os.environ["POOLKIT_TORCH_HOOKS"] = saved


if __name__ == "__main__":
    unittest.main()
