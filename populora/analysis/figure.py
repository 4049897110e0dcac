"""The study figure (study.png) from `populora.analysis.comparisons.summarize`: the held-out learning curves
(every seed thin, the mean thick; by task type), the proposed tasks' complexity and coverage by generation
(`populora.analysis.proposals`), the final students' pass@k where measured (`populora.analysis.passk`), and per benchmark each control's seeds with their mean and 95% t-interval,
the interval the tables report.

    python -m populora.analysis study/learning/runs --plan study/learning/plan.yaml --out study/learning
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from populora.analysis.passk import plot_passk_panel
from populora.analysis.proposals import plot_proposals
from populora.analysis.runs import READ_BENCHES
from populora.analysis.tables import TITLES

CURVES, BY_TYPE = "held-out curves", "held-out curves by type"
COMPLEXITY, COVERAGE = "task complexity", "coverage"  # what the proposers wrote (populora/analysis/proposals.py)
PASSK = "pass@k"  # the final students' pass@k on the pool (populora/analysis/passk.py)
COMPLEXITY_KEYS = ("code_o.program.ast_depth", "code_i.program.ast_depth")
COVERAGE_KEYS = ("coverage.matched.distinct_programs",)
CONTROL_COLORS = [
    "tab:blue",
    "tab:green",
    "tab:purple",
    "tab:brown",
    "tab:gray",
    "tab:olive",
    "tab:cyan",
]  # one per control, both curve panels


def figure_panels(study: dict) -> list[str]:
    """The study figure's panels: one per benchmark scored (the bottom row), the held-out learning curves
    and the same by task type where the pool holds more than one type (the top row, where there are curves)."""
    curves = study.get("heldout_curves") or {}
    keys = set((study.get("proposals") or {}).get("keys") or [])
    return (
        [b for b in READ_BENCHES if any(b in r["bench"] for r in study["controls"])]
        + ([CURVES] if curves else [])
        + ([BY_TYPE] if len(curves.get("by_type") or {}) > 1 else [])
        + ([COMPLEXITY] if keys & set(COMPLEXITY_KEYS) else [])
        + ([COVERAGE] if keys & set(COVERAGE_KEYS) else [])
        + ([PASSK] if study.get("passk") else [])
    )


def plot(study: dict, path: Path) -> None:
    """study.png: the learning curves and proposal panels on top, where a reader looks first, the final
    scores per benchmark below; the headline metrics seed by seed where there are no verdicts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = figure_panels(study)
    if not names:  # DVC experiments without verdicts: their headline metrics, seed by seed
        plot_headline(study, path)
        return
    fig, panel = _panel_grid(names)
    _plot_trend_panels(panel, study)
    for bench in (name for name in names if name in READ_BENCHES):
        _plot_bench(panel[bench], bench, [r for r in study["controls"] if bench in r["bench"]])
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _panel_grid(names: list[str]) -> tuple[Any, dict[str, Any]]:
    """The figure and its axes by panel name: the curves' row above the benchmarks' (one row when either is
    empty), the cells a shorter row leaves over hidden."""
    import matplotlib.pyplot as plt

    benches = [name for name in names if name in READ_BENCHES]
    grid = [row for row in ([n for n in names if n not in READ_BENCHES], benches) if row]
    width = max(len(row) for row in grid)
    fig, axes = plt.subplots(len(grid), width, figsize=(5.5 * width, 4.2 * len(grid)), squeeze=False)
    for r, row in enumerate(grid):
        for ax in axes[r][len(row) :]:
            ax.set_visible(False)
    return fig, {name: axes[r][c] for r, row in enumerate(grid) for c, name in enumerate(row)}


def _plot_trend_panels(panel: dict[str, Any], study: dict) -> None:
    """The panels that are not a benchmark's, those of `panel` (`figure_panels` chose them): held-out curves,
    the proposals' complexity and coverage, pass@k."""
    if CURVES in panel:
        plot_curves(panel[CURVES], study["heldout_curves"], study.get("pool_baselines"))
    if BY_TYPE in panel:
        plot_type_curves(panel[BY_TYPE], study["heldout_curves"]["by_type"], study.get("pool_baselines"))
    if COMPLEXITY in panel:
        keys = tuple(k for k in COMPLEXITY_KEYS if k in study["proposals"]["keys"])
        plot_proposals(
            panel[COMPLEXITY],
            study["proposals"],
            keys,
            CONTROL_COLORS,
            "mean AST depth of valid programs",
            "proposed tasks' complexity: seeds (thin), mean (thick)",
        )
    if PASSK in panel:
        plot_passk_panel(panel[PASSK], study["passk"], CONTROL_COLORS)
    if COVERAGE in panel:
        plot_proposals(
            panel[COVERAGE],
            study["proposals"],
            COVERAGE_KEYS,
            CONTROL_COLORS,
            "distinct programs so far",
            "coverage (one adapter's proposals, compute-matched)",
        )


def _plot_bench(ax, bench: str, rows: list[dict]) -> None:
    """One benchmark's panel: per control (`rows`, those that scored it) its seeds, mean and interval; the
    base model's level (from the first control: every control starts from the same base)."""
    for x, row in enumerate(rows):
        _plot_control_scores(ax, x, row["bench"][bench])
    if rows and rows[0]["bench"][bench].get("base") is not None:
        _plot_base_levels(ax, rows[0]["bench"][bench])
    ax.set_xticks(range(len(rows)), [r["control"] for r in rows], fontsize=8, rotation=15)
    ax.set_ylabel("students' accuracy (points)" if bench == "heldout" else "students' pass@1 (points)")
    ax.set_title(f"{TITLES[bench]}: seeds (dots), mean and 95% t-interval", fontsize=9)
    ax.grid(axis="y", alpha=0.3)
    ax.set_ylim(bottom=-1)  # accuracy is not negative: a two-seed t-interval's lower arm runs off the panel


