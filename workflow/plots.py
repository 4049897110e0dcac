"""DVC plots definitions for the training dynamics (one JSON list per arm, one row per generation).

Per arm: solve rates, validity, rewards, program complexity, coverage (the panels of populora/report/panels.py, which the report's
`dynamics.png` draws too), TrueSkill mu per member
and PFSP pairing counts per (teacher, student); the update's loss and gradient norm per optimizer step
(update_steps.json, x = the run's step). Across arms: overall validity, solve rate and
rewards of the population next to the baseline. `python -m workflow.render_dvc` writes them into
dvc.yaml; `dvc plots show` draws them.
"""

from __future__ import annotations

from populora.core.topology import members_of_arm, slots_of_arm
from populora.report.panels import COMPARISONS, PANELS
from workflow.dag import stage_named

DYNAMICS = stage_named("dynamics").outputs["dynamics"]  # the per-arm plots table, spelled once in workflow/dag.py
UPDATE_STEPS = stage_named("dynamics").outputs["update_steps"]  # one row per optimizer step (populora/report/live.py)
STEP_FIGURES = (
    ("loss", "REINFORCE loss per optimizer step"),
    ("grad_norm", "Gradient norm before clipping per optimizer step"),
)

# The panels are shared with the report's PNG figure (populora/report/panels.py): one list.
SERIES = [(panel.id, list(panel.fields), panel.title) for panel in PANELS]


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
        plots.append(
            {
                f"{arm}_ratings": _linear(
                    f"TrueSkill mu per member ({arm})",
                    {DYNAMICS.format(arm=arm): [f"rating.{slot}.mu" for slot in slots_of_arm(params, arm)]},
                )
            }
        )
        pairs = [f"pairing.{t}.{s}" for t in roles["teachers"] for s in roles["students"]]
        plots.append(
            {
                f"{arm}_pairing": _linear(
                    f"PFSP pairing: task slots per teacher.student ({arm})", {DYNAMICS.format(arm=arm): pairs}
                )
            }
        )
        for figure, title in STEP_FIGURES:
            plots.append(
                {
                    f"{arm}_update_{figure}": {
                        **_linear(
                            f"{title} ({arm})",
                            {UPDATE_STEPS.format(arm=arm): [f"{slot}.{figure}" for slot in slots_of_arm(params, arm)]},
                        ),
                        "x": "step",
                    }
                }
            )
    if len(arms) > 1:
        for plot_id, field, title in COMPARISONS:
            plots.append(
                {
                    f"arms_{plot_id}": _linear(
                        f"{title}: {' vs '.join(arms)}", {DYNAMICS.format(arm=arm): [field] for arm in arms}
                    )
                }
            )
    return plots
