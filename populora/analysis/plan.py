"""A study's plan, committed before its first run: `study/<name>/plan.yaml`.

    python -m populora.analysis study/learning/runs --plan study/learning/plan.yaml --out study/learning
    python -m populora.analysis.plan study/learning/plan.yaml 1t1s 3     # is 1t1s seed 3 a declared run? (exit 0/1)

The file (YAML; every key but `written` and `note` is read):

    written: 2026-11-25, before the first run       # when, and whether before the runs
    retroactive: false                               # true: written after the runs (say so in `note`)
    question: does the population help where the students learn?
    pool: study/learning/heldout_pool.jsonl          # the held-out pool every run answers
    pool_baselines: study/learning/pool_baselines.json   # its best constant and copy scores (populora.analysis.baselines)
    overlay: params/learning-study.yaml              # the overlay(s) the runs apply (a list: in order); must exist
    params: {dag: {generations: 6}, update: {learning_rate: 0.001}}   # the budget: every run must have these
    controls:                                        # each control's own params on top of the budget
      1t1s: {dag: {arms: [population]}, population: {teachers: 1, students: 1}}
    seeds: [1, 2]                                    # the seeds of the answer
    tuning_seeds: [0]                                # seeds used to choose the budget: marked, left out of the answer
    primary: {endpoint: heldout, left: 2t2s, right: 1t1s, test: welch}   # optional score: (see PRIMARY_SCORES)
    comparisons: [[2t2s, 1t1s], [1t1s, base]]        # optional: the pairs to report (default: the grid's)

The analyser (`populora.analysis.comparisons.summarize`) marks the runs of tuning seeds (`mark_tuning`), and
`findings` lists what departs from the plan: a run of an undeclared control or seed, a run whose params
differ from the budget or its control's params (key by key), a run whose pool is not the plan's, and a
control whose runs mix tuning and declared seeds (the tuning runs are then left out of its figures). Before a
run, `main` also refuses a plan that names an overlay, pool or baselines file the checkout does not have.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from populora.analysis.runs import flatten
from populora.core.stats import ONE_SAMPLE, WELCH

TESTS = {"welch": "Welch t over seed-level scores, 95%", "t": "one-sample t over the seeds' gains on the base, 95%"}
METHODS = {"welch": WELCH, "t": ONE_SAMPLE}  # what `seed_comparison` computes for each test, given 2+ seeds a side
# The primary's score, in order of preference where the plan names none: the mean pass rate over `heldout.samples`
# answers at temperature 1 where the runs sampled them (the endpoint plans on pool v2 and v3 declare in words:
# continuous and paired over tasks), else greedy pass@1 (a study that scored greedily only, the learning study).
PRIMARY_SCORES = ("pass rate at temperature 1", "pass@1")


class PlanError(ValueError):
    """The plan file is malformed; the message says what to fix."""


def load(path: str | Path) -> dict:
    """The plan at `path`, checked for the keys the analyser reads."""
    plan = yaml.safe_load(Path(path).read_text()) or {}
    missing = [key for key in ("controls", "seeds", "params", "primary") if key not in plan]
    if missing:
        raise PlanError(f"{path}: no {', '.join(missing)}. Fix: declare them (see populora/analysis/plan.py).")
    overlap = set(plan["seeds"]) & set(plan.get("tuning_seeds") or [])
    if overlap:
        raise PlanError(f"{path}: seeds {sorted(overlap)} are both declared and tuning seeds. Fix: one or the other.")
    primary = plan["primary"]
    if primary.get("test", "welch") not in TESTS or not {"endpoint", "left", "right"} <= set(primary):
        raise PlanError(f"{path}: primary needs endpoint, left, right and a test of {', '.join(TESTS)}.")
    if primary.get("score", PRIMARY_SCORES[0]) not in PRIMARY_SCORES:
        raise PlanError(
            f"{path}: primary score {primary['score']!r} is not one the analysis computes. "
            f"Fix: one of {', '.join(repr(s) for s in PRIMARY_SCORES)}, or leave it out (the first the runs have)."
        )
    return plan


def pool_baselines(plan: dict | None, plan_file: str | Path | None = None) -> dict:
    """The plan's `pool_baselines` file's per-type figures (`populora.analysis.baselines`), read from the
    working directory or beside the plan; {} without one."""
    name = (plan or {}).get("pool_baselines")
    if not name:
        return {}
    for path in (Path(name), Path(plan_file or ".").parent / Path(name).name):
        if path.is_file():
            return json.loads(path.read_text())["by_type"]
    raise PlanError(f"pool_baselines {name} not found. Fix: python -m populora.analysis.baselines <pool> --out {name}")


def missing_files(plan: dict, root: str | Path = ".") -> list[str]:
    """The files the plan names (`overlay`: one path or a list, applied in order; `pool`; `pool_baselines`) that are
    not in the checkout at `root`: a plan names only files of its own commit, so none may be missing."""
    overlays = plan.get("overlay") or []
    named = [*([overlays] if isinstance(overlays, str) else overlays), plan.get("pool"), plan.get("pool_baselines")]
    return [name for name in named if name and not (Path(root) / name).is_file()]


def mark_tuning(runs: list[dict], plan: dict) -> None:
    """Set `run["tuning"]` on every run: True for the plan's tuning seeds."""
    tuning = set(plan.get("tuning_seeds") or [])
    for run in runs:
        run["tuning"] = run["seed"] in tuning