def _plot_control_scores(ax, x: int, scores: dict) -> None:
    """At `x`, one control's seeds (dots), their mean with its 95% t-interval where there is one, and the
    mean with copied answers counted wrong where measured."""
    entry = scores["students"]
    ax.scatter([x] * len(entry["values"]), [100 * v for v in entry["values"]], color="0.4", s=16, zorder=3)
    if entry["low"] is not None:
        ax.errorbar(
            [x],
            [100 * entry["mean"]],
            yerr=[[100 * (entry["mean"] - entry["low"])], [100 * (entry["high"] - entry["mean"])]],
            fmt="o",
            color="tab:blue",
            capsize=4,
            zorder=4,
        )
    else:
        ax.scatter([x], [100 * entry["mean"]], color="tab:blue", zorder=4)
    free = scores.get("copy_free")
    if free:  # the same students with copied answers counted wrong
        ax.scatter(
            [x + 0.15],
            [100 * free["students"]["mean"]],
            marker="x",
            color="tab:orange",
            zorder=4,
            label="copies counted wrong" if x == 0 else None,  # one legend entry, not one per control
        )


def _plot_base_levels(ax, scores: dict) -> None:
    """The base model's score as a line (and with copies counted wrong, where measured), with the legend."""
    ax.axhline(100 * scores["base"], color="tab:red", ls="--", lw=1, label="base model")
    if scores.get("copy_free"):
        ax.axhline(
            100 * scores["copy_free"]["base"],
            color="tab:orange",
            ls=":",
            lw=1,
            label="base, copies counted wrong",
        )
    ax.legend(fontsize=8)


def plot_curves(ax, curves: dict, baselines: dict | None = None) -> None:
    """Held-out accuracy per generation: every control's seeds (thin lines) and their mean (thick), the base."""
    for k, (control, points) in enumerate(curves["controls"].items()):
        color = CONTROL_COLORS[k % len(CONTROL_COLORS)]
        gens = [g for g, p in enumerate(points) if p]  # the generations scored (heldout.every)
        points = [p for p in points if p]
        for seed in range(points[0]["n"]):
            ax.plot(gens, [100 * p["values"][seed] for p in points], color=color, lw=0.8, alpha=0.45)
        ax.plot(gens, [100 * p["mean"] for p in points], color=color, lw=2.2, marker="o", label=control)
    ax.axhline(100 * curves["base"], color="tab:red", ls="--", lw=1, label="base model")
    if baselines:  # one constant answer per type, on the whole pool: what a model that does not read the task can get
        best = sum(v["best"]["correct"] for v in baselines.values()) / sum(v["n_tasks"] for v in baselines.values())
        ax.axhline(100 * best, color="black", ls=":", lw=1.2, label="one constant answer per type")
    ax.set_xlabel("generation")
    ax.set_ylabel("students' held-out accuracy (points)")
    ax.set_title(f"held-out pool ({curves['n_tasks']} tasks): seeds (thin), mean (thick)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)


def plot_type_curves(ax, by_type: dict, baselines: dict | None = None) -> None:
    """Held-out accuracy per generation by task type: every control's mean over seeds, one line style per
    type; each type's base level in red, in that type's line style."""
    styles = ["-", "--", ":", "-."]
    for t, (task_type, entry) in enumerate(by_type.items()):
        for k, (control, points) in enumerate(entry["controls"].items()):
            ax.plot(
                [g for g, p in enumerate(points) if p],
                [100 * p["mean"] for p in points if p],
                color=CONTROL_COLORS[k % len(CONTROL_COLORS)],
                ls=styles[t % len(styles)],
                lw=1.8,
                marker="o",
                ms=3,
                label=f"{control}, {task_type}",
            )
        ax.axhline(100 * entry["base"], color="tab:red", ls=styles[t % len(styles)], lw=0.8, label=f"base, {task_type}")
        if baselines and task_type in baselines:
            best = baselines[task_type]["best"]
            ax.axhline(
                100 * best["share"],
                color="black",
                ls=styles[t % len(styles)],
                lw=1.0,
                label=f"constant {best['answer']}, {task_type}",
            )
    ax.set_xlabel("generation")
    ax.set_ylabel("students' held-out accuracy (points)")
    ax.set_title("held-out pool by task type: mean over seeds", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)


def plot_headline(study: dict, path: Path, max_keys: int = 6) -> None:
    """Per headline key (students' means and differences first): one dot per seed and the mean with its
    95% t-interval per control; a panel saying "no data" where there is nothing to draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = study.get("headline") or []
    keys = sorted(
        {r["key"] for r in rows if r["key"].endswith((".mean", ".baseline", ".delta"))},
        key=lambda k: (not k.startswith("overall"), k),
    )[:max_keys] or ["(none)"]
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 4.2), squeeze=False)
    for ax, key in zip(axes[0], keys):
        shown = [r for r in rows if r["key"] == key]
        for x, row in enumerate(shown):
            ax.scatter([x] * 2, [row["min"], row["max"]], color="0.4", s=14, zorder=3)
            if row["interval"]:
                centre, low, high = row["interval"]
                ax.errorbar([x], [centre], yerr=[[centre - low], [high - centre]], fmt="o", color="tab:blue", capsize=4)
            else:
                ax.scatter([x], [row["mean"]], color="tab:blue", zorder=4)
        ax.set_xticks(range(len(shown)), [r["control"] for r in shown], fontsize=7, rotation=20)
        ax.set_title(key, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        if not shown:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.5")
    fig.suptitle("Across seeds: min and max (dots), mean and 95% t-interval per control")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
