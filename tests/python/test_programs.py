"""python/checks/programs.py's and allocator_calls.py's bookkeeping, which needs no GPU: the order of
the allocators in each round and the paired ratios (each run against the PyTorch run of the same
round)."""
import json
import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "python", "checks"))
import allocator_calls  # noqa: E402
import allocators  # noqa: E402
import program_trace  # noqa: E402
import programs  # noqa: E402  (none imports torch at module level)


def exit_status(main, argv):
    """The status a script's main() exits with for the command line `argv` (SystemExit's code)."""
    saved, sys.argv = sys.argv, argv
    try:
        main()
    except SystemExit as stopped:
        return stopped.code
    finally:
        sys.argv = saved
    return None


class Rounds(unittest.TestCase):
    def test_each_round_starts_one_further_along(self):
        names = ["pytorch", "a", "b"]
        self.assertEqual(allocators.rotated(names, 0), ["pytorch", "a", "b"])
        self.assertEqual(allocators.rotated(names, 1), ["a", "b", "pytorch"])
        self.assertEqual(allocators.rotated(names, 4), ["a", "b", "pytorch"])

    def test_paired_ratios_cancel_a_slow_round(self):
        # The second round ran a quarter slower for everyone: the pairs do not see it.
        rounds = [{"pytorch": 20.0, "a": 21.0}, {"pytorch": 25.0, "a": 26.25}, {"pytorch": 20.0, "a": 20.0}]
        figures = programs.paired(rounds)
        self.assertEqual(figures["pytorch"], (1.0, 1.0, 1.0))
        median, least, most = figures["a"]
        self.assertAlmostEqual(median, 1.05)
        self.assertAlmostEqual(least, 1.0)
        self.assertAlmostEqual(most, 1.05)

    def test_step_ratios_pair_each_step_with_the_same_step_and_skip_two(self):
        # Steps of different lengths (drawn shapes) and two slow warm-up steps: a run a twentieth
        # slower on every step is 1.05 with no spread.
        reference = [90.0, 80.0, 10.0, 30.0, 20.0, 40.0]
        rounds = [{"pytorch": reference, "a": [9.0, 9.0] + [1.05 * t for t in reference[2:]]}] * 3
        figures = programs.paired_steps(rounds)
        self.assertEqual(figures["pytorch"], (1.0, 1.0, 1.0))
        for figure in figures["a"]:
            self.assertAlmostEqual(figure, 1.05)

    def test_the_step_interval_widens_with_noise_and_holds_the_median(self):
        noise = [0.8, 1.2, 0.9, 1.1, 1.0, 0.85, 1.15, 0.95, 1.05, 1.0]
        rounds = [{"pytorch": [1.0] * 12, "a": [1.0, 1.0] + [k * n for n in noise]} for k in (0.96, 1.0, 1.04)]
        median, low, high = programs.paired_steps(rounds)["a"]
        self.assertAlmostEqual(median, 1.0)
        self.assertLess(low, median)
        self.assertGreater(high, median)
        self.assertLess(low, 0.99)  # a round's drift and the steps' noise: 1.0 is within noise
        self.assertEqual(programs.paired_steps(rounds), programs.paired_steps(rounds))  # seeded

    def test_allocations_per_step_divide_each_run_by_the_steps(self):
        runs = {"pytorch": {"figures": {"allocations": 2400}}, "a": {"figures": {"allocations": 2424}}, "old": {"figures": {}}}
        self.assertEqual(programs.allocations_per_step(runs, 24), {"pytorch": 100.0, "a": 101.0, "old": 0.0})

    def test_the_table_counts_device_allocations_of_the_second_half(self):
        figures = {"peak_allocated": 1 << 30, "peak_reserved": 1 << 30, "device_allocations": 9}
        runs = {"settled": {"ms_per_step": 10.0, "figures": figures, "step_allocs": [5, 9, 9, 9]},
                "growing": {"ms_per_step": 10.0, "figures": figures, "step_allocs": [5, 6, 8, 9]},
                "uncounted": {"ms_per_step": 10.0, "figures": figures}}
        lines = programs.allocators.table(runs).splitlines()
        self.assertEqual(lines[0].split()[-3:], ["in", "2nd", "half"])
        self.assertEqual(lines[1].split()[-2:], ["9", "0"])  # steps 3 and 4 made none
        self.assertEqual(lines[2].split()[-2:], ["9", "3"])
        self.assertEqual(lines[3].split()[-1], "9")


