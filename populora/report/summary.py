"""An arm's summary.json (`stages.dynamics`): the last generation's figures (`final.*`), means over
generations (`mean.*`), and what each adapter slot got over the run (`total.*`, `per_adapter.*`), under
stable keys so `dvc metrics diff` compares arms and experiments directly. Read by the report's
headline (`populora.report.headline`) and the study tables.
"""

from __future__ import annotations

from statistics import mean

MEAN_KEYS = (
    "teacher_reward_mean",
    "student_reward_mean",
    "validity_rate",
    "solve_rate",
    "code_o.solve_rate",
    "code_i.solve_rate",
    "code_f.solve_rate",
    "code_o.validity_rate",
    "code_i.validity_rate",
    "code_f.validity_rate",
    "signal.format_only_share",
    "signal.correctness_share",
)


ACCOUNTED = ("optimizer_steps", "trained_tokens", "rollouts_with_signal")  # summed over the run per slot


def accounting(rows: list[dict], roles: dict[str, list[str]]) -> dict:
    """What each adapter slot got over the run (`total.<what>.<slot>`: optimizer steps, trained
    tokens, rollouts with signal) and how far it moved (`final.delta_norm.<slot>`), with the mean
    per adapter of each role (`per_adapter.<role>.<what>`): the figures that show whether two arms
    were compute-matched."""
    out: dict[str, float | None] = {}
    slots = sorted({s for members in roles.values() for s in members})
    for what in ACCOUNTED:
        for slot in slots:
            out[f"total.{what}.{slot}"] = sum(r.get(f"{what}.{slot}") or 0 for r in rows)
    for slot in slots:
        out[f"final.delta_norm.{slot}"] = rows[-1].get(f"delta_norm.{slot}")
    for role, members in roles.items():
        for what in (*ACCOUNTED, "delta_norm"):
            keys = [f"final.delta_norm.{slot}" if what == "delta_norm" else f"total.{what}.{slot}" for slot in members]
            values = [value for value in (out.get(key) for key in keys) if value is not None]
            out[f"per_adapter.{role}.{what}"] = mean(values) if values else None
    return out


def arm_summary(rows: list[dict], roles: dict[str, list[str]] | None = None) -> dict:
    last = rows[-1]
    summary: dict[str, float | None] = {
        f"final.{k}": v for k, v in last.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
    }
    for key in MEAN_KEYS:
        values = [r[key] for r in rows if r.get(key) is not None]
        summary[f"mean.{key}"] = mean(values) if values else None
    summary["generations"] = len(rows)
    if roles:
        summary |= accounting(rows, roles)
    return summary
