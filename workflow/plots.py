"""DVC plots definitions for the training dynamics (one JSON list per arm, one row per generation).

Per arm: solve rates, validity, rewards, program complexity, coverage, TrueSkill mu per member
and PFSP pairing counts per (teacher, student). Across arms: overall validity, solve rate and
rewards of the population next to the baseline. `python -m workflow.render_dvc` writes them into
dvc.yaml; `dvc plots show` draws them.
"""

from __future__ import annotations

from populora.config import members_of_arm, slots_of_arm

DYNAMICS = "results/{arm}/dynamics.json"

# (plot id, y fields, title)
SERIES = [
    ("solve_rate", ["code_o.solve_rate", "code_i.solve_rate", "code_f.solve_rate"], "Student solve rate per task type"),
    ("validity", ["code_o.validity_rate", "code_i.validity_rate", "code_f.validity_rate"], "Proposal validity rate"),
    ("rewards", ["teacher_reward_mean", "student_reward_mean"], "Mean reward per role"),
    ("complexity", ["code_o.program.ast_depth", "code_o.program.cyclomatic_complexity", "code_o.program.loc"],
     "Complexity of valid code_o programs"),
    ("coverage", ["coverage_distinct_programs"], "Cumulative distinct normalised programs"),
]

# (plot id, field, title): one line per arm
COMPARISONS = [
    ("validity_rate", "validity_rate", "Proposal validity rate, all types"),
    ("solve_rate", "solve_rate", "Student solve rate, all types"),
    ("teacher_reward", "teacher_reward_mean", "Mean teacher reward"),
    ("student_reward", "student_reward_mean", "Mean student reward"),
]


def _linear(title: str, y: dict) -> dict:
    return {"template": "linear", "x": "generation", "title": title, "y": y}


def PLOTS(params) -> list:
    """Plot definitions for the arms of validated `params` (populora.config.Params)."""
    arms = list(params.dag.arms)
    plots = []
    for plot_id, fields, title in SERIES:
        for arm in arms:
            plots.append({f"{arm}_{plot_id}": _linear(f"{title} ({arm})", {DYNAMICS.format(arm=arm): fields})})
    for arm in arms:
        roles = members_of_arm(params, arm)
        plots.append({f"{arm}_ratings": _linear(f"TrueSkill mu per member ({arm})", {DYNAMICS.format(arm=arm): [
            f"rating.{slot}.mu" for slot in slots_of_arm(params, arm)]})})
        pairs = [f"pairing.{t}.{s}" for t in roles["teachers"] for s in roles["students"]]
        plots.append({f"{arm}_pairing": _linear(f"PFSP pairing: task slots per teacher.student ({arm})",
                                                {DYNAMICS.format(arm=arm): pairs})})
    if len(arms) > 1:
        for plot_id, field, title in COMPARISONS:
            plots.append({f"arms_{plot_id}": _linear(f"{title}: {' vs '.join(arms)}",
                                                     {DYNAMICS.format(arm=arm): [field] for arm in arms})})
    return plots