class Controls(unittest.TestCase):
    def test_a_control_runs_pytorchs_allocator_after_its_import(self):
        name = "pytorch with torch._inductor.config imported"
        self.assertEqual(programs.allocators.spec(name), ({}, None, {}))
        with mock.patch.object(programs.allocators.importlib, "import_module") as imported:
            programs.allocators.install(name)  # no poolkit: the preset is None
        imported.assert_called_once_with("torch._inductor.config")

    def test_a_control_of_poolkit_installs_its_preset_in_its_environment(self):
        name = "poolkit expandable asking about captures at every call"
        self.assertEqual(programs.allocators.spec(name), ({"POOLKIT_CAPTURE_CHECKS": "every_call"}, "expandable", {}))
        package = mock.MagicMock()  # poolkit, whose torch module records use()
        with mock.patch.object(programs.allocators.importlib, "import_module") as imported, \
                mock.patch.dict(sys.modules, {"poolkit": package, "poolkit.torch": package.torch}):
            programs.allocators.install(name)
        imported.assert_not_called()
        package.torch.use.assert_called_once_with("expandable")

    def test_names_are_chosen_by_comma_and_unknown_ones_told(self):
        names, unknown = programs.allocators.chosen("pytorch, poolkit caching without hooks,nonesuch")
        self.assertEqual(names, ["pytorch", "poolkit caching without hooks", "nonesuch"])
        self.assertEqual(unknown, ["nonesuch"])
        every, none = programs.allocators.chosen(None)
        self.assertEqual(none, [])
        self.assertIn("poolkit expandable", every)
        self.assertNotIn("poolkit caching without hooks", every)
        self.assertFalse(any("," in name for name in [*programs.allocators.ALLOCATORS, *programs.allocators.CONTROLS]))

    def test_every_name_is_an_allocator_or_a_control_not_both(self):
        self.assertFalse(set(programs.allocators.ALLOCATORS) & set(programs.allocators.CONTROLS))
        self.assertEqual(programs.allocators.spec("pytorch"), programs.allocators.ALLOCATORS["pytorch"])


