"""A study's gate, read off its runs: did each gate seed's final students end above the base, and how many seeds
a control then needs for the plan's minimum detectable effect.

    python -m populora study study/population-warm/runs --plan study/population-warm/plan.yaml --out study/population-warm

The plan's `gate` block names a control and its seeds (`study/population-warm/plan.yaml`). For each gate seed the
final students' pass rate over the pool's answers at temperature 1 (their mean, per task) is paired with the
base's over the pool's tasks: a 95% t-interval over the per-task differences, the seed above the base when the
interval excludes 0 on the positive side. The gate passes when every gate seed has run and is above. The seeds'
spread (the standard deviation of their final pass rates) sets how many seeds a control needs for a difference of
`mde` points between two controls at 80% power: Welch's interval with Hsu's degrees of freedom (n - 1 for n seeds
a side), never fewer than the plan's minimum.
"""

from __future__ import annotations

import math
import statistics

from populora.core.stats import t_interval, t_mde

MIN_SEEDS = 6  # issue 57: never fewer seeds a control than six
MAX_SEEDS = 200  # beyond this the spread asks for more runs than any machine here gives: reported as None


def seeds_for_mde(sd: float, mde: float, minimum: int = MIN_SEEDS) -> int | None:
    """The fewest seeds a control (equal on both sides) at which Welch's MDE between two controls, with Hsu's
    degrees of freedom, is at most `mde`; `sd` the seed-level standard deviation (same units). None past MAX_SEEDS.

    >>> seeds_for_mde(2.0, 5.0), seeds_for_mde(4.0, 5.0), seeds_for_mde(8.0, 5.0)
    (6, 13, 43)
    >>> seeds_for_mde(0.0, 5.0), seeds_for_mde(100.0, 5.0) is None
    (6, True)
    """
    for n in range(max(minimum, 2), MAX_SEEDS + 1):
        if t_mde(sd * math.sqrt(2 / n), n - 1) <= mde:
            return n
    return None


def seed_against_base(run: dict, endpoint: str = "heldout") -> dict | None:
    """One run's final students against the base on `endpoint`'s pass rates, paired over tasks (points);
    None where the run has no pass rates or no student."""
    rates = run.get("pass_rate", {}).get(endpoint) or {}
    base, students = rates.get("base"), [rates[name] for name in run.get("students", []) if name in rates]
    if not base or not students:
        return None
    tasks = sorted(set(base).intersection(*students))
    student = {task: sum(s[task] for s in students) / len(students) for task in tasks}
    mean, low, high = t_interval([100 * (student[task] - base[task]) for task in tasks]) or (math.nan,) * 3
    return {
        "run": run["name"],
        "seed": run["seed"],
        "tasks": len(tasks),
        "students": round(100 * sum(student.values()) / len(tasks), 2),
        "base": round(100 * sum(base[task] for task in tasks) / len(tasks), 2),
        "difference": round(mean, 2),
        "low": round(low, 2),
        "high": round(high, 2),
        "above": bool(low > 0),
    }


def gate_verdict(runs: list[dict], plan: dict | None, mde: float = 5.0) -> dict | None:
    """The plan's gate over `runs`: per gate seed `seed_against_base`, the verdict (passed, failed, or pending
    while a gate seed has not run), the seeds' spread and `seeds_for_mde` at it. None without a gate."""
    gate = (plan or {}).get("gate")
    if not gate:
        return None
    control, seeds = gate["control"], list(gate["seeds"])
    found = {run["seed"]: run for run in runs if run["control"] == control and run["seed"] in seeds}
    per_seed = [row for seed in seeds if seed in found and (row := seed_against_base(found[seed]))]
    finals = [row["students"] for row in per_seed]
    sd = statistics.stdev(finals) if len(finals) >= 2 else None
    if any(not row["above"] for row in per_seed):
        verdict = "failed"
    elif len(per_seed) == len(seeds):
        verdict = "passed"
    else:
        verdict = "pending"
    return {
        "control": control,
        "seeds": seeds,
        "ran": sorted(found),
        "per_seed": per_seed,
        "verdict": verdict,
        "sd": None if sd is None else round(sd, 2),
        "mde": mde,
        "seeds_needed": None if sd is None else seeds_for_mde(sd, mde),
        "minimum_seeds": MIN_SEEDS,
    }


def gate_lines(gate: dict | None) -> list[str]:
    """study.md's section on the gate."""
    if not gate:
        return []
    lines = [
        "## The gate",
        "",
        f"The plan's gate: {gate['control']} on seeds {', '.join(map(str, gate['seeds']))}, each seed's final "
        "students above the base on the pool's pass rate over its answers at temperature 1 (points; a 95% "
        "t-interval over the per-task differences excluding 0). "
        f"**Verdict: {gate['verdict']}** ({len(gate['per_seed'])} of {len(gate['seeds'])} seeds measured).",
        "",
        "| seed | run | tasks | students | base | difference | 95% interval | above the base |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in gate["per_seed"]:
        lines.append(
            f"| {row['seed']} | {row['run']} | {row['tasks']} | {row['students']:.1f} | {row['base']:.1f} | "
            f"{row['difference']:+.1f} | [{row['low']:+.1f}, {row['high']:+.1f}] | {'yes' if row['above'] else 'no'} |"
        )
    if gate["sd"] is not None:
        needed = gate["seeds_needed"]
        lines += [
            "",
            f"The seeds' spread: a standard deviation of {gate['sd']:.2f} points in the students' final pass rate. "
            f"A {gate['mde']:g}-point difference between two controls at 80% power (Welch, Hsu's degrees of freedom) "
            + (
                f"needs {needed} seeds a control (never fewer than {gate['minimum_seeds']})."
                if needed
                else f"needs more than {MAX_SEEDS} seeds a control at this spread."
            ),
        ]
    return [*lines, ""]
