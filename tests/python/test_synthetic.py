"""bench/traces/synthetic.py: each family writes a well-formed trace (every free names a live
allocation with its size, nothing is left live), the multi-stream ones over four streams with
frees on other streams, the same bytes every time, and poolkit-replay reads it where
POOLKIT_TEST_REPLAY names the tool."""
import csv
import gzip
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("synthetic", os.path.join(_ROOT, "bench", "traces", "synthetic.py"))
synthetic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(synthetic)


class SyntheticTraces(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_every_family_is_well_formed(self):
        for family in synthetic.FAMILIES:
            with self.subTest(family=family):
                events = synthetic.write(family, self.path(f"{family}.csv.gz"))
                with gzip.open(self.path(f"{family}.csv.gz"), "rt", newline="") as f:
                    rows = list(csv.DictReader(f))
                self.assertEqual(len(rows), events)
                live = {}
                for row in rows:
                    size = int(row["Size"])
                    self.assertEqual(size % 512, 0)
                    if row["Action"] == "allocate":
                        self.assertNotIn(row["Pointer"], live)
                        live[row["Pointer"]] = size
                    else:
                        self.assertEqual(row["Action"], "free")
                        self.assertEqual(live.pop(row["Pointer"]), size)
                self.assertEqual(live, {})

    def test_the_multi_stream_families_free_across_streams(self):
        for family in ("pipeline", "sharded_training"):
            with self.subTest(family=family):
                synthetic.write(family, self.path(f"{family}.csv.gz"))
                with gzip.open(self.path(f"{family}.csv.gz"), "rt", newline="") as f:
                    rows = list(csv.DictReader(f))
                made_on, across = {}, 0
                for row in rows:
                    if row["Action"] == "allocate":
                        made_on[row["Pointer"]] = row["Stream"]
                    elif made_on.pop(row["Pointer"]) != row["Stream"]:
                        across += 1
                self.assertEqual(len({row["Stream"] for row in rows}), 4)
                self.assertGreater(across, 0)
        # The single-stream families keep every event on the default stream.
        synthetic.write("generation", self.path("generation.csv.gz"))
        with gzip.open(self.path("generation.csv.gz"), "rt", newline="") as f:
            self.assertEqual({row["Stream"] for row in csv.DictReader(f)}, {"0"})

    def test_the_same_bytes_every_time(self):
        synthetic.write("varlen_training", self.path("a.csv.gz"))
        synthetic.write("varlen_training", self.path("b.csv.gz"))
        with open(self.path("a.csv.gz"), "rb") as a, open(self.path("b.csv.gz"), "rb") as b:
            self.assertEqual(a.read(), b.read())

    def test_other_seeds_draw_other_traces_of_the_same_shape(self):
        def rows(path):
            with gzip.open(path, "rt", newline="") as f:
                return list(csv.DictReader(f))
        bundled = synthetic.write("varlen_training", self.path("a.csv.gz"))
        seeded = synthetic.write("varlen_training", self.path("b.csv.gz"), seed="1")
        longer = synthetic.write("varlen_training", self.path("c.csv.gz"), varlen_steps=48)
        self.assertNotEqual(rows(self.path("a.csv.gz")), rows(self.path("b.csv.gz")))
        self.assertGreater(longer, 2 * bundled)
        self.assertGreater(seeded, 0)
        main = os.path.join(_ROOT, "bench", "traces", "synthetic.py")
        done = subprocess.run([sys.executable, main, self.dir.name, "--family", "kv_serving", "--seed", "2"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertTrue(os.path.exists(self.path("kv_serving_s2.csv.gz")))
        refused = subprocess.run([sys.executable, main, self.dir.name, "--varlen-steps", "0"], capture_output=True, text=True)
        self.assertEqual(refused.returncode, 2)
        self.assertIn("--varlen-steps must be at least 1", refused.stderr)

    @unittest.skipUnless(os.environ.get("POOLKIT_TEST_REPLAY"), "POOLKIT_TEST_REPLAY does not name poolkit-replay")
    def test_replayed_by_poolkit_replay(self):
        synthetic.write("multiscale_vision", self.path("multiscale_vision.csv.gz"))
        run = subprocess.run([os.environ["POOLKIT_TEST_REPLAY"], "--no-progress", "--composition", "expandable,caching",
                              self.path("multiscale_vision.csv.gz")], capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("multiscale_vision", run.stdout)


if __name__ == "__main__":
    unittest.main()
