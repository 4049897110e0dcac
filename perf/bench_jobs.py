"""The bench jobs of one arm (or of the base model), this checkout against an older tree, timed job by job.

    git archive <commit> | tar -x -C /tmp/old        # the tree before a change
    python perf/bench_jobs.py PROJECT /tmp/old --arm population --json results/perf_bench_jobs.json
    python perf/bench_jobs.py PROJECT /tmp/old --arm population --roles students,teachers --only-together

PROJECT holds `results/base_model` and, for an arm, `results/models/<arm>` (an export folder: the export stage's,
or fresh adapters). Each side's jobs are the ones its own DAG declares for the arm (workflow/dag.py: `bench`,
and where the tree has it `bench_together`; `bench_base*` for `--arm base`) on its own params.yaml
(`--roles` overrides bench.roles on both sides), each rendered as that DAG renders it and run in a scratch
project of the side (params.yaml, links to PROJECT's results and to the tree's workflow/ and study/), one
after the other, on one thread (OMP_NUM_THREADS=1, as Snakemake runs a CPU model stage). A job's time is its
process's wall time, start-up included (what Snakemake's `benchmark:` files record). `--only-together` keeps,
on the new side, the together job only, and on the old side the jobs of the benchmarks in it. Sides alternate
per repeat (old, new, old, new ...). Prints each job, each side's total (median over repeats) and new/old, and
whether the two sides' results agree (per-problem verdicts of every model both benchmarked).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

NEW = Path(__file__).resolve().parents[1]
LISTER = """
import json, sys, yaml
from populora.config import parse_params
from workflow.dag import STAGES, scope_items
raw = yaml.safe_load(open("params.yaml"))
if sys.argv[2]:
    raw["bench"]["roles"] = sys.argv[2].split(",")
    open("params.yaml", "w").write(yaml.safe_dump(raw, sort_keys=False))
params = parse_params(raw)
names = ("bench_base", "bench_base_together") if sys.argv[1] == "base" else ("bench", "bench_together")
jobs = []
for stage in STAGES:
    if stage.name in names:
        for item in scope_items(stage.scope, params).values():
            if item.get("arm", sys.argv[1]) != sys.argv[1] and sys.argv[1] != "base":
                continue
            paths = {k: t.format(**item) for k, t in {**stage.inputs, **stage.outputs}.items()}
            jobs.append({"stage": stage.name, "bench": item.get("bench", "together"),
                         "results": paths["results"], "command": stage.command(paths, item, log=f"logs/{stage.name}-"
                         f"{item.get('bench', 'together')}.log")})
