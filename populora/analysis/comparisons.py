"""The study analyser: one summary of a grid of runs, whatever fed them (committed run folders,
`populora.analysis.runs`, or DVC experiments, `populora.analysis.experiments`).

    python -m populora.analysis study/learning/runs --plan study/learning/plan.yaml --out study/learning

Per control and benchmark (the held-out pool's last generation, CRUXEval-O/-I): the students' mean per
seed, minus the base, mean over seeds with a 95% Student-t interval. Between two controls, and each
control against the base model, **across seeds** (`populora.core.stats.seed_comparison`): Welch's
interval over the seed-level scores (against the base, a one-sample t over the seeds' gains, each run's
over its own base: one base for every run as a rule, another where a run made its warm base again on another
machine kind; a sampled base's noise added), the MDE from the same t distribution and never below the
rule-of-three bound; one seed on a side falls back to the paired bootstrap over problems, labelled so.
The same for pass@1, with copied answers counted wrong, and for CRUXEval's gold log-likelihood (nats),
and on the held-out pool for every generation (learning curves, also by task type). What the proposers
wrote (`populora.analysis.proposals`): task complexity and coverage by generation per control across seeds; the
final students' pass@k on the pool where the runs measured it (`populora.analysis.passk`).

With a plan (`populora.analysis.plan`): runs of its tuning seeds are marked and left out of every figure of
the answer (kept in the per-run tables, and in `with_tuning`, the held-out comparisons with them in, to
show what they moved); the plan's findings (undeclared seeds, params that differ, a control that mixes
tuning and declared seeds) head the report. Without one, the report says no seeds were declared.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

import numpy as np

from populora.analysis import plan as study_plan
from populora.analysis.passk import passk_summary
from populora.analysis.proposals import proposal_dynamics
from populora.analysis.readings import (
    ACCOUNTING,
    headline_rows,
    run_rows,
    signal_rows,
    training_copy_rows,
    wall_by_machine,
)
from populora.analysis.runs import READ_BENCHES, StudyRunsError
from populora.core.stats import bases_mean_variance, resolution, seed_comparison, t_interval
from populora.heldout.pool import HELDOUT_TYPES, pool_task_type

DIAGNOSTICS = ("truncated", "no_answer", "copies_input", "copies_argument")
# what a comparison compares: per-problem verdicts (pass@1), the same with copies counted wrong, and the
# gold answer's log-likelihood (nats summed over its tokens: continuous, so it moves before a verdict does)
SCORES = {
    "verdicts": "pass@1",
    "copy_free": "copies wrong",
    "gold": "gold log-likelihood",
    "pass_rate": "pass rate at temperature 1",
}
VERDICT_SCORES = ("verdicts", "copy_free")  # 0/1 per problem: the seed-level sd floor applies


def nocopy(control: str) -> str:
    """The `-nocopy` twin of a control as scripts/study.sh names it (`1t1s-null` -> `1t1s-nocopy-null`)."""
    return control[: -len("-null")] + "-nocopy-null" if control.endswith("-null") else control + "-nocopy"


# the comparisons that answer the study's question (study/README.md: how to read the grid); the same
# again between `-nocopy` controls, never across the two (a `-nocopy` study runs at a later commit)
_GRID_COMPARISONS = (
    ("2t2s", "1t1s"),
    ("2t2s", "baseline"),
    ("1t1s", "baseline"),
    ("2t2s", "2t2s-noevo"),
    ("2t2s", "2t2s-null"),
    ("1t1s", "1t1s-null"),
    ("baseline-roles", "baseline"),
    ("1t1s", "baseline-roles"),
    # issue 51: a population against as many independent pairs (the ensemble), and 4T-4S
    ("2t2s", "ensemble"),
    ("ensemble", "1t1s"),
    ("ensemble", "baseline"),
    ("4t4s", "ensemble"),
    ("4t4s", "1t1s"),
    ("4t4s", "baseline"),
)
COMPARISONS = _GRID_COMPARISONS + tuple((nocopy(left), nocopy(right)) for left, right in _GRID_COMPARISONS)
_GRID_ORDER = ("baseline", "baseline-roles", "1t1s", "ensemble", "2t2s", "2t2s-noevo", "4t4s", "1t1s-null", "2t2s-null")
CONTROL_ORDER = _GRID_ORDER + tuple(nocopy(control) for control in _GRID_ORDER)


def _scored(runs: list[dict], bench: str, score: str, base: bool = True) -> bool:
    """Whether every run has the scores `score` names for `bench`, for its students (and the base)."""
    return all(
        bench in r[score] and {*(["base"] if base else []), *r["students"]} <= set(r[score][bench]) for r in runs
    )


def _ids(runs: list[dict], bench: str, score: str) -> list[str]:
    table = runs[0][score][bench]
    return sorted(table["base"] if "base" in table else next(iter(table.values())))


def score_matrix(runs: list[dict], bench: str, which: str = "students", score: str = "verdicts") -> np.ndarray:
    """[seeds, problems] of the per-problem mean score over each run's students (or all members)."""
    ids = _ids(runs, bench, score)
    rows = []
    for run in runs:
        models = run["students"] if which == "students" else run["models"]
        table = run[score][bench]
        if any(set(table[m]) != set(ids) for m in models):
            raise StudyRunsError(f"{run['name']}: {bench} was scored on other problems than {runs[0]['name']}")
        rows.append([mean(table[m][i] for m in models) for i in ids])
    return np.array(rows, dtype=float)


