"""DVC plots definitions for the training dynamics (one JSON list per arm, one row per generation)."""

from __future__ import annotations

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


def PLOTS(arms: list[str]) -> list:
    plots = []
    for plot_id, fields, title in SERIES:
        for arm in arms:
            plots.append({f"{arm}_{plot_id}": {
                "template": "linear", "x": "generation", "title": f"{title} ({arm})",
                "y": {DYNAMICS.format(arm=arm): fields},
            }})
    return plots
