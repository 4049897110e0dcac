"""Per-run readings of a study (no statistics across seeds): the per-run table, the students' training
answers that copy, the signal accounting per generation, wall time per kind of machine, and (runs from
`dvc exp show`) the spread of each headline metric. Used by `populora.analysis.comparisons.summarize`.

Signal accounting: of the students' rollouts with a nonzero advantage, the share whose group (the
rollouts its advantage was measured against) differs only in format (-1 malformed against -0.5 wrong, no
answer right) and the share that differs in correctness. Runs whose dynamics carry `signal.*`
(`populora.rl.rollouts.signal_accounting`) give it exactly; older runs with per-task advantages give
a lower bound on the format-only share: a group differs in correctness only if one of its answers is right,
so at most `solve.samples` x (answers right) rollouts do, the rest with signal differ in format only.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

import numpy as np

from populora.analysis.runs import READ_BENCHES
from populora.bench.diagnostics import TRAINING_TYPES
from populora.core.stats import is_finite_number, t_interval

ACCOUNTING = ("optimizer_steps", "trained_tokens", "rollouts_with_signal", "delta_norm")


def machine_kind(machine: dict | None) -> str | None:
    """How a run's wall time was made: the CPU features, and the torch threads of its stages where recorded
    ("avx2, 1 thread": a run beside another, one thread each, is slower than one alone on two); None: unrecorded.

    >>> machine_kind({"features": "avx2", "threads": 1}), machine_kind({"features": "avx2"}), machine_kind(None)
    ('avx2, 1 thread', 'avx2', None)
    """
    features, threads = (machine or {}).get("features"), (machine or {}).get("threads")
    if threads is None:
        return features
    return f"{features or 'unrecorded features'}, {threads} thread{'' if threads == 1 else 's'}"


def wall_by_machine(members: list[dict]) -> list[dict]:
    """A control's mean wall time per kind of machine its runs recorded (`machine_kind`; `None`: not recorded):
    runs of one study can be drawn on machines several times apart in speed, or run on one thread beside
    another run, whose mean means nothing."""
    kinds: dict = {}
    for run in members:
        if run["wall_s"] is not None:
            kinds.setdefault(machine_kind(run.get("machine")), []).append(float(run["wall_s"]))
    return [{"machine": kind, "n": len(walls), "mean_s": round(mean(walls), 1)} for kind, walls in kinds.items()]


def training_copy_rows(runs: list[dict]) -> list[dict]:
    """Per run and task type, per generation: the students' training answers, those that copy what
    the task showed, and the copies graded right (runs without training_answers.json: none)."""
    rows = []
    for run in runs:
        for task_type in TRAINING_TYPES:
            gens = [counts[task_type] for _, counts in sorted(run["training"].items()) if task_type in counts]
            if gens:
                rows.append(
                    {
                        "run": run["name"],
                        "control": run["control"],
                        "type": task_type,
                        **{key: [g[key] for g in gens] for key in ("n", "correct", "copies", "copies_correct")},
                    }
                )
    return rows


def _slots(run: dict) -> list[str]:
    """The students' slots (`student0`, `solo`): the model names' part after the arm."""
    return [name.split("-", 1)[1] for name in run["students"]]


def signal_generation(row: dict, slots: list[str], params: dict) -> dict:
    """One generation's signal accounting: `{"with_signal", "format_only", "correctness", "exact"}` from
    the row's `signal.*` keys, else the bound (see the module docstring; `format_only` then a lower
    bound, `correctness` an upper one); `{}` where neither can be read."""
    if row.get("signal.solve_with_signal") is not None:
        return {
            "with_signal": row["signal.solve_with_signal"],
            "format_only": row["signal.format_only"],
            "correctness": row["signal.correctness"],
            "exact": True,
        }
    if params.get("reward.advantage_baseline") != "per_task" or not params.get("solve.samples"):
        return {}  # a type-wide baseline: one right answer gives a whole type's rollouts a correctness signal
    recorded = [row.get(f"rollouts_with_signal.{slot}") for slot in slots]
    counts = [c for c in recorded if c is not None]
    if not slots or len(counts) < len(recorded):
        return {}
    # an adapter in both roles (the baseline's solo) counts its proposals' signal too: take them all off
    proposals = sum(row.get(f"samples.{slot}/propose") or 0 for slot in slots)
    with_signal = max(sum(counts) - proposals, 0)
    right = sum(row.get(f"{t}.solved") or 0 for t in ("code_o", "code_i", "code_f"))
    correctness = min(with_signal, int(params["solve.samples"]) * right)
    return {
        "with_signal": with_signal,
        "format_only": with_signal - correctness,
        "correctness": correctness,
        "exact": False,
    }


def signal_rows(runs: list[dict]) -> list[dict]:
    """Per run: the signal accounting of each generation and of the run (sums), `exact` or a bound."""
    out = []
    for run in runs:
        gens = [signal_generation(row, _slots(run), run["params"]) for row in run["rows"]]
        if not gens or not all(gens):
            continue
        total = {key: sum(g[key] for g in gens) for key in ("with_signal", "format_only", "correctness")}
        out.append(
            {
                "run": run["name"],
                "control": run["control"],
                "tuning": bool(run.get("tuning")),
                "exact": all(g["exact"] for g in gens),
                "generations": gens,
                "total": total,
            }
        )
    return out


def share(entry: dict, key: str) -> float | None:
    """`format_only` or `correctness` as a share of the rollouts with signal (None: no rollout had any)."""
    return round(entry[key] / entry["with_signal"], 4) if entry["with_signal"] else None


def run_rows(runs: list[dict]) -> list[dict]:
    """Per run: the students' mean score per benchmark (raw and with copies counted wrong), the
    students' copying share, the accounting per role (the run's totals per adapter), wall time, the
    machine it was taken on and whether it is a tuning run; first a row for the base model."""
    rows: list[dict] = []
    for run in [runs[0], *runs] if runs else []:
        is_base = not rows
        row: dict[str, Any] = {
            "run": "base" if is_base else run["name"],
            "control": None if is_base else run["control"],
            "seed": None if is_base else run["seed"],
            "wall_s": None if is_base else run["wall_s"],
            "attempts": None if is_base else run.get("attempts", 1),
            "tuning": not is_base and bool(run.get("tuning")),
            "machine": None if is_base else run["machine"],
            "bench": {},
        }
        models = ["base"] if is_base else run["students"]
        for bench in READ_BENCHES:
            if bench not in run["verdicts"] or not all(m in run["verdicts"][bench] for m in models):
                continue
            entry = {
                "pass@1": round(float(np.mean([np.mean(list(run["verdicts"][bench][m].values())) for m in models])), 6)
            }
            if all(m in run["copy_free"].get(bench, {}) for m in models):
                entry["copies_wrong"] = round(
                    float(np.mean([np.mean(list(run["copy_free"][bench][m].values())) for m in models])), 6
                )
            if not is_base:
                diag = [run["diagnostics"].get(bench, {}).get(m) or {} for m in models]
                for key in ("copies_input", "copies_argument"):
                    shares = [d[key] / d["n"] for d in diag if d.get("n")]
                    if shares:
                        entry[key] = round(mean(shares), 6)
            row["bench"][bench] = entry
        if not is_base and run["summary"]:
            row["accounting"] = {
                role: {what: run["summary"].get(f"per_adapter.{role}.{what}") for what in ACCOUNTING}
                for role in ("students", "teachers")
            }
        rows.append(row)
    return rows


def headline_rows(groups: dict[str, list[dict]]) -> list[dict]:
    """Per control and numeric headline key (runs from `dvc exp show`: results/headline.json): n, mean,
    sd, min, max, the mean's 95% t-interval across seeds (None with one seed) and the seeds."""
    rows = []
    for control, members in groups.items():
        keys = sorted({k for r in members for k, v in (r.get("headline") or {}).items() if is_finite_number(v)})
        for key in keys:
            kept = [r for r in members if is_finite_number((r.get("headline") or {}).get(key))]
            values = [float(r["headline"][key]) for r in kept]
            rows.append(
                {
                    "control": control,
                    "arms": kept[0].get("arms"),
                    "ablation": kept[0].get("ablation"),
                    "key": key,
                    "n": len(values),
                    "mean": round(mean(values), 6),
                    "sd": round(float(np.std(values, ddof=1)), 6) if len(values) > 1 else 0.0,
                    "min": min(values),
                    "max": max(values),
                    "interval": t_interval(values),
                    "seeds": sorted(r["seed"] for r in kept),
                }
            )
    return rows
