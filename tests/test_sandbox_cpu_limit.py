"""The verdict "timeout" is decided by CPU time, so a busy machine does not change verdicts.

    .venv/bin/python -m pytest tests/test_sandbox_cpu_limit.py -m "" -q -s     (slow: -m "" selects it; -s prints the wall times)

The same programs (quick ones, ones that need 0.5, 1.0 and 1.5 s of CPU, an infinite loop) run under
a 2 s CPU limit, first on the machine as it is, then beside 2 busy loops per core started by the
test: the verdicts must be the same. Under that load the 1.5 s program takes several seconds of
wall time, past the 2 s at which a wall-clock limit (the sandbox's rule before) would have killed it.
The wall-clock backstop (default 5 x the CPU limit, for programs that sleep or block; tested in
tests/test_sandbox.py) is set to 20 s here, so that only the CPU rule is under test whatever else
loads this machine (measured here with the hogs and a background load of ~4 on 2 cores: the 2 s
infinite loop took 7.6 s of wall time, 3.8 x).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from populora.sandbox import Call, Job, Limits, RunResult, Sandbox

SPIN = (
    "import time\ndef f(seconds):\n    start = time.process_time()\n"
    "    while time.process_time() - start < seconds:\n        pass\n    return seconds"
)
PROGRAMS = {  # name: (program, argument, verdict)
    "add": ("def f(a):\n    return a + 1", "1", "ok:2"),
    "sort": ("def f(a):\n    return sorted(a, reverse=True)[:3]", "list(range(1000))", "ok:[999, 998, 997]"),
    "sum_squares": ("def f(n):\n    return sum(i * i for i in range(n))", "10**5", "ok:333328333350000"),
    "cpu_0.5s": (SPIN, "0.5", "ok:0.5"),
    "cpu_1.0s": (SPIN, "1.0", "ok:1.0"),
    "cpu_1.5s": (SPIN, "1.5", "ok:1.5"),
    "infinite_loop": ("def f(a):\n    while True:\n        pass", "0", "timeout"),
}
LIMITS = Limits(timeout_s=2.0, memory_mb=256, max_output_chars=1000, wall_timeout_s=20.0)


def verdict(run: RunResult) -> str:
    if run.status != "ok":
        return run.status
    call = run.calls[0]
    return f"ok:{call.repr}" if call.status == "ok" else call.status


def run_all(box: Sandbox) -> dict[str, RunResult]:
    # the long ones first, one per worker, so the whole batch takes about the longest two
    order = sorted(PROGRAMS, key=lambda name: name in ("add", "sort", "sum_squares"))
    futures = {name: box.submit(Job(PROGRAMS[name][0], (Call(f"f({PROGRAMS[name][1]})"),))) for name in order}
    return {name: future.result() for name, future in futures.items()}


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_verdicts_do_not_change_under_cpu_load():
    hogs_per_core = 2
    with Sandbox(workers=2, limits=LIMITS) as box:
        quiet = run_all(box)
        # each in a session of its own, like independent jobs (with autogroup scheduling, busy loops
        # sharing one session would share one slice of the CPU)
        hogs = [
            subprocess.Popen([sys.executable, "-c", "while True:\n    pass"], start_new_session=True)
            for _ in range(hogs_per_core * (os.cpu_count() or 1))
        ]
        try:
            time.sleep(0.3)  # let them take the cores
            loaded = run_all(box)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    expected = {name: spec[2] for name, spec in PROGRAMS.items()}
    print("\nverdict, wall s quiet -> under load:")
    for name in PROGRAMS:
        print(
            f"  {name:14s} {verdict(loaded[name]):22s} {quiet[name].wall_s:6.2f} -> {loaded[name].wall_s:6.2f}"
            f"   ({loaded[name].detail or ''})"
        )
    assert {name: verdict(run) for name, run in quiet.items()} == expected
    assert {name: verdict(run) for name, run in loaded.items()} == expected
    # the load was real: a wall-clock limit of 2 s would have turned this "ok" into "timeout"
    assert loaded["cpu_1.5s"].wall_s > LIMITS.timeout_s, loaded["cpu_1.5s"].wall_s
    assert "of CPU time (limit 2 s)" in loaded["infinite_loop"].detail, loaded["infinite_loop"].detail