def base_rows(runs: list[dict], bench: str, score: str = "verdicts") -> np.ndarray:
    """[runs, problems]: each run's own base model's per-problem scores on `bench`, in `score_matrix`'s order.
    Usually one base for every run; a run whose base was made again (the warm start on another machine kind
    gives another warm base) is compared with its own."""
    ids = _ids(runs, bench, score)
    return np.array([[run[score][bench]["base"][i] for i in ids] for run in runs], dtype=float)


def curve_matrix(runs: list[dict], gen: int, ids: list[str] | None = None) -> np.ndarray:
    """[seeds, tasks] of the students' mean held-out verdict after generation `gen` (on `ids`: every task)."""
    ids = ids if ids is not None else sorted(runs[0]["verdicts"]["heldout"]["base"])
    return np.array(
        [[mean(run["heldout_curve"][gen][m][i] for m in run["students"]) for i in ids] for run in runs], dtype=float
    )


def curve_bases(runs: list[dict], ids: list[str] | None = None) -> np.ndarray:
    """[seeds, tasks] of each run's own base's held-out verdicts (on `ids`: every task), as `curve_matrix` lays
    out its students'."""
    ids = ids if ids is not None else sorted(runs[0]["verdicts"]["heldout"]["base"])
    return np.array([[run["verdicts"]["heldout"]["base"][i] for i in ids] for run in runs], dtype=float)


def scored(runs: list[dict], gen: int) -> bool:
    """Whether every run scored its students greedily on the pool after generation `gen` (heldout.every)."""
    return all(run["heldout_curve"][gen] for run in runs)


def group(runs: list[dict]) -> dict[str, list[dict]]:
    """Runs by control (in CONTROL_ORDER, then by name), each control's runs by seed."""
    groups: dict[str, list[dict]] = {}
    for run in sorted(runs, key=lambda r: (r["control"], r["seed"])):
        groups.setdefault(run["control"], []).append(run)
    return dict(
        sorted(groups.items(), key=lambda kv: (CONTROL_ORDER.index(kv[0]) if kv[0] in CONTROL_ORDER else 99, kv[0]))
    )


def interval(values, n_problems: int = 0) -> dict:
    """n, mean, sd, 95% t-interval (None with one value; with `n_problems`, verdicts: the sd at least
    `resolution(n_problems)`, as the comparisons take it) and the values themselves."""
    values = [float(v) for v in values]
    t = t_interval(values, resolution(n_problems))
    return {
        "n": len(values),
        "mean": round(mean(values), 6),
        "sd": round(float(np.std(values, ddof=1)), 6) if len(values) > 1 else None,
        "low": t[1] if t else None,
        "high": t[2] if t else None,
        "values": [round(v, 6) for v in values],
    }


def verdict(c: dict, left: str, right: str) -> str:
    """Which side is higher where the interval excludes 0; else "no detectable difference" (its MDE,
    never 0, beside it), or "identical scores" for a continuous score with no spread at all."""
    if c["low"] <= 0 <= c["high"]:
        return "identical scores" if c["mde"] is None else "no detectable difference"
    return f"{left} higher" if c["low"] > 0 else f"{right} higher"


def compare(
    left: str, right: str, a: np.ndarray, b: np.ndarray, *, score: str = "verdicts", samples: int = 0, **extra
) -> dict:
    """`left` - `right` by `seed_comparison` (`right == "base"`: `b` is each seed's base row; for the pass rate over
    `samples` answers per task, the base's own sampling variance goes into the interval)."""
    base_variance = bases_mean_variance(b, samples) if right == "base" and score == "pass_rate" else 0.0
    c = seed_comparison(
        a, b, right_is_base=right == "base", verdicts=score in VERDICT_SCORES, base_variance=base_variance
    )
    if score == "gold" and c["low"] == c["high"] == 0:
        c["mde"] = None  # a continuous score with no spread anywhere: no bound to give
    seeds = [len(a), len(a) if right == "base" else len(b)]
    return {
        "left": left,
        "right": right,
        **extra,
        "score": SCORES[score],
        "seeds": seeds,
        **c,
        "verdict": verdict(c, left, right),
    }


