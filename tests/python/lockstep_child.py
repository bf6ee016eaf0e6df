"""A stand-in for a programs.py child in --lockstep mode, without torch: says "lockstep ready" (and
a line of chatter), runs a step per "go" (appending "NAME STEP" to the file named by
LOCKSTEP_LOG), says "lockstep step MS", and prints run_child's JSON at the end (with the CPUs it may run on).
LOCKSTEP_FAIL=NAME:STEP makes that child exit 3 at that step."""
import json
import os
import sys


def main():
    _, flag, name, program, steps, mode = sys.argv
    assert flag == "--child" and mode == "--lockstep", sys.argv
    failing = os.environ.get("LOCKSTEP_FAIL", "")
    print("lockstep ready", flush=True)
    print("some library's chatter", flush=True)
    for i in range(int(steps)):
        if sys.stdin.readline().strip() != "go":
            return 2
        if failing == f"{name}:{i}":
            return 3
        with open(os.environ["LOCKSTEP_LOG"], "a") as log:
            log.write(f"{name} {i}\n")
        print(f"lockstep step {1.0 + i}", flush=True)
    print(json.dumps({"losses": [program], "ms_per_step": 1.0, "step_ms": [1.0] * int(steps), "figures": {},
                      "cpus": sorted(os.sched_getaffinity(0))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
