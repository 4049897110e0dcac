"""The figures of benchmarks and lineage: `benchmarks.png` (one bar per model with 95% Wilson error
bars, students in blues, teachers in greens, the students' mean marked) and the family tree of an
arm's members (`draw_family_tree`). Every figure is written atomically (`populora.core.io.write_figure`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display on build machines and cluster nodes

import matplotlib.pyplot as plt

from populora.core.io import write_figure
from populora.core.refs import BASE, ModelRef
from populora.report.metrics import BASELINE, POPULATION, column_value, role_members, score_columns

ARM_COLORS = {POPULATION: "tab:blue", BASELINE: "tab:orange", BASE: "0.55"}


def model_order(refs: Iterable[ModelRef]) -> list[ModelRef]:
    """Population members, then the baseline's, then the base model."""
    rank = {POPULATION: 0, BASELINE: 1, BASE: 2}
    return sorted(refs, key=lambda ref: (rank.get(ref.arm, 3), ref.name))


def model_colors(refs: list[ModelRef]) -> dict[str, object]:
    """Students in blues, teachers in greens, the baseline orange, the base grey (by model name)."""
    roles = role_members(refs, POPULATION)
    colors: dict[str, object] = {}
    for role, cmap in (("students", "Blues"), ("teachers", "Greens")):
        members = roles[role]
        colors.update(
            {m: plt.get_cmap(cmap)(0.45 + 0.45 * i / max(1, len(members) - 1)) for i, m in enumerate(members)}
        )
    for ref in refs:
        colors.setdefault(ref.name, ARM_COLORS.get(ref.arm, "tab:green"))
    return colors


def plot_benchmarks(
    table: dict[str, dict[str, float]],
    refs: dict[str, ModelRef],
    path: Path,
    intervals: dict[str, dict[str, tuple[float, float]]] | None = None,
) -> None:
    """`benchmarks.png`: one bar per model and column with 95% Wilson error bars, the students' mean marked."""
    intervals = intervals or {}
    ordered = model_order(refs[m] for m in table)
    models = [ref.name for ref in ordered]
    columns = score_columns(table)
    colors = model_colors(ordered)
    width = 0.8 / len(models)
    fig, ax = plt.subplots(figsize=(max(10, 1.1 * len(columns) + 0.25 * len(models) * len(columns) / 3), 5.2))
    zeros = []
    for index, model in enumerate(models):
        xs = [c + (index - (len(models) - 1) / 2) * width for c in range(len(columns))]
        heights = [100 * column_value(table, model, col) for col in columns]
        ax.bar(xs, heights, width, label=model, color=colors[model], edgecolor="white", linewidth=0.5)
        cis = [(x, h, intervals.get(model, {}).get(col)) for x, h, col in zip(xs, heights, columns)]
        bars = [(x, h, ci) for x, h, ci in cis if ci is not None]
        if bars:  # 95% Wilson intervals (benchmarks only; group averages have none)
            ax.errorbar(
                [x for x, _, _ in bars],
                [h for _, h, _ in bars],
                yerr=[[h - 100 * ci[0] for _, h, ci in bars], [100 * ci[1] - h for _, h, ci in bars]],
                fmt="none",
                ecolor="0.25",
                elinewidth=0.8,
                capsize=2,
                zorder=4,
            )
        zeros += [(x, colors[model]) for x, h in zip(xs, heights) if h == 0]
    members = role_members(ordered, POPULATION)["students"]
    if members:
        means = [100 * sum(column_value(table, m, col) for m in members) / len(members) for col in columns]
        ax.hlines(
            means,
            [c - 0.42 for c in range(len(columns))],
            [c + 0.42 for c in range(len(columns))],
            colors="black",
            linewidth=1.8,
            zorder=3,
            label="population students' mean",
        )
    ax.set_xticks(range(len(columns)), [c.replace("avg.", "avg ") for c in columns], rotation=30, ha="right")
    for divider in [len(columns) - sum(c.startswith("avg.") for c in columns) - 0.5]:
        ax.axvline(divider, color="0.8", linewidth=1)
    ax.set_ylabel("score (%)")
    ax.set_title("Benchmarks per model (error bars: 95% Wilson intervals)")
    ax.set_ylim(0, max(5.0, ax.get_ylim()[1]))
    for x, color in zeros:  # a zero score would otherwise be an invisible bar
        ax.text(x, 0.01 * ax.get_ylim()[1], "0", ha="center", va="bottom", fontsize=7, color=color, fontweight="bold")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # outside: never hides a bar
    fig.tight_layout()
    write_figure(path, fig, dpi=120)
    plt.close(fig)