def comparisons(groups: dict[str, list[dict]], pairs) -> list[dict]:
    """Every pair of `pairs` whose controls both ran, then every control against the base model, per
    benchmark and score."""
    out = []
    for left, right in [(lft, rgt) for lft, rgt in pairs if lft in groups and rgt in groups] + [
        (c, "base") for c in groups
    ]:
        for score in SCORES:
            for bench in READ_BENCHES:
                # the runs benchmarked on it (an experiment DVC cannot read is left out), each with this score
                # (a control one of whose runs lacks it, e.g. the gold log-likelihood under vLLM, is left out)
                lefts = [r for r in groups[left] if bench in r["verdicts"]]
                rights = [] if right == "base" else [r for r in groups[right] if bench in r["verdicts"]]
                if (
                    not lefts
                    or not _scored(lefts, bench, score, base=right == "base")
                    or (right != "base" and not (rights and _scored(rights, bench, score, base=False)))
                ):
                    continue
                b = base_rows(lefts, bench, score) if right == "base" else score_matrix(rights, bench, score=score)
                out.append(
                    compare(
                        left,
                        right,
                        score_matrix(lefts, bench, score=score),
                        b,
                        score=score,
                        bench=bench,
                        samples=int(lefts[0]["params"].get("heldout.samples") or 0),
                    )
                )
    return out


def _distinct_bases(runs: list[dict], bases: np.ndarray) -> dict:
    """Where the runs' bases differ: `bases`, each run's own base score by run name (the row's `base` is their
    mean); nothing where every run has the same base (up to float rounding)."""
    # one base model scored on two machines agrees to float rounding (a gold log-likelihood's sixth decimal)
    if np.allclose(bases, bases[0], rtol=1e-5, atol=1e-6):
        return {}
    return {"bases": {run["name"]: round(float(b), 6) for run, b in zip(runs, bases)}}


def control_rows(groups: dict[str, list[dict]]) -> list[dict]:
    """Per control: scores per benchmark (students, all members, minus base), accounting, diagnostics."""
    rows = []
    for control, members in groups.items():
        walls = [float(r["wall_s"]) for r in members if r["wall_s"] is not None]
        row = {
            "control": control,
            "seeds": [r["seed"] for r in members],
            "arm": members[0]["arm"],
            "wall_s": interval(walls) if walls else None,
            "wall_by_machine": wall_by_machine(members),
            "bench": {},
            "accounting": {},
            "diagnostics": {},
        }
        for bench in READ_BENCHES:
            if not _scored(members, bench, "verdicts", base=False):
                continue
            students = score_matrix(members, bench)
            n = students.shape[1]
            row["bench"][bench] = {
                "students": interval(students.mean(axis=1), n),
                "n_problems": n,
                "members": interval(score_matrix(members, bench, "members").mean(axis=1), n),
            }
            if _scored(members, bench, "verdicts"):
                bases = base_rows(members, bench).mean(axis=1)  # each run's own base
                row["bench"][bench] |= {
                    "students_minus_base": interval(students.mean(axis=1) - bases, n),
                    "base": round(float(bases.mean()), 6),
                    **_distinct_bases(members, bases),
                }
            # a log-likelihood and a pass rate over answers have no resolution floor
            for score, problems in (("copy_free", n), ("gold", 0), ("pass_rate", 0)):
                if _scored(members, bench, score):
                    seeds, bases = (
                        score_matrix(members, bench, score=score).mean(axis=1),
                        base_rows(members, bench, score).mean(axis=1),
                    )
                    row["bench"][bench][score] = {
                        "students": interval(seeds, problems),
                        "base": round(float(bases.mean()), 6),
                        "students_minus_base": interval(seeds - bases, problems),
                        **_distinct_bases(members, bases),
                    }
            diag: dict[str, list[float]] = {key: [] for key in (*DIAGNOSTICS, "mean_answer_tokens")}
            for run in members:
                for d in (run["diagnostics"].get(bench, {}).get(model) or {} for model in run["students"]):
                    if d.get("n"):
                        for key in DIAGNOSTICS:
                            diag[key].append(d[key] / d["n"])
                        diag["mean_answer_tokens"].append(d["mean_answer_tokens"])
            row["diagnostics"][bench] = {key: round(mean(v), 4) for key, v in diag.items() if v}
        for role in ("students", "teachers"):
            for what in ACCOUNTING:
                values = [v for v in (r["summary"].get(f"per_adapter.{role}.{what}") for r in members) if v is not None]
                if values:
                    row["accounting"][f"{role}.{what}"] = round(mean(values), 4)
        rows.append(row)
    return rows