def expected_params(plan: dict, control: str) -> dict:
    """The flat params a run of `control` must have: the budget, then the control's own on top."""
    return flatten(plan.get("params") or {}) | flatten(plan["controls"].get(control) or {})


def findings(runs: list[dict], plan: dict | None) -> list[str]:
    """What departs from the plan, one sentence each (see the module docstring); without a plan, one
    finding saying so."""
    if not plan:
        return [
            "no plan: the seeds were not declared before the runs, so none is set apart as tuning "
            "(study/<name>/plan.yaml, populora/analysis/plan.py)"
        ]
    out = []
    if plan.get("retroactive"):
        out.append(
            f"the plan was written after the runs ({plan.get('written', 'date not given')}): it declares "
            "what the runs were, it did not constrain them"
        )
    declared, tuning = set(plan["seeds"]), set(plan.get("tuning_seeds") or [])
    for run in runs:
        if run["control"] not in plan["controls"]:
            out.append(f"{run['name']}: control {run['control']!r} is not in the plan")
            continue
        if run["seed"] not in declared | tuning:
            out.append(f"{run['name']}: seed {run['seed']} is neither a declared nor a tuning seed")
        if run["params"]:
            differ = [
                f"{key} = {run['params'].get(key)!r} (plan: {value!r})"
                for key, value in expected_params(plan, run["control"]).items()
                if _norm(run["params"].get(key)) != _norm(value)
            ]
            if differ:
                out.append(f"{run['name']}: params differ from the plan: {'; '.join(differ)}")
            pool = run["params"].get("heldout.pool_file")
            if plan.get("pool") and pool is not None and pool != plan["pool"]:
                out.append(f"{run['name']}: pool {pool} (plan: {plan['pool']})")
    by_control: dict[str, set] = {}
    for run in runs:
        by_control.setdefault(run["control"], set()).add(run["seed"])
    for control, seeds in sorted(by_control.items()):
        if seeds & tuning and seeds & declared:
            out.append(
                f"{control} mixes tuning seed(s) {sorted(seeds & tuning)} with declared seed(s) "
                f"{sorted(seeds & declared)}: the tuning runs are left out of its figures"
            )
    return out


def _norm(value):
    """Params compared as YAML reads them: lists and tuples alike, ints and floats alike."""
    if isinstance(value, (list, tuple)):
        return tuple(_norm(v) for v in value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return value


def primary(summary: dict, plan: dict | None) -> dict | None:
    """The plan's primary comparison as the summary computed it (on the held-out pool, its last generation),
    with the plan's words and the score it was read on: the plan's `score`, else the first of PRIMARY_SCORES the
    summary has for that pair and endpoint; None without a plan or where it did not run."""
    if not plan:
        return None
    spec = plan["primary"]
    computed = {
        c["score"]: c
        for c in summary["comparisons"]
        if (c["left"], c["right"], c["bench"]) == (spec["left"], spec["right"], spec["endpoint"])
    }
    score = spec.get("score") or next((s for s in PRIMARY_SCORES if s in computed), PRIMARY_SCORES[-1])
    found = computed.get(score)
    if found is None:
        return {**spec, "score": score, "missing": True}
    test = spec.get("test", "welch")
    name = TESTS[test]
    if found["method"] != METHODS[test]:  # one seed on a side (an interim look): say what was computed instead
        name = f"{found['method']} (the plan's {name} needs 2+ seeds a side)"
    return {
        **spec,
        "score": score,
        "test_name": name,
        **{k: found[k] for k in ("delta", "low", "high", "mde", "method", "seeds", "verdict")},
    }


def main(argv: list[str] | None = None) -> int:
    """`plan.yaml control seed`: exit 0 when that run is declared (a declared or tuning seed of a planned
    control), 1 with the reason otherwise; scripts/study.sh asks before each run when STUDY_PLAN is set."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 3:
        print("usage: python -m populora.analysis.plan PLAN CONTROL SEED", file=sys.stderr)
        return 2
    plan = load(args[0])
    run: dict[str, Any] = {"name": f"{args[1]}-s{args[2]}", "control": args[1], "seed": int(args[2]), "params": {}}
    problems = [f for f in findings([run], plan) if f.startswith(run["name"])]
    problems += [
        f"{run['name']}: the plan names {name}, which this checkout does not have" for name in missing_files(plan)
    ]
    for problem in problems:
        print(
            f"plan: {problem}. Fix: declare it in {args[0]} before the run (a new seed is a new plan entry).",
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