class CallTable(unittest.TestCase):
    def test_each_path_is_paired_with_the_reference_of_its_round(self):
        # The second round's host was slower for both: the ratios do not see it, the ns do.
        rounds = [{"pytorch": {"tensor": 500.0, "raw": 400.0}, "a": {"tensor": 550.0, "raw": 400.0}},
                  {"pytorch": {"tensor": 1000.0, "raw": 800.0}, "a": {"tensor": 1100.0, "raw": 880.0}}]
        lines = allocator_calls.table(rounds, ["pytorch", "a"]).splitlines()
        self.assertEqual(len(lines), 3)
        self.assertEqual(lines[2].split()[1:], ["825", "1.100", "(1.100", "-", "1.100)", "640", "1.050", "(1.000", "-", "1.100)"])
        self.assertEqual(lines[1].split()[2], "1.000")

    def test_the_columns_are_the_rounds_paths(self):
        paths = dict.fromkeys(allocator_calls.TRACE_PATHS, 300.0)
        rounds = [{"pytorch": paths, "a": {k: 2 * v for k, v in paths.items()}}]
        lines = allocator_calls.table(rounds, ["pytorch", "a"]).splitlines()
        self.assertEqual(lines[0].count("ns"), len(allocator_calls.TRACE_PATHS))
        self.assertEqual(lines[2].split()[1:3], ["600", "2.000"])

    def test_a_trace_becomes_slots_reused_once_freed(self):
        import gzip
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.csv.gz")
            with gzip.open(path, "wt") as f:
                f.write("Thread,Time,Action,Pointer,Size,Stream\n")
                f.write("0,1,free,0x90,512,0\n")  # allocated before the trace began: left out
                f.write("0,2,allocate,0x10,512,0\n0,3,allocate,0x20,1024,0\n0,4,free,0x10,512,0\n")
                f.write("0,5,allocate,0x10,2048,0\n0,6,allocate,0x30,4096,0\n")  # 0x10 again: a new block
            slots, sizes, count = allocator_calls.trace_calls(path)
        self.assertEqual(sizes, [512, 1024, -1, 2048, 4096])
        self.assertEqual(slots, [0, 1, 0, 0, 2])
        self.assertEqual(count, 3)

    @staticmethod
    def stand_in_torch(calls):
        """A stand-in for torch with the calls a trace child makes (no GPU here): trace_events and
        kernels that keep a stream busy append to `calls`, with the stream they were made on."""
        import contextlib
        import types
        current = ["current"]

        @contextlib.contextmanager
        def on(stream):
            before, current[0] = current[0], stream
            yield
            current[0] = before

        def trace_events(slots, sizes, count, repeats):
            calls.append(("events", current[0], len(slots), count, repeats))
            return 100.0 + repeats + len(calls) % 3  # the timings of a path differ: its best is kept

        cuda = types.SimpleNamespace(
            Stream=lambda: "side", stream=on, current_stream=lambda: "current", synchronize=lambda: None,
            _sleep=lambda cycles: calls.append(("sleep", current[0], cycles)),
            memory_stats=lambda: {"allocated_bytes.all.peak": 1, "reserved_bytes.all.peak": 2})
        cpp = types.SimpleNamespace(load_inline=lambda **_: types.SimpleNamespace(trace_events=trace_events))
        torch = types.SimpleNamespace(cuda=cuda, empty=lambda *a, **k: None, utils=types.SimpleNamespace(cpp_extension=cpp))
        return {"torch": torch, "torch.utils": torch.utils, "torch.utils.cpp_extension": cpp}

    def run_trace_child(self, calls, lockstep=False, stdin=""):
        """The output lines of a trace child over a two-event trace, with stand_in_torch."""
        import contextlib
        import io
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.csv")
            with open(path, "w") as f:
                f.write("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,512,0\n0,2,free,0x10,512,0\n")
            out = io.StringIO()
            with mock.patch.dict(sys.modules, self.stand_in_torch(calls)), mock.patch.object(sys, "stdin", io.StringIO(stdin)), \
                    contextlib.redirect_stdout(out):
                allocator_calls.child("pytorch", path, lockstep=lockstep)
        return out.getvalue().splitlines()

    def test_a_trace_child_times_each_path_on_its_stream(self):
        # Every path timed, each on its stream, the busy ones behind a kernel on that stream.
        import json
        calls = []
        figures = json.loads(self.run_trace_child(calls)[-1])["ns_per_pair"]
        self.assertEqual(list(figures), list(allocator_calls.TRACE_PATHS))
        timed = [c for c in calls if c[0] == "events" and c[4] == allocator_calls.TRACE_REPEATS]
        self.assertEqual([c[1] for c in timed], ["current"] * 10 + ["side"] * 10)
        self.assertEqual({c[2:4] for c in timed}, {(2, 1)})
        self.assertEqual(set(figures.values()), {100.0 + allocator_calls.TRACE_REPEATS})  # the best of each path's five
        sleeps = [c[1] for c in calls if c[0] == "sleep"]
        self.assertEqual(sleeps, ["current"] * 5 + ["side"] * 5)  # five timings of each busy path

    def test_a_lockstep_trace_child_makes_one_timing_per_go(self):
        import json
        steps = allocator_calls.TIMINGS * len(allocator_calls.TRACE_PATHS)
        calls = []
        lines = self.run_trace_child(calls, lockstep=True, stdin="go\n" * steps)
        self.assertEqual(lines[0], "lockstep ready")
        self.assertEqual(len([line for line in lines if line.startswith("lockstep step ")]), steps)
        self.assertEqual(list(json.loads(lines[-1])["ns_per_pair"]), list(allocator_calls.TRACE_PATHS))
        self.assertEqual(len([c for c in calls if c[0] == "events" and c[4] == allocator_calls.TRACE_REPEATS]), steps)
        with self.assertRaisesRegex(SystemExit, "parent stopped"):
            self.run_trace_child([], lockstep=True, stdin="go\n" * (steps - 1))

    def test_lockstep_rounds_interleave_every_allocator_s_timings(self):
        import contextlib
        import io
        paths = dict.fromkeys(allocator_calls.TRACE_PATHS, 300.0)
        rounds = []

        def lockstep_round(script, names, arguments, steps, round_index):
            rounds.append((names, arguments, steps, round_index))
            return {name: {"ns_per_pair": paths} for name in names}

        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.csv")
            with open(path, "w") as f:
                f.write("Thread,Time,Action,Pointer,Size,Stream\n0,1,allocate,0x10,512,0\n0,2,free,0x10,512,0\n")
            argv = ["allocator_calls.py", "--trace", path, "--lockstep", "--rounds", "2", "--allocators", "pytorch,poolkit expandable"]
            out = io.StringIO()
            with mock.patch.object(allocator_calls.allocators, "lockstep_round", lockstep_round), \
                    mock.patch.object(sys, "argv", argv), contextlib.redirect_stdout(out):
                self.assertEqual(allocator_calls.main(), 0)
        steps = allocator_calls.TIMINGS * len(allocator_calls.TRACE_PATHS)
        self.assertEqual(rounds, [(["pytorch", "poolkit expandable"], ["--trace", path, "--lockstep"], steps, index) for index in (0, 1)])
        self.assertIn("poolkit expandable", out.getvalue())

    def test_a_trace_that_is_not_one_is_refused_before_any_child(self):
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.csv")
            with open(path, "w") as f:
                f.write("not,a,trace\n1,2,3\n")
            self.assertEqual(exit_status(allocator_calls.main, ["allocator_calls.py", "--trace", path]), 2)

    def test_the_sizes_are_alloc_free_s(self):
        sizes = programs.alloc_free_sizes()
        self.assertEqual(len(sizes), 10000)
        self.assertEqual(sizes, programs.alloc_free_sizes())
        self.assertTrue(all(512 <= s <= (8 << 20) + 7 * 512 for s in sizes))