def _lanes(lineage: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """A child takes the lane of the member it replaces, so each lane is a population slot."""
    lanes: dict[str, int] = {}
    for e in lineage:
        r = e.get("replaces")
        lanes[e["child_id"]] = lanes[r] if r in lanes else max(lanes.values(), default=-1) + 1
    return lanes


def draw_family_tree(
    lineage: Sequence[Mapping[str, Any]],
    out_png: str | Path,
    title: str | None = None,
    last_generation: int | None = None,
) -> None:
    """Plot members by birth generation (x) and population slot (y); edges parent -> child.

    Uses matplotlib's object API (no pyplot global state) and writes the PNG atomically.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if not lineage:
        raise ValueError("empty lineage")
    lanes = _lanes(lineage)
    born = {e["child_id"]: e["generation"] for e in lineage}
    died = {e["replaces"]: e["generation"] for e in lineage if e.get("replaces")}
    end = max(born.values()) + 1 if last_generation is None else last_generation
    operators = sorted({e["operator"] for e in lineage} - {"init"})
    palette = {op: f"C{i % 10}" for i, op in enumerate(operators)}

    n_lanes = max(lanes.values()) + 1
    fig = Figure(figsize=(max(6.0, 1.2 * (end + 1)), max(3.0, 0.8 * n_lanes + 1.5)))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for e in lineage:
        _draw_member(ax, e, lanes, died.get(e["child_id"], end), palette)
    _family_tree_frame(ax, palette, n_lanes, end, title)
    fig.tight_layout()

    write_figure(out_png, fig, dpi=120)


def _draw_member(ax: Any, event: Mapping[str, Any], lanes: dict[str, int], death: int, palette: dict[str, str]) -> None:
    """One lineage event's child: its lifeline from birth to `death` in its lane, its birth point (grey for
    the initial members, else its operator's colour) with its name, and an edge from each parent."""
    m, x, y = event["child_id"], event["generation"], lanes[event["child_id"]]
    ax.plot([x, death], [y, y], color="0.85", lw=3, zorder=1)
    color = "0.5" if event["operator"] == "init" else palette[event["operator"]]
    ax.scatter([x], [y], s=60, color=color, zorder=3, edgecolors="black", linewidths=0.5)
    ax.annotate(m, (x, y), xytext=(4, 6), textcoords="offset points", fontsize=7)
    for parent in event["parents"]:
        _draw_parent_edge(ax, (x - 0.5, lanes[parent]), (x, y), event["operator"], palette[event["operator"]])


def _draw_parent_edge(
    ax: Any, start: tuple[float, float], child: tuple[float, float], operator: str, color: str
) -> None:
    """An arrow from `start` (a point on the parent's lifeline) to the child's birth, labelled by operator."""
    x, y = child
    ax.annotate(
        "",
        xy=(x, y),
        xytext=start,
        zorder=2,
        arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2},
    )
    # label near the child end, so the edges of one event do not share a midpoint
    ax.text(
        x - 0.3 * (x - start[0]),
        y - 0.3 * (y - start[1]),
        operator,
        fontsize=6,
        color=color,
        ha="center",
        va="center",
        zorder=4,
        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none", "alpha": 0.8},
    )


def _family_tree_frame(ax: Any, palette: dict[str, str], n_lanes: int, end: int, title: str | None) -> None:
    """The operators' legend (where any), the axes' labels, ticks and limits, the title."""
    for op, color in palette.items():
        ax.plot([], [], color=color, label=op)  # the edges carry no label: a legend entry per operator
    if palette:
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_xlabel("generation")
    ax.set_ylabel("population slot")
    ax.set_yticks(range(n_lanes))
    ax.set_xticks(range(0, int(end) + 1))  # generations are whole numbers
    ax.set_xlim(-0.8, end + 0.5)
    ax.set_ylim(-0.7, n_lanes - 0.3)
    ax.set_title(title or "PopuLoRA family tree")