print(json.dumps(jobs))
"""


def side(tree: Path, project: Path, scratch: Path, arm: str, roles: str) -> list[dict]:
    """A scratch project running `tree`'s code on its own params.yaml; its jobs for `arm`."""
    scratch.mkdir(parents=True, exist_ok=True)
    shutil.copy(tree / "params.yaml", scratch / "params.yaml")
    for name in ("workflow", "study"):
        (scratch / name).unlink(missing_ok=True)
        (scratch / name).symlink_to(tree / name)
    (scratch / "results").mkdir(exist_ok=True)
    for name in ("base_model", "models"):
        (scratch / "results" / name).unlink(missing_ok=True)
        (scratch / "results" / name).symlink_to(project / "results" / name)
    listed = subprocess.run(
        [sys.executable, "-c", LISTER, arm, roles],
        cwd=scratch,
        env=env_of(tree),
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(listed.stdout)


def env_of(tree: Path) -> dict:
    return {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}


def run(tree: Path, scratch: Path, job: dict) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the job's processes, its spawned workers included)."""
    shutil.rmtree(scratch / job["results"], ignore_errors=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(job["command"], shell=True, cwd=scratch, env=env_of(tree), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"{job['command']} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return seconds, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def verdicts(scratch: Path, jobs: list[dict]) -> dict[tuple[str, str], dict]:
    """(benchmark, model) -> per-problem verdicts of a side's results."""
    out = {}
    for job in jobs:
        folder = scratch / job["results"]  # <model>.json, or <benchmark>/<model>.json in a together job's
        for result in [*folder.glob("*.json"), *folder.glob("*/*.json")]:
            data = json.loads(result.read_text())
            if isinstance(data, dict) and {"per_problem", "benchmark", "model"} <= set(data):
                out[(data["benchmark"], data["model"])] = data["per_problem"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("project", type=Path)
    parser.add_argument("old", type=Path, help="the older tree (git archive of a commit)")
    parser.add_argument("--arm", default="population", help="population | baseline | base")
    parser.add_argument("--roles", default="", help="bench.roles on both sides, comma-separated (default: each side's)")
    parser.add_argument("--only-together", action="store_true")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--scratch", type=Path, default=Path("/tmp/perf_bench_jobs"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    sides = {}
    for name, tree in (("old", args.old.resolve()), ("new", NEW)):
        scratch = args.scratch / name
        sides[name] = (tree, scratch, side(tree, args.project.resolve(), scratch, args.arm, args.roles))
    if args.only_together:
        new_jobs = [job for job in sides["new"][2] if job["stage"].endswith("_together")]
        grouped = set(
            json.loads(
                subprocess.run(
                    [
                        sys.executable,
                        "-c",
                        "import yaml; from populora.config import parse_params; from populora.core.topology import together_benchmarks; "
                        "import json; print(json.dumps(together_benchmarks(parse_params(yaml.safe_load(open('params.yaml'))))))",
                    ],
                    cwd=sides["new"][1],
                    env=env_of(NEW),
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout
            )
        )
        sides["new"] = (*sides["new"][:2], new_jobs)
        sides["old"] = (*sides["old"][:2], [job for job in sides["old"][2] if job["bench"] in grouped])
    times: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    cpu: dict[str, dict[str, list[float]]] = {name: {} for name in sides}
    for _ in range(args.repeats):
        for name, (tree, scratch, jobs) in sides.items():
            for job in jobs:
                seconds, used = run(tree, scratch, job)
                times[name].setdefault(f"{job['stage']} {job['bench']}", []).append(seconds)
                cpu[name].setdefault(f"{job['stage']} {job['bench']}", []).append(used)
                print(
                    f"{name:4} {job['stage']:20} {job['bench']:15} {seconds:7.1f} s wall {used:7.1f} s CPU", flush=True
                )
    totals = {name: statistics.median([sum(r) for r in zip(*per_job.values())]) for name, per_job in times.items()}
    cpu_totals = {name: statistics.median([sum(r) for r in zip(*per_job.values())]) for name, per_job in cpu.items()}
    old, new = verdicts(sides["old"][1], sides["old"][2]), verdicts(sides["new"][1], sides["new"][2])
    shared = sorted(set(old) & set(new))
    agree = all(old[key] == new[key] for key in shared)
    print(
        f"old {totals['old']:.1f} s ({cpu_totals['old']:.1f} s CPU) in {len(sides['old'][2])} jobs; new "
        f"{totals['new']:.1f} s ({cpu_totals['new']:.1f} s CPU) in {len(sides['new'][2])} jobs; new/old "
        f"{totals['new'] / totals['old']:.3f} wall, {cpu_totals['new'] / cpu_totals['old']:.3f} CPU; "
        f"verdicts of {len(shared)} (benchmark, model) pairs on both sides {'agree' if agree else 'DIFFER'}"
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "arm": args.arm,
                    "roles": args.roles or "each side's params",
                    "only_together": args.only_together,
                    "repeats": args.repeats,
                    "old": str(args.old),
                    "jobs": {k: {j: [round(s, 1) for s in v] for j, v in t.items()} for k, t in times.items()},
                    "cpu_s": {k: {j: [round(s, 1) for s in v] for j, v in t.items()} for k, t in cpu.items()},
                    "total_s": {k: round(v, 1) for k, v in totals.items()},
                    "ratio_new_over_old": round(totals["new"] / totals["old"], 3),
                    "total_cpu_s": {k: round(v, 1) for k, v in cpu_totals.items()},
                    "cpu_ratio_new_over_old": round(cpu_totals["new"] / cpu_totals["old"], 3),
                    "load_average_at_end": os.getloadavg(),
                    "verdicts_compared": len(shared),
                    "verdicts_agree": agree,
                },
                indent=1,
                sort_keys=True,
            )
            + "\n"
        )
    return 0 if agree else 1


if __name__ == "__main__":
    raise SystemExit(main())