def heldout_curves(groups: dict[str, list[dict]], pairs) -> dict:
    """The learning curves on the held-out pool: per control and generation the students' accuracy per
    seed (mean and t-interval), by task type too, and per generation the comparisons of `pairs` and each
    control against the base (`compare`). A generation some run did not score (heldout.every) is None in the
    curves and has no comparison. Empty when no run has a pool."""
    groups = {c: rs for c, rs in groups.items() if all(r["heldout_curve"] for r in rs)}
    if not groups:
        return {}
    everyone = [r for rs in groups.values() for r in rs]
    base = everyone[0]["verdicts"]["heldout"]["base"]  # its task ids: the pool's, the same in every run
    gens = {c: min(len(r["heldout_curve"]) for r in rs) for c, rs in groups.items()}
    out: dict[str, Any] = {
        # the base line of the curves: the runs' bases' mean (one base, or each run's own: `bases`)
        "base": round(float(curve_bases(everyone).mean()), 6),
        **_distinct_bases(everyone, curve_bases(everyone).mean(axis=1)),
        "n_tasks": len(base),
        "comparisons": [],
        "controls": {
            c: [
                interval(curve_matrix(rs, g).mean(axis=1), len(base)) if scored(rs, g) else None for g in range(gens[c])
            ]
            for c, rs in groups.items()
        },
    }
    out["by_type"] = {}
    for task_type in [t for t in HELDOUT_TYPES if t in {pool_task_type(i) for i in base}]:
        ids = sorted(t for t in base if pool_task_type(t) == task_type)
        out["by_type"][task_type] = {
            "n_tasks": len(ids),
            "base": round(float(curve_bases(everyone, ids).mean()), 6),
            "controls": {
                c: [
                    interval(curve_matrix(rs, g, ids).mean(axis=1), len(ids)) if scored(rs, g) else None
                    for g in range(gens[c])
                ]
                for c, rs in groups.items()
            },
        }
    for left, right in [(lft, rgt) for lft, rgt in pairs if lft in groups and rgt in groups] + [
        (c, "base") for c in groups
    ]:
        for g in range(gens[left] if right == "base" else min(gens[left], gens[right])):
            if not scored(groups[left], g) or (right != "base" and not scored(groups[right], g)):
                continue
            other = curve_bases(groups[left]) if right == "base" else curve_matrix(groups[right], g)
            out["comparisons"].append(
                compare(left, right, curve_matrix(groups[left], g), other, bench="heldout", generation=g)
            )
    return out


def summarize(runs: list[dict], pairs=COMPARISONS, plan: dict | None = None, notes: list[str] | None = None) -> dict:
    """The study's summary (study.json): see the module docstring. `pairs`: the comparisons between
    controls (default COMPARISONS; a plan may name its own)."""
    if plan:
        pairs = [tuple(p) for p in plan.get("comparisons") or pairs]
        study_plan.mark_tuning(runs, plan)
    answer = [r for r in runs if not r.get("tuning")]
    if not answer:
        raise StudyRunsError("every run is a tuning run of the plan: nothing is left to answer with")
    groups = group(answer)
    curves = heldout_curves(groups, pairs)
    tuned = [r for r in runs if r.get("tuning")]
    with_tuning = heldout_curves(group(runs), pairs)["comparisons"] if tuned and curves else []
    final = max((c["generation"] for c in with_tuning), default=0)
    summary: dict[str, Any] = {
        "runs": [r["name"] for r in runs],
        "tuning_runs": [r["name"] for r in tuned],
        "controls": control_rows(groups),
        "comparisons": comparisons(groups, pairs),
        "per_run": run_rows(runs),
        "training_copies": training_copy_rows(runs),
        "signal": signal_rows(runs),
        "heldout_curves": curves,
        "with_tuning": [c for c in with_tuning if c["generation"] == final],
        "proposals": proposal_dynamics(groups, pairs),
        "passk": passk_summary(groups, pairs),
        "headline": headline_rows(groups) if any(r.get("headline") for r in runs) else [],
        "plan": study_plan.findings(runs, plan),
        "notes": list(notes or []),
    }
    summary["primary"] = study_plan.primary(summary, plan)
    return summary
