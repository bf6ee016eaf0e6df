"""poolkit.replay: a PyTorch memory snapshot's history as poolkit's trace format, and replayed by
poolkit-replay (where ctest passes POOLKIT_TEST_REPLAY). Most snapshots are written here in
PyTorch's structure (torch.cuda.memory._snapshot()); those of tests/python/snapshots/ are real
programs' (RecordedPrograms)."""
import gzip
import json
import io
import os
import pickle
import subprocess
import sys
import tempfile
import unittest
from contextlib import redirect_stderr

import poolkit
from poolkit import replay

MiB = 1 << 20
S1, S2 = 0x5000, 0x6000  # stream handles, as PyTorch records them


def entry(action, address, size, stream=S1, time_us=0):
    return {"action": action, "addr": address, "size": size, "stream": stream, "time_us": time_us, "frames": []}


def snapshot(*device_traces, segments=()):
    return {"segments": list(segments), "device_traces": [list(t) for t in device_traces],
            "allocator_settings": {}, "external_annotations": []}


# A short program on device 0: two blocks, one freed on its stream; PyTorch's own entries beside.
PROGRAM = [
    entry("segment_alloc", 0x7000_0000, 20 * MiB, time_us=1000),
    entry("alloc", 0x7000_0000, 4 * MiB, time_us=1001),
    entry("alloc", 0x7040_0000, 2 * MiB, S2, time_us=1002),
    entry("free_requested", 0x7000_0000, 4 * MiB, time_us=2003),
    entry("free_completed", 0x7000_0000, 4 * MiB, time_us=2004),
    entry("alloc", 0x7000_0000, 3 * MiB, time_us=3000500),
]


