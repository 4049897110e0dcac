"""Verdicts do not depend on load: the hostile suite (tests/hostile_cases.py) and programs near the
limits get the same verdicts with CPU hogs beside the sandbox as on the machine as it is.

    .venv/bin/python -m pytest tests/test_sandbox_load.py -m "" -q -s     (slow; -s prints the wall times)

The limits are those of tests/test_sandbox_unprivileged.py's probe (0.5 s of CPU, a 1.5 s wall-clock
backstop): tight, so that a backstop counting wall time cuts CPU-bound programs short under load. That
was issue 50's flake (a program that fills its memory got `memory` in one run and `timeout` in a busier
one); the backstop now leaves out the time a child waited for a CPU (populora/sandbox/zygote.py). The
sentinels show the load was real: `cpu_0.4s` needs more wall time than the backstop under the hogs
(asserted), and `memory_after_0.3s` reaches its memory limit after 0.3 s of CPU, past the backstop's
wall time there; before the fix both became `timeout` under this load.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from hostile_cases import HOSTILE_CASES, outcome

from populora.sandbox import Call, Job, Limits, Sandbox

pytestmark = pytest.mark.slow  # subprocess-heavy (the sandbox under load): CI's full lane, not the fast one

LIMITS = Limits(timeout_s=0.5, memory_mb=256, max_output_chars=10_000, wall_timeout_s=1.5)
RACY = {"alarm_storm_in_harness"}  # a 10 us interval timer against the harness: any expected outcome will do
SPIN = "import time\ndef f(s):\n    t = time.process_time()\n    while time.process_time() - t < s:\n        pass\n"
SENTINELS = {  # name: (program, call, verdict)
    "cpu_0.4s": (SPIN + "    return s", "f(0.4)", "ok:0.4"),
    "memory_after_0.3s": (
        SPIN + "    chunks = []\n    while True:\n        chunks.append(bytes(10**7))",
        "f(0.3)",
        "memory",
    ),
}
HOGS_PER_CORE = 4


def run_suite(box: Sandbox) -> dict:
    jobs = {c.name: Job(c.program, (Call(f"f({c.input})"),)) for c in HOSTILE_CASES}
    jobs |= {name: Job(program, (Call(call),)) for name, (program, call, _) in SENTINELS.items()}
    futures = {name: box.submit(job) for name, job in jobs.items()}
    return {name: future.result() for name, future in futures.items()}


def test_hostile_verdicts_are_the_same_under_cpu_hogs_and_idle():
    with Sandbox(workers=2, limits=LIMITS) as box:
        idle = run_suite(box)
        # each hog in a session of its own, like independent jobs (with autogroup scheduling, busy loops
        # sharing one session would share one slice of the CPU)
        hogs = [
            subprocess.Popen([sys.executable, "-c", "while True:\n    pass"], start_new_session=True)
            for _ in range(HOGS_PER_CORE * (os.cpu_count() or 1))
        ]
        try:
            time.sleep(0.3)  # let them take the cores
            loaded = run_suite(box)
        finally:
            for hog in hogs:
                hog.kill()
                hog.wait()
    expected = {c.name: c.expect for c in HOSTILE_CASES} | {n: {s[2]} for n, s in SENTINELS.items()}
    problems = []
    for name, allowed in expected.items():
        a, b = outcome(idle[name]), outcome(loaded[name])
        if a not in allowed or b not in allowed:
            problems.append(f"{name}: idle {a!r}, loaded {b!r}, expected {sorted(allowed)} ({loaded[name].detail})")
        elif a != b and name not in RACY:
            problems.append(f"{name}: idle {a!r} != loaded {b!r} ({loaded[name].detail})")
    print(
        f"\nwall s idle -> under {len(hogs)} hogs: "
        + ", ".join(
            f"{n} {idle[n].wall_s:.2f} -> {loaded[n].wall_s:.2f}"
            for n in (*SENTINELS, "infinite_loop", "sleep_forever")
        )
    )
    assert not problems, "\n".join(problems)
    # the load was real: counting wall time, the backstop would have ended this one as `timeout`
    assert loaded["cpu_0.4s"].wall_s > LIMITS.wall_limit_s, loaded["cpu_0.4s"].wall_s
    # and programs that sleep still meet the backstop (the time they wait for a CPU is all that is left out)
    assert outcome(loaded["sleep_forever"]) == "timeout" and loaded["sleep_forever"].wall_s < 4 * LIMITS.wall_limit_s
