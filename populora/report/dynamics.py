"""Training-dynamics figures of the report, per generation, population vs baseline.

* `dynamics.png`     the shared panels (populora/report/panels.py, also the DVC plots): solve rate
                     and validity per task type with 95% Wilson bands and the n of every point,
                     mean teacher/student reward, complexity of valid code_o programs (n = valid
                     proposals per point), coverage;
* `complexity.png`   mean AST depth, cyclomatic complexity, lines and distinct variables of valid
                     proposed programs, per task type (n per point);
* `ratings.png`      TrueSkill mu +- sigma of every slot, one panel per arm.

`dynamics` maps an arm to its `dynamics.json` rows (one flat dict per generation, written by
stages/dynamics.py). Either arm may be missing.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display on build machines and cluster nodes
import matplotlib.pyplot as plt

from populora.core.io import write_figure
from populora.core.stats import is_finite_number, wilson_interval
from populora.report.figures import ARM_COLORS
from populora.report.metrics import BASELINE, POPULATION
from populora.report.panels import PANELS, TASK_TYPES, sample_size_keys

COMPLEXITY = ("ast_depth", "cyclomatic_complexity", "loc", "distinct_variables")
COMPLEXITY_TITLES = {
    "ast_depth": "AST depth",
    "cyclomatic_complexity": "cyclomatic complexity",
    "loc": "lines of code",
    "distinct_variables": "distinct variables",
}
TITLE_WIDTH = 44  # characters per line of a subplot title: one of a 13-inch row of three, at 9 pt


def _series(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for index, row in enumerate(rows):
        value = row.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            xs.append(row.get("generation", index))
            ys.append(value)
    return xs, ys


def arm_order(arms) -> list[str]:
    """population first, then baseline, then anything else by name."""
    rank = {POPULATION: 0, BASELINE: 1}
    return sorted(arms, key=lambda a: (rank.get(a, 2), a))


# Sample size behind a dynamics value: (successes key or None, n key), from the same row.
# Rates get a 95% Wilson band; every point is labelled with its n.
def _finite_or_none(value) -> float | None:
    return value if is_finite_number(value) else None


def _panel(ax, dynamics: dict[str, list[dict]], key: str, title: str) -> None:
    drawn = False
    counted = sample_size_keys(key)
    for arm in arm_order(dynamics):
        rows = dynamics[arm]
        xs, ys = _series(rows, key)
        if not xs:
            continue
        color = ARM_COLORS.get(arm, "tab:green")
        ax.plot(xs, ys, marker="o", color=color, label=arm)
        drawn = True
        if counted is None:
            continue
        hits_key, n_key = counted
        kept = [
            (row.get("generation", i), row) for i, row in enumerate(rows) if _finite_or_none(row.get(key)) is not None
        ]
        sizes = [_finite_or_none(row.get(n_key)) for _, row in kept]
        for (x, _), y, n in zip(kept, ys, sizes):
            if n is not None:
                ax.annotate(
                    f"n={int(n)}",
                    (x, y),
                    textcoords="offset points",
                    xytext=(0, 6),
                    ha="center",
                    fontsize=6,
                    color=color,
                )
        if hits_key is not None:
            bands = [
                (x, wilson_interval(int(row[hits_key]), int(row[n_key])))
                for x, row in kept
                if _finite_or_none(row.get(hits_key)) is not None and _finite_or_none(row.get(n_key))
            ]
            if bands:
                ax.fill_between(
                    [x for x, _ in bands],
                    [lo for _, (lo, _) in bands],
                    [hi for _, (_, hi) in bands],
                    color=color,
                    alpha=0.12,
                    linewidth=0,
                )
    _finish_generation_axes(ax, title, drawn)


def _finish_generation_axes(ax, title: str, drawn: bool) -> None:
    """Title (wrapped: long ones would run into their neighbours'), generation x axis with whole-number
    ticks, grid, and a legend or a "no data" mark."""
    ax.set_title("\n".join(textwrap.wrap(title, TITLE_WIDTH)), fontsize=9)
    ax.set_xlabel("generation", fontsize=9)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=8)
        ax.xaxis.get_major_locator().set_params(integer=True)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")


def plot_dynamics(dynamics: dict[str, list[dict]], path: Path) -> None:
    """One subplot per field of the shared PANELS (the same series `dvc plots show` draws)."""
    subplots = [(field, title) for panel in PANELS for field, title in zip(panel.fields, panel.field_titles)]
    columns = 3
    rows = -(-len(subplots) // columns)
    # constrained layout makes room for two-line titles and the suptitle (tight_layout let them overlap)
    fig, axes = plt.subplots(rows, columns, figsize=(13, 3.4 * rows), squeeze=False, layout="constrained")
    for ax, (key, title) in zip(axes.flat, subplots):
        _panel(ax, dynamics, key, title)
    for ax in list(axes.flat)[len(subplots) :]:
        ax.axis("off")
    fig.suptitle("Training dynamics: population vs baseline (bands: 95% Wilson; n per point)")
    write_figure(path, fig, dpi=110)
    plt.close(fig)


def plot_complexity(dynamics: dict[str, list[dict]], path: Path) -> None:
    fig, axes = plt.subplots(len(COMPLEXITY), len(TASK_TYPES), figsize=(13, 12), squeeze=False)
    for row, metric in enumerate(COMPLEXITY):
        for col, task_type in enumerate(TASK_TYPES):
            _panel(
                axes[row][col], dynamics, f"{task_type}.program.{metric}", f"{COMPLEXITY_TITLES[metric]}, {task_type}"
            )
    fig.suptitle("Complexity of valid proposed programs (mean per generation)")
    fig.tight_layout()
    write_figure(path, fig, dpi=110)
    plt.close(fig)


def rating_slots(rows: list[dict]) -> list[str]:
    return sorted(
        {key.split(".")[1] for row in rows for key in row if key.startswith("rating.") and key.endswith(".mu")}
    )


def plot_ratings(dynamics: dict[str, list[dict]], path: Path) -> None:
    arms = arm_order(dynamics) or ["(none)"]
    fig, axes = plt.subplots(1, len(arms), figsize=(6.5 * len(arms), 4.5), squeeze=False)
    for ax, arm in zip(axes[0], arms):
        rows = dynamics.get(arm, [])
        slots = rating_slots(rows)
        cmap = plt.get_cmap("tab10")
        for index, slot in enumerate(slots):
            xs, mu = _series(rows, f"rating.{slot}.mu")
            _, sigma = _series(rows, f"rating.{slot}.sigma")
            if len(sigma) == len(mu):
                ax.fill_between(
                    xs,
                    [m - s for m, s in zip(mu, sigma)],
                    [m + s for m, s in zip(mu, sigma)],
                    color=cmap(index % 10),
                    alpha=0.12,
                )
            ax.plot(xs, mu, marker="o", color=cmap(index % 10), label=slot)
        _finish_generation_axes(ax, f"TrueSkill mu +- sigma ({arm})", bool(slots))
    fig.tight_layout()
    write_figure(path, fig, dpi=110)
    plt.close(fig)


def final_dynamics_table(dynamics: dict[str, list[dict]]) -> str:
    keys = (
        [f"{t}.solve_rate" for t in TASK_TYPES]
        + [f"{t}.validity_rate" for t in TASK_TYPES]
        + [
            "teacher_reward_mean",
            "student_reward_mean",
            "signal.format_only_share",
            "signal.correctness_share",
            "coverage.new_per_proposal",
            "coverage.matched.distinct_programs",
        ]
        + [f"code_o.program.{m}" for m in COMPLEXITY]
    )
    arms = arm_order(dynamics)
    lines = ["| metric (last generation) | " + " | ".join(arms) + " |", "|---|" + "---|" * len(arms)]
    for key in keys:
        cells = []
        for arm in arms:
            value = dynamics[arm][-1].get(key) if dynamics[arm] else None
            cells.append("-" if not isinstance(value, (int, float)) else f"{value:.3g}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


SIGNAL_NOTE = (
    "What the students' learning signal differed in, per generation: rollouts with a nonzero advantage, "
    "then the share whose group (the answers its advantage is measured against) held no right answer, so "
    "that their rewards differ only in format (-1 malformed against -0.5 wrong), and the share whose group "
    "held a right answer beside a wrong one (`populora.rl.rollouts.signal_accounting`)."
)


def signal_table(dynamics: dict[str, list[dict]]) -> str:
    """Markdown: per arm and generation, `n: format-only % / correctness %` of the students' rollouts with
    signal; empty when no row carries the accounting (runs from before it)."""
    arms = [
        arm for arm in arm_order(dynamics) if any(r.get("signal.solve_with_signal") is not None for r in dynamics[arm])
    ]
    if not arms:
        return ""
    gens = max(len(dynamics[arm]) for arm in arms)
    lines = ["| arm | " + " | ".join(f"gen {g}" for g in range(gens)) + " |", "|---|" + "---|" * gens]
    for arm in arms:
        cells = []
        for row in dynamics[arm]:
            n, fmt, cor = (
                row.get(f"signal.{k}") for k in ("solve_with_signal", "format_only_share", "correctness_share")
            )
            cells.append("-" if n is None else f"{n}: {_share(fmt)} / {_share(cor)}")
        lines.append(f"| {arm} | " + " | ".join(cells + [""] * (gens - len(cells))) + " |")
    return "\n".join(lines)


def _share(value) -> str:
    return "-" if _finite_or_none(value) is None else f"{100 * value:.0f}%"