def read_trace(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return f.read().splitlines()


class Convert(unittest.TestCase):
    def test_allocations_and_requested_frees_in_order(self):
        rows, report = replay.convert(snapshot(PROGRAM))
        self.assertEqual(rows, [(1, "allocate", 0x7000_0000, 4 * MiB, S1), (2, "allocate", 0x7040_0000, 2 * MiB, S2),
                                (1003, "free", 0x7000_0000, 4 * MiB, S1), (2999500, "allocate", 0x7000_0000, 3 * MiB, S1)])
        # The segment_alloc is PyTorch's own; the free_completed right after its request places nothing.
        self.assertEqual((report["allocations"], report["frees"], report["left_out"]), (3, 1, 1))

    def test_a_free_that_waited_for_other_streams_goes_where_it_took_effect(self):
        used_elsewhere = [entry("alloc", 0x1000, MiB, time_us=10), entry("free_requested", 0x1000, MiB, time_us=11),
                          entry("alloc", 0x9000, 2 * MiB, time_us=12),  # record_stream: 0x1000 still busy on S2
                          entry("free_completed", 0x1000, MiB, time_us=13), entry("alloc", 0x1000, 512, time_us=14),
                          entry("free_requested", 0x1000, 512, time_us=15)]  # never completed
        rows, report = replay.convert(snapshot(used_elsewhere))
        self.assertEqual(rows, [(0, "allocate", 0x1000, MiB, S1), (2, "allocate", 0x9000, 2 * MiB, S1),
                                (3, "free", 0x1000, MiB, S1), (4, "allocate", 0x1000, 512, S1)])
        self.assertEqual((report["frees"], report["frees_delayed"], report["pending_at_end"]), (2, 1, 1))
        self.assertIn("1 frees took effect after other streams' work", replay.describe(report))
        self.assertIn("1 frees still waiting on other streams at the end", replay.describe(report))
        # A block is reused only once its free completed: anything else is no history PyTorch wrote.
        early = used_elsewhere[:3] + [entry("alloc", 0x1000, 512, time_us=14), entry("free_completed", 0x1000, MiB, time_us=15)]
        with self.assertRaisesRegex(poolkit.PoolkitError, r"\[0\]\[3\]: alloc of 0x1000, which is freed but not yet completed"):
            replay.convert(snapshot(early))

    def test_frees_completing_together_are_not_delayed(self):
        # Two frees requested, then both completed: no allocation between, no delay to report.
        together = [entry("alloc", 0x1000, MiB), entry("alloc", 0x2000, MiB), entry("free_requested", 0x1000, MiB),
                    entry("free_requested", 0x2000, MiB), entry("free_completed", 0x1000, MiB),
                    entry("free_completed", 0x2000, MiB)]
        rows, report = replay.convert(snapshot(together))
        self.assertEqual([r[1:3] for r in rows[2:]], [("free", 0x1000), ("free", 0x2000)])
        self.assertEqual(report["frees_delayed"], 0)

    def test_a_history_with_no_completions_frees_where_requested(self):
        # PyTorch before 2.1 records no free_completed: the request is the free.
        rows, report = replay.convert(snapshot([entry("alloc", 0x1000, MiB), entry("alloc", 0x2000, MiB),
                                                entry("free_requested", 0x1000, MiB)]))
        self.assertEqual(rows[-1], (0, "free", 0x1000, MiB, S1))
        self.assertEqual((report["frees_delayed"], report["pending_at_end"]), (0, 0))

    def test_the_trace_format(self):
        with tempfile.TemporaryDirectory() as folder:
            for name in ("t.csv", "t.csv.gz"):
                path = os.path.join(folder, name)
                replay.write_trace(replay.convert(snapshot(PROGRAM))[0], path)
                lines = read_trace(path)
                self.assertEqual(lines[0], "Thread,Time,Action,Pointer,Size,Stream")
                self.assertEqual(lines[1], f"0,0.000001,allocate,0x70000000,{4 * MiB},{S1}")
                self.assertEqual(lines[4], f"0,2.999500,allocate,0x70000000,{3 * MiB},{S1}")

    def test_a_history_whose_start_was_dropped(self):
        dropped = [entry("free_requested", 0x9000_0000, MiB, time_us=5), entry("alloc", 0x9000_0000, 2 * MiB, time_us=6)]
        segments = [{"device": 0, "address": 0xA000_0000, "total_size": 2 * MiB, "stream": S2,
                     "blocks": [{"address": 0xA000_0000, "size": 2 * MiB, "state": "active_allocated"},
                                {"address": 0xA010_0000, "size": MiB, "state": "inactive"}]}]
        rows, report = replay.convert(snapshot(dropped, segments=segments))
        # Both blocks were alive from the start: allocated first, so that the peak counts them.
        self.assertEqual(rows[:2], [(0, "allocate", 0x9000_0000, MiB, S1), (0, "allocate", 0xA000_0000, 2 * MiB, S2)])
        self.assertEqual(rows[2:], [(0, "free", 0x9000_0000, MiB, S1), (1, "allocate", 0x9000_0000, 2 * MiB, S1)])
        self.assertEqual((report["freed_unseen"], report["alive_throughout"]), (1, 1))
        self.assertIn("are older than the history", replay.describe(report))

    def test_devices(self):
        two = snapshot(PROGRAM, [entry("alloc", 0x1000, 512)])
        with self.assertRaisesRegex(poolkit.PoolkitError, r"history on devices \[0, 1\]: choose one with --device"):
            replay.convert(two)
        self.assertEqual(replay.convert(two, 1)[0], [(0, "allocate", 0x1000, 512, S1)])
        with self.assertRaisesRegex(poolkit.PoolkitError, "no allocation history on device 2"):
            replay.convert(two, 2)
        with self.assertRaisesRegex(poolkit.PoolkitError, "record it with torch.cuda.memory._record_memory_history"):
            replay.convert(snapshot([]))

    def test_the_peak_of_live_bytes_as_asked_for_and_in_pytorchs_blocks(self):
        rows = [(0, "allocate", 1, 1, S1), (1, "allocate", 2, 600, S1), (2, "free", 1, 1, S1), (3, "allocate", 3, 1024, S1)]
        self.assertEqual(replay.peak_live_bytes(rows), 1624)
        self.assertEqual(replay.peak_live_bytes(rows, pytorch_blocks=True), 2048)  # 600 B takes a 1,024 B block

    def test_inconsistent_histories_are_refused_by_entry(self):
        twice = [entry("alloc", 0x1000, 512), entry("alloc", 0x1000, 512)]
        with self.assertRaisesRegex(poolkit.PoolkitError, r"device_traces\[0\]\[1\]: alloc of 0x1000, which is live already"):
            replay.convert(snapshot(twice))
        freed_twice = [entry("alloc", 0x1000, 512), entry("free_requested", 0x1000, 512), entry("free_requested", 0x1000, 512)]
        with self.assertRaisesRegex(poolkit.PoolkitError, r"\[0\]\[2\]: free of 0x1000, which was freed already"):
            replay.convert(snapshot(freed_twice))
        with self.assertRaisesRegex(poolkit.PoolkitError, r"device_traces\[0\]\[0\]: not a trace entry"):
            replay.convert(snapshot([{"action": "alloc"}]))


RECORDED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "snapshots")


