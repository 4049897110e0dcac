"""DVC experiments as the study analyser's run records: the second source of `populora.analysis.comparisons`.

    dvc exp run --queue -S base.seed=0 -S 'dag.arms=[population]'   # seeds x arms
    dvc queue start && dvc queue status                                # wait until every run succeeded
    python -m populora.analysis --dvc --out results/study                # the same analysis as committed runs get

Experiments come from `dvc exp show --json` and are grouped into controls by the arms they ran (`dag.arms`)
and their ablation: every parameter that differs between the experiments, except `base.seed` and
`dag.arms` (`default` when none does); a control is named `<arms> (<ablation>)`. Each experiment is one
run record (`populora.analysis.runs`): its seed (`base.seed`), its students' per-problem verdicts and the
base model's (read from the experiment's commit through DVC: `results/bench/<arm>/<benchmark>/<model>.json`,
`results/bench/base/<benchmark>/base.json`), and its headline metrics (`results/headline.json`, the run's
DVC metrics) under `headline`. Within an ablation the population control is compared with the baseline one.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from populora.analysis.runs import empty_run, flatten
from populora.core.benchmark_data import TOGETHER
from populora.core.refs import arm_refs
from populora.core.stats import is_finite_number

METRICS_FILE = "results/headline.json"  # the DVC metrics of a run (workflow/dag.py HEADLINE)
BENCH_DIR = (
    "results/bench"  # <arm>/<benchmark>/<model>.json and base/<benchmark>/base.json, as workflow/dag.py writes them
)
PARAMS_FILE = "params.yaml"
NOT_ABLATIONS = ("base.seed", "dag.arms")


class StudyError(RuntimeError):
    """The experiments cannot be summarised; the message says why and what to do."""


def experiments(shown: list[dict]) -> list[dict]:
    """Finished experiments of `dvc exp show --json`: {name, rev, params (flat), metrics (flat)};
    queued, running and failed ones (no metrics) are left out."""
    found = []
    for commit in shown:
        for exp_range in commit.get("experiments") or []:
            revs = exp_range.get("revs") or []
            if not revs:
                continue
            state = revs[0]
            data = state.get("data") or {}
            metrics = ((data.get("metrics") or {}).get(METRICS_FILE) or {}).get("data")
            params = ((data.get("params") or {}).get(PARAMS_FILE) or {}).get("data")
            if not metrics or not params or state.get("error"):
                continue
            found.append(
                {
                    "name": exp_range.get("name") or state.get("name") or state["rev"][:7],
                    "rev": state["rev"],
                    "params": flatten(params),
                    "metrics": flatten(metrics),
                }
            )
    return found


def _label(value) -> str:
    return "+".join(map(str, value)) if isinstance(value, tuple) else str(value)


def ablation_keys(found: list[dict]) -> list[str]:
    """Parameters that differ between experiments (seed and arms aside)."""
    keys = sorted({k for e in found for k in e["params"]} - set(NOT_ABLATIONS))
    return [k for k in keys if len({repr(e["params"].get(k)) for e in found}) > 1]


def group_of(experiment: dict, ablations: list[str]) -> tuple[str, str]:
    """(arms, ablation) of an experiment, e.g. ("population", "reward.teacher_mode=zero_sum")."""
    arms = _label(experiment["params"].get("dag.arms", ("?",)))
    ablation = ", ".join(f"{k}={_label(experiment['params'].get(k))}" for k in ablations) or "default"
    return arms, ablation


def students_of(experiment: dict) -> tuple[str, list[str]]:
    """The arm a one-arm experiment ran and its students' model names (the baseline's one adapter)."""
    params = experiment["params"]
    arm = params["dag.arms"][0]
    refs = arm_refs(arm, int(params.get("population.teachers", 1)), int(params.get("population.students", 1)))
    return arm, [ref.name for ref in refs["students"]]


def experiment_verdicts(repo: Path, experiment: dict) -> dict[str, dict[str, dict[str, int]]]:
    """{benchmark: {model: per-problem verdicts}} of a one-arm experiment's students and of the base,
    read from its commit through DVC (the results are DVC outputs, kept in the cache of the project)."""
    from dvc.api import DVCFileSystem

    arm, students = students_of(experiment)
    fs = DVCFileSystem(str(repo), rev=experiment["rev"])
    verdicts: dict[str, dict[str, dict[str, int]]] = {}
    for bench in experiment["params"].get("bench.benchmarks", ()):
        for model, side in [(m, arm) for m in students] + [("base", "base")]:
            # a job of its own, or the together job (bench.together)
            paths = [f"{BENCH_DIR}/{side}/{folder}/{model}.json" for folder in (bench, f"{TOGETHER}/{bench}")]
            path = next((path for path in paths if fs.exists(path)), None)
            if path is not None:
                verdicts.setdefault(bench, {})[model] = json.loads(fs.read_text(path))["per_problem"]
    return verdicts


def control_name(arms: str, ablation: str) -> str:
    return f"{arms} ({ablation})"


def experiment_runs(
    found: list[dict], verdicts: dict[str, dict] | None = None
) -> tuple[list[dict], list[tuple], list[str]]:
    """(run records, comparison pairs, notes): one run per one-arm experiment (`verdicts`: experiment name
    -> `experiment_verdicts`, none: headline metrics only), the population control against the baseline
    one within each ablation, and a note for every such pair without verdicts to compare."""
    if not found:
        raise StudyError(
            "no finished experiment with results/headline.json in `dvc exp show`. Fix: run experiments "
            "first (dvc exp run / dvc queue start) and wait until they succeed."
        )
    ablations, verdicts = ablation_keys(found), verdicts or {}
    runs, notes = [], []
    for experiment in found:
        arms, ablation = group_of(experiment, ablations)
        arm, students = students_of(experiment) if len(experiment["params"].get("dag.arms", ())) == 1 else (arms, [])
        run = empty_run(
            experiment["name"],
            control_name(arms, ablation),
            experiment["params"].get("base.seed"),
            arm,
            students,
            students,
        )
        bench_verdicts = {
            b: table for b, table in verdicts.get(experiment["name"], {}).items() if set(students) <= set(table)
        }
        runs.append(
            {
                **run,
                "verdicts": bench_verdicts,
                "params": experiment["params"],
                "arms": arms,
                "ablation": ablation,
                "headline": {k: v for k, v in experiment["metrics"].items() if is_finite_number(v)},
            }
        )
    pairs = []
    for ablation in sorted({r["ablation"] for r in runs}):
        left, right = control_name("population", ablation), control_name("baseline", ablation)
        sides = [[r for r in runs if r["control"] == side] for side in (left, right)]
        if all(sides):
            pairs.append((left, right))
            if not all(r["verdicts"] for side in sides for r in side):
                notes.append(
                    f"{ablation}: an experiment has no per-problem verdicts to compare (run with --repo at the "
                    "DVC project); the comparison uses those that have"
                )
    return runs, pairs, notes


def exp_show(repo: Path, all_commits: bool) -> list[dict]:
    """`dvc exp show --json` of the repository (every commit with `-A`)."""
    command = ["dvc", "exp", "show", "--json", *(["-A"] if all_commits else [])]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise StudyError(
            f"`{' '.join(command)}` failed in {repo}: {done.stderr.strip()[-500:]}. Fix: run from a DVC "
            "project with experiments (dvc exp run ...)."
        )
    return json.loads(done.stdout)


def read_verdicts(repo: Path, found: list[dict]) -> dict[str, dict]:
    """`experiment_verdicts` of every one-arm experiment whose results DVC can still read."""
    verdicts = {}
    for experiment in found:
        if len(experiment["params"].get("dag.arms", ())) != 1:
            continue  # a run of both arms compares them itself (its `.diff.*` keys)
        try:
            verdicts[experiment["name"]] = experiment_verdicts(repo, experiment)
        except Exception as error:  # noqa: BLE001  (DVC raises many kinds: no project, no such rev, no cache)
            print(
                f"study: {experiment['name']}: its per-problem verdicts are not readable through DVC "
                f"({type(error).__name__}: {error}); left out of the comparisons",
                file=sys.stderr,
            )
    return verdicts
