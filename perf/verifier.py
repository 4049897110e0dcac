"""Verifier throughput: verified proposals per second, sandboxed verifier vs naive executors.

    .venv/bin/python perf/verifier.py [--proposals 300] [--repeats 3] [--workers 2] [--json out.json]

Workload: simple code_o proposals (one input each), all valid. Three executors, each with
`--workers` parallel workers, interleaved per repeat so background load hits them alike:
  * sandbox:      populora.verifier.verify_rows on a warm Sandbox: every containment layer on,
                  two executions per proposal in separate processes (determinism check);
  * naive:        one fresh `python -c` subprocess per proposal, no containment, no determinism
                  check (the baseline the target is stated against);
  * naive_x2:     two fresh `python -c` subprocesses per proposal (the same work as the sandbox).
Prints the median proposals/s of each, checks/s (executions/s), the speed-up ratios, and CPU
milliseconds per proposal (this process plus all descendants), which background load on a shared
machine distorts less than wall-clock rates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from populora.config import VerifySection
from populora.sandbox import Sandbox
from populora.verifier import limits_of, verify_rows

CONFIG = VerifySection()  # params.yaml's verify defaults (the limits do not bind on this workload)

TEMPLATES = [
    ("def f(a, b):\n    return a * b + {k}", "{i}, {k}"),
    ("def f(s):\n    return s[::-1] + '{k}'", "'word{i}'"),
    ("def f(xs):\n    return sorted(x % {m} for x in xs)", "[{i}, {k}, 7, 3]"),
    ("def f(n):\n    total = 0\n    for i in range(n):\n        total += i * {k}\n    return total", "{i}"),
    ("def f(d):\n    return {{k: v + {k} for k, v in d.items()}}", "{{'a': {i}, 'b': {k}}}"),
    (
        "def f(s):\n    counts = {{}}\n    for c in s:\n        counts[c] = counts.get(c, 0) + 1\n    return counts",
        "'abra{i}cad'",
    ),
]


def make_proposals(n: int) -> list[dict]:
    rows = []
    for i in range(n):
        program, arguments = TEMPLATES[i % len(TEMPLATES)]
        k, m = i % 7 + 1, i % 5 + 2
        rows.append(
            {
                "task_id": f"perf-{i}",
                "type": "code_o",
                "program": program.format(k=k, m=m),
                "inputs": [arguments.format(i=i, k=k)],
                "message": None,
            }
        )
    return rows


def naive_run(row: dict, runs: int) -> bool:
    """Valid when every fresh interpreter exits 0 and all printed reprs agree."""
    source = f"{row['program']}\nprint(repr(f({row['inputs'][0]})))"
    outs = [
        subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=10) for _ in range(runs)
    ]
    return all(o.returncode == 0 for o in outs) and len({o.stdout for o in outs}) == 1


def time_naive(rows: list[dict], workers: int, runs: int) -> float:
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        valid = list(pool.map(lambda row: naive_run(row, runs), rows))
    elapsed = time.perf_counter() - start
    assert all(valid), "naive executor rejected a valid proposal"
    return len(rows) / elapsed


def time_sandbox(rows: list[dict], box: Sandbox) -> float:
    start = time.perf_counter()
    out = verify_rows(rows, CONFIG, sandbox=box)
    elapsed = time.perf_counter() - start
    assert all(r["valid"] for r in out), [r["reason_detail"] for r in out if not r["valid"]][:3]
    return len(rows) / elapsed


def cpu_ms_per_proposal(run) -> float:
    """CPU time of this process and all its (reaped) descendants per proposal: less sensitive to
    background load than wall-clock throughput."""
    before = os.times()
    n = run()
    after = os.times()
    spent = sum(getattr(after, k) - getattr(before, k) for k in ("user", "system", "children_user", "children_system"))
    return 1000 * spent / n


def sandbox_session(rows: list[dict], workers: int) -> int:
    with Sandbox(workers=workers, limits=limits_of(CONFIG)) as box:  # zygotes (and their children) reaped at close
        time_sandbox(rows, box)
    return len(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    rows = make_proposals(args.proposals)

    start = time.perf_counter()
    box = Sandbox(workers=args.workers, limits=limits_of(CONFIG))
    startup_s = time.perf_counter() - start
    rates: dict[str, list[float]] = {"sandbox": [], "naive": [], "naive_x2": []}
    try:
        time_sandbox(rows[:20], box)  # warm-up
        for _ in range(args.repeats):
            rates["sandbox"].append(time_sandbox(rows, box))
            rates["naive"].append(time_naive(rows, args.workers, runs=1))
            rates["naive_x2"].append(time_naive(rows, args.workers, runs=2))
    finally:
        box.close()

    cpu = {
        "sandbox": cpu_ms_per_proposal(lambda: sandbox_session(rows, args.workers)),
        "naive": cpu_ms_per_proposal(lambda: (time_naive(rows, args.workers, runs=1), len(rows))[1]),
        "naive_x2": cpu_ms_per_proposal(lambda: (time_naive(rows, args.workers, runs=2), len(rows))[1]),
    }
    median = {name: statistics.median(values) for name, values in rates.items()}
    result = {
        "proposals": args.proposals,
        "repeats": args.repeats,
        "workers": args.workers,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sandbox_capabilities": box.capabilities,
        "sandbox_startup_s": round(startup_s, 3),
        "proposals_per_s": {name: [round(v, 1) for v in values] for name, values in rates.items()},
        "median_proposals_per_s": {name: round(v, 1) for name, v in median.items()},
        "median_checks_per_s": {
            "sandbox": round(2 * median["sandbox"], 1),
            "naive": round(median["naive"], 1),
            "naive_x2": round(2 * median["naive_x2"], 1),
        },
        "speedup_vs_naive": round(median["sandbox"] / median["naive"], 2),
        "speedup_vs_naive_x2": round(median["sandbox"] / median["naive_x2"], 2),
        "cpu_ms_per_proposal": {name: round(v, 2) for name, v in cpu.items()},
        "cpu_cost_ratio_vs_naive": round(cpu["naive"] / cpu["sandbox"], 2),
        "cpu_cost_ratio_vs_naive_x2": round(cpu["naive_x2"] / cpu["sandbox"], 2),
        "load_average": os.getloadavg(),
    }
    print(
        f"sandbox startup: {startup_s:.2f} s ({args.workers} workers; layers: "
        f"{', '.join(k for k, v in box.capabilities.items() if v is True)})"
    )
    for name in rates:
        print(f"{name:9s} proposals/s: median {median[name]:7.1f}  runs {result['proposals_per_s'][name]}")
    print(
        f"checks/s (executions): sandbox {result['median_checks_per_s']['sandbox']}, "
        f"naive {result['median_checks_per_s']['naive']}, naive_x2 {result['median_checks_per_s']['naive_x2']}"
    )
    print(
        f"speed-up: {result['speedup_vs_naive']}x vs naive (1 run/proposal), "
        f"{result['speedup_vs_naive_x2']}x vs naive_x2 (same work)"
    )
    print(
        "CPU ms per proposal (this process + descendants): "
        + ", ".join(f"{name} {value:.2f}" for name, value in cpu.items())
        + f"; naive costs {result['cpu_cost_ratio_vs_naive']}x "
        f"(naive_x2 {result['cpu_cost_ratio_vs_naive_x2']}x) the sandbox's CPU per proposal"
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