class RecordedPrograms(unittest.TestCase):
    """Snapshots of real programs, recorded under PyTorch 2.11's own allocator on an H200 by
    python/checks/snapshots.py (its docstring says what each program does), gzipped, each with
    what PyTorch measured over the recorded steps (NAME.json)."""
    # allocations, frees, freed with no allocation seen, alive throughout, frees that took effect late
    EXPECTED = {
        "resnet18_stacks": (538, 538, 62, 187, 0),
        "resnet18_no_stacks": (538, 538, 62, 187, 0),
        "ring_overflow": (119, 140, 67, 203, 0),
        "record_stream": (79, 78, 0, 249, 6),
        "transformer_varlen": (1122, 1122, 52, 406, 0),
    }

    def load(self, name):
        with open(os.path.join(RECORDED, name + ".json")) as f:
            measured = json.load(f)
        rows, report = replay.convert(replay.load_snapshot(os.path.join(RECORDED, name + ".pickle.gz")))
        return rows, report, measured

    def test_each_history_is_read_whole(self):
        for name, expected in self.EXPECTED.items():
            with self.subTest(name):
                rows, report, _ = self.load(name)
                self.assertEqual((report["allocations"], report["frees"], report["freed_unseen"], report["alive_throughout"],
                                  report["frees_delayed"]), expected)
                self.assertEqual(report["pending_at_end"], 0)
                live = {}
                for _, action, address, size, _ in rows:  # every free returns a live block of its size
                    if action == "allocate":
                        self.assertNotIn(address, live)
                        live[address] = size
                    else:
                        self.assertEqual(live.pop(address), size)

    def test_live_bytes_agree_with_pytorchs_own_figures(self):
        # PyTorch counts its blocks' sizes, poolkit-replay the sizes asked for. A block PyTorch
        # leaves unsplit (the rest too small to keep) counts whole: within 1%.
        for name in ("resnet18_stacks", "resnet18_no_stacks", "record_stream", "transformer_varlen"):
            with self.subTest(name):
                rows, _, measured = self.load(name)
                self.assertLessEqual(replay.peak_live_bytes(rows, pytorch_blocks=True), measured["active_peak"])
                self.assertLessEqual(measured["active_peak"], replay.peak_live_bytes(rows, pytorch_blocks=True) * 1.01)
        # The six record_stream frees waited for the side stream: replayed where they took effect,
        # the peak is PyTorch's to the byte; where they were requested it would be below.
        rows, _, measured = self.load("record_stream")
        self.assertEqual(replay.peak_live_bytes(rows, pytorch_blocks=True), measured["active_peak"])
        self.assertGreater(measured["active_peak"], measured["max_memory_allocated"])
        # Where max_entries dropped the start, the steps' peak may be lost, never exceeded.
        rows, _, measured = self.load("ring_overflow")
        self.assertLessEqual(replay.peak_live_bytes(rows, pytorch_blocks=True), measured["active_peak"])

    def test_stacks_change_nothing_but_addresses(self):
        with_stacks, _, _ = self.load("resnet18_stacks")
        without, _, _ = self.load("resnet18_no_stacks")
        self.assertEqual([(action, size) for _, action, _, size, _ in with_stacks],
                         [(action, size) for _, action, _, size, _ in without])

    @unittest.skipUnless(os.environ.get("POOLKIT_TEST_REPLAY"), "poolkit-replay was not built (POOLKIT_TEST_REPLAY unset)")
    def test_replayed_under_poolkit(self):
        for name in self.EXPECTED:
            with self.subTest(name):
                rows, _, _ = self.load(name)
                result = subprocess.run([sys.executable, "-m", "poolkit.replay", os.path.join(RECORDED, name + ".pickle.gz"),
                                         "--replay", os.environ["POOLKIT_TEST_REPLAY"], "--",
                                         "--composition=caching,expandable", "--json", "--no-progress"],
                                        capture_output=True, text=True, check=False)
                self.assertEqual(result.returncode, 0, result.stderr)
                results = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
                self.assertEqual([r["composition"] for r in results], ["caching", "expandable"])
                for r in results:
                    self.assertEqual(r["peak_live_bytes"], replay.peak_live_bytes(rows))
                    self.assertGreaterEqual(r["ratio"], 1.0)