class Lockstep(unittest.TestCase):
    CHILD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lockstep_child.py")
    NAMES = ["pytorch", "poolkit caching", "poolkit expandable"]

    def run_round(self, steps, round_index, fail="", cpus=None):
        with tempfile.TemporaryDirectory() as folder:
            log = os.path.join(folder, "log")
            os.environ.update(LOCKSTEP_LOG=log, LOCKSTEP_FAIL=fail)
            try:
                runs = programs.lockstep_round(self.CHILD, "a_program", self.NAMES, steps, round_index, cpus)
            finally:
                del os.environ["LOCKSTEP_LOG"], os.environ["LOCKSTEP_FAIL"]
            with open(log) as f:
                return runs, [line.rsplit(" ", 1)[0] for line in f.read().splitlines()]

    def test_steps_interleave_one_by_one_in_rotated_order(self):
        runs, order = self.run_round(3, 1)
        expected = [n for i in range(3) for n in allocators.rotated(self.NAMES, 1 + i)]
        self.assertEqual(order, expected)
        self.assertEqual(sorted(runs), sorted(self.NAMES))
        self.assertEqual(runs["poolkit caching"]["losses"], ["a_program"])

    def test_every_child_runs_on_the_cpus_given(self):
        last = max(os.sched_getaffinity(0))
        runs, _ = self.run_round(2, 0, cpus=allocators.cpu_set(str(last)))
        self.assertEqual({name: run["cpus"] for name, run in runs.items()}, {name: [last] for name in self.NAMES})
        runs, _ = self.run_round(2, 0)
        self.assertEqual(runs["pytorch"]["cpus"], sorted(os.sched_getaffinity(0)))

    def test_a_cpu_list_is_read_as_taskset_reads_it_and_checked(self):
        first = min(os.sched_getaffinity(0))
        self.assertEqual(allocators.cpu_set(str(first)), {first})
        if {first, first + 1} <= os.sched_getaffinity(0):
            self.assertEqual(allocators.cpu_set(f"{first}-{first + 1},{first + 1}"), {first, first + 1})
        for text in ("", "a", "3-1", "1-", "-2"):
            with self.assertRaisesRegex(ValueError, "not a CPU list"):
                allocators.cpu_set(text)
        with self.assertRaisesRegex(ValueError, "may not run on CPU 100000"):
            allocators.cpu_set("100000")
        self.assertEqual(exit_status(programs.main, ["programs.py", "--cpus", str(first)]), 2)  # needs --lockstep

    def test_the_json_keeps_the_rounds_before_one_that_stops(self):
        run = {"losses": [1], "ms_per_step": 1.0, "step_ms": [1.0] * 3, "figures": {"peak_allocated": 1, "peak_reserved": 1}}

        def lockstep_round(script, program, names, steps, round_index, cpus):
            if round_index == 1:
                raise SystemExit("round 1 ran out of time")
            return {name: run for name in names}
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "runs.json")
            argv = ["programs.py", "alloc_free", "--lockstep", "--rounds", "3", "--allocators", "pytorch", "--json", path]
            with mock.patch.object(programs, "lockstep_round", lockstep_round), \
                    mock.patch.dict(programs.NEEDS, {"alloc_free": "json"}):
                self.assertEqual(exit_status(programs.main, argv), "round 1 ran out of time")
            with open(path) as f:
                self.assertEqual(json.load(f), {"alloc_free": [{"pytorch": run}]})

    def test_a_child_that_fails_stops_the_round(self):
        with self.assertRaises(SystemExit) as stopped:
            self.run_round(3, 0, fail="poolkit caching:1")
        self.assertIn("poolkit caching", str(stopped.exception))


class ProgramTrace(unittest.TestCase):
    def test_a_trace_counts_its_events_and_streams(self):
        import gzip
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "t.csv.gz")
            with gzip.open(path, "wt") as f:
                f.write("Thread,Time,Action,Pointer,Size,Stream\n")
                f.write("0,1,allocate,0x10,512,0\n0,2,allocate,0x20,512,0x7\n0,3,free,0x10,512,0\n")
            self.assertEqual(program_trace.trace_figures(path), (3, 2))

    def test_an_unknown_program_is_refused_before_torch_is_imported(self):
        had_torch = "torch" in sys.modules
        self.assertEqual(exit_status(program_trace.main, ["program_trace.py", "no_such_program", "out.csv.gz"]), 2)
        self.assertEqual("torch" in sys.modules, had_torch)


if __name__ == "__main__":
    unittest.main()