class CommandLine(unittest.TestCase):
    def run_main(self, *args):
        errors = io.StringIO()
        with redirect_stderr(errors):
            status = replay.main(list(args))
        return status, errors.getvalue()

    def test_files_that_are_no_snapshot(self):
        with tempfile.TemporaryDirectory() as folder:
            garbage = os.path.join(folder, "garbage.pickle")
            with open(garbage, "wb") as f:
                f.write(b"not a pickle")
            status, errors = self.run_main(garbage, "--convert", os.path.join(folder, "out.csv"))
            self.assertEqual(status, 2)
            self.assertIn("garbage.pickle: not a PyTorch memory snapshot", errors)
            other = os.path.join(folder, "other.pickle")
            with open(other, "wb") as f:
                pickle.dump({"segments": []}, f)
            self.assertIn("no device_traces", self.run_main(other, "--convert", os.path.join(folder, "out.csv"))[1])
            self.assertIn("no such file", self.run_main(os.path.join(folder, "missing.pickle"))[1])
            # Gzipped: garbage, and a real snapshot cut short.
            with gzip.open(garbage, "wb") as f:
                f.write(b"not a pickle")
            self.assertIn("garbage.pickle: not a PyTorch memory snapshot", self.run_main(garbage, "--convert", os.path.join(folder, "out.csv"))[1])
            with open(os.path.join(RECORDED, "record_stream.pickle.gz"), "rb") as f:
                whole = f.read()
            cut = os.path.join(folder, "cut.pickle.gz")
            with open(cut, "wb") as f:
                f.write(whole[:len(whole) // 2])
            status, errors = self.run_main(cut, "--convert", os.path.join(folder, "out.csv"))
            self.assertEqual((status, "cut.pickle.gz: not a PyTorch memory snapshot" in errors), (2, True), errors)
            self.assertFalse(os.path.exists(os.path.join(folder, "out.csv")))

    def test_convert_writes_the_trace_and_reports(self):
        with tempfile.TemporaryDirectory() as folder:
            path, out = os.path.join(folder, "snap.pickle"), os.path.join(folder, "snap.csv.gz")
            with open(path, "wb") as f:
                pickle.dump(snapshot(PROGRAM), f)
            status, errors = self.run_main(path, "--convert", out)
            self.assertEqual(status, 0)
            self.assertIn("device 0: 3 allocations, 1 frees", errors)
            self.assertEqual(len(read_trace(out)), 5)

    @unittest.skipUnless(os.environ.get("POOLKIT_TEST_REPLAY"), "poolkit-replay was not built (POOLKIT_TEST_REPLAY unset)")
    def test_replayed_by_poolkit_replay(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "program.pickle")
            with open(path, "wb") as f:
                pickle.dump(snapshot(PROGRAM), f)
            result = subprocess.run([sys.executable, "-m", "poolkit.replay", path, "--replay", os.environ["POOLKIT_TEST_REPLAY"],
                                     "--", "--composition=caching,best_fit", "--no-progress"],
                                    capture_output=True, text=True, check=False)
            self.assertEqual(result.returncode, 0, result.stderr)
            self.assertIn("program              caching", result.stdout)
            self.assertIn("best per trace", result.stdout)

    @unittest.skipUnless(os.environ.get("POOLKIT_TEST_REPLAY"), "poolkit-replay was not built (POOLKIT_TEST_REPLAY unset)")
    def test_the_layout_at_the_peak_for_pytorchs_viewer(self):
        with tempfile.TemporaryDirectory() as folder:
            path, out = os.path.join(folder, "program.pickle"), os.path.join(folder, "poolkit.pickle")
            with open(path, "wb") as f:
                pickle.dump(snapshot(PROGRAM), f)
            result = subprocess.run([sys.executable, "-m", "poolkit.replay", path, "--replay", os.environ["POOLKIT_TEST_REPLAY"],
                                     "--snapshot", out, "--", "--composition=expandable", "--no-progress"],
                                    capture_output=True, text=True, check=False)
            self.assertEqual(result.returncode, 0, result.stderr)
            with open(out, "rb") as f:
                layout = pickle.load(f)
            # The peak: the 4 MiB and 2 MiB blocks, live at once before the first free.
            live = sorted(b["size"] for s in layout["segments"] for b in s["blocks"] if b["state"] == "active_allocated")
            self.assertEqual(live, [2 * MiB, 4 * MiB])
            self.assertTrue(all(s["is_expandable"] and s["device"] == 0 for s in layout["segments"]))
            self.assertEqual(layout["allocator_settings"], {"poolkit_composition": "expandable"})
            self.assertEqual(layout["device_traces"], [[]])
            # The input as output, or a missing folder: refused before anything runs.
            status, errors = self.run_main(path, "--snapshot", path, "--replay", os.environ["POOLKIT_TEST_REPLAY"])
            self.assertEqual(status, 2)
            self.assertIn("is the input snapshot; refusing to write over it", errors)
            status, errors = self.run_main(path, "--snapshot", os.path.join(folder, "no", "such.pickle"))
            self.assertEqual((status, "does not exist" in errors), (2, True))
            # Several compositions have no one layout: poolkit-replay refuses, and nothing is written.
            refused = subprocess.run([sys.executable, "-m", "poolkit.replay", path, "--replay", os.environ["POOLKIT_TEST_REPLAY"],
                                      "--snapshot", os.path.join(folder, "none.pickle"), "--", "--composition=caching,expandable"],
                                     capture_output=True, text=True, check=False)
            self.assertEqual(refused.returncode, 2)
            self.assertIn("--snapshot takes one trace and one composition", refused.stderr)
            self.assertFalse(os.path.exists(os.path.join(folder, "none.pickle")))


if __name__ == "__main__":
    unittest.main()
