"""The CPU study's tables (study.md) and figure (study.png) from `populora.report.study_runs.summarize`.

    python -m populora.report.study_runs study/runs --out study     # writes both (and study.json)
"""

from __future__ import annotations

import math
from pathlib import Path

from populora.bench.stats import minimum_detectable_effect

BENCHES = ("cruxeval_o", "cruxeval_i")  # the benchmarks the study reads, in table order
# what the tables compare: the held-out pool (a run's final generation, where the run has one) first
READ_BENCHES = ("heldout", *BENCHES)
TITLES = {"heldout": "held-out pool (in-distribution, greedy)", "cruxeval_o": "cruxeval_o", "cruxeval_i": "cruxeval_i"}

def _pts(value) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = f"{100 * value:.1f}"
    return "0.0" if text == "-0.0" else text  # a tiny negative rounds to zero, not to "-0.0"

def _nats(value) -> str:
    """A gold log-likelihood (or a difference of two) in nats, 2 decimals."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    text = f"{value:.2f}"
    return "0.00" if text == "-0.00" else text

def _in_units(score: str):
    """How a comparison of `score` is written: nats for the gold log-likelihood, points otherwise."""
    return _nats if score == "gold log-likelihood" else _pts

def _ci(entry: dict, fmt=_pts) -> str:
    if entry["low"] is None:
        return f"{fmt(entry['mean'])} (n={entry['n']})"
    return f"{fmt(entry['mean'])} [{fmt(entry['low'])}, {fmt(entry['high'])}] (n={entry['n']})"

def _adapter_totals(acc: dict) -> str:
    """"12 / 1,626 / 176 / 10.6": optimizer steps / trained tokens / rollouts with signal / sum of ||B A||_F."""
    values = [acc.get(key) for key in ("optimizer_steps", "trained_tokens", "rollouts_with_signal", "delta_norm")]
    if any(v is None for v in values):
        return "-"
    steps, tokens, signal, moved = values
    return f"{steps:g} / {tokens:,.0f} / {signal:g} / {moved:.1f}"


def _wall(row: dict) -> str:
    """A run's wall minutes, with its attempts where it was stopped and resumed."""
    if row["wall_s"] is None:
        return ""
    attempts = row.get("attempts") or 1
    return f"{round(row['wall_s'] / 60)}" + (f" ({attempts} attempts)" if attempts > 1 else "")


def per_run_table(rows: list[dict]) -> list[str]:
    """One line per run (and the base model): CRUXEval-O/I raw and with copies counted wrong, the
    students' CRUXEval-O answers that copy, the accounting per adapter (students; teachers), wall."""
    o, i = BENCHES
    lines = ["## Per run", "",
             "Students' mean pass@1; copies wrong: every answer that copies the input or one argument counted wrong. "
             "Per adapter (mean over the run's students; teachers): optimizer steps / trained tokens / rollouts with "
             "signal / sum of ||B A||_F (the baseline's one adapter is both). Machine: the CPU features the run "
             "recorded (blank: not recorded); wall times compare only between runs of one kind of machine. A run "
             "stopped (its session ended) resumes from DVC's run cache and repeats the stage it was stopped in: its "
             "wall time sums every attempt, so it over-states the run's own work (the attempts in brackets).", "",
             "| run | CRUXEval-O | O, copies wrong | CRUXEval-I | I, copies wrong | O answers copying the input / an argument "
             "| students | teachers | wall min | machine |", "|---|---|---|---|---|---|---|---|---|---|"]
    for row in rows:
        b = row["bench"]
        copying = (f"{_pts(b.get(o, {}).get('copies_input'))} / {_pts(b.get(o, {}).get('copies_argument'))}"
                   if "copies_input" in b.get(o, {}) else "")
        acc = row.get("accounting") or {}
        lines.append(f"| {row['run']} | {_pts(b.get(o, {}).get('pass@1'))} | {_pts(b.get(o, {}).get('copies_wrong'))} | "
                     f"{_pts(b.get(i, {}).get('pass@1'))} | {_pts(b.get(i, {}).get('copies_wrong'))} | {copying} | "
                     f"{_adapter_totals(acc['students']) if acc else ''} | {_adapter_totals(acc['teachers']) if acc else ''} | "
                     f"{_wall(row)} | {(row['machine'] or {}).get('features', '')} |")
    return lines + [""]

SAME_VERDICTS = "the same verdicts"

def _mde(c: dict, fmt=_pts) -> str:
    """A comparison's minimum detectable effect, or, where every problem scored the same on both sides (an
    interval of width 0, which no resampling widens), `SAME_VERDICTS` instead of an MDE of 0."""
    return fmt(minimum_detectable_effect(c["low"], c["high"])) if c["high"] > c["low"] else SAME_VERDICTS

def _null_note(c: dict) -> str:
    """Beside a null in the curve table: its minimum detectable effect (or that the verdicts were the same)."""
    return f" ({SAME_VERDICTS})" if c["high"] <= c["low"] else f" (MDE {_mde(c)})"

def type_table(by_type: dict, gens: int) -> list[str]:
    """The same curves by task type (mean over seeds), so that a type no model ever gets right shows as
    such: the pooled points are then the other type's halved."""
    if len(by_type) < 2:
        return []
    lines = ["", "By task type: students' accuracy on each type's tasks, mean over seeds (the base's beside the type).", "",
             "| control | type (base) | " + " | ".join(f"gen {g}" for g in range(gens)) + " |", "|---|---|" + "---|" * gens]
    for control in next(iter(by_type.values()))["controls"]:
        for task_type, entry in by_type.items():
            points = entry["controls"][control]
            cells = [_pts(p["mean"]) for p in points] + [""] * (gens - len(points))
            lines.append(f"| {control} | {task_type}, {entry['n_tasks']} tasks ({_pts(entry['base'])}) | "
                         + " | ".join(cells) + " |")
    return lines

def curve_table(curves: dict) -> list[str]:
    """The held-out learning curves: per control the students' accuracy after each generation (mean over
    seeds [95% t-interval]), then per generation each comparison (two-level bootstrap), the minimum
    detectable effect beside every interval that covers 0."""
    gens = max(len(v) for v in curves["controls"].values())
    lines = ["## Held-out pool by generation", "",
             f"{curves['n_tasks']} tasks; the base model scores {_pts(curves['base'])}. Students' accuracy after each "
             "generation, mean over seeds [95% t-interval].", "",
             "| control | " + " | ".join(f"gen {g}" for g in range(gens)) + " |", "|---|" + "---|" * gens]
    for control, points in curves["controls"].items():
        lines.append(f"| {control} | " + " | ".join(_ci(p).split(" (n=")[0] for p in points) + " |")
    lines += type_table(curves.get("by_type") or {}, gens)
    if curves["comparisons"]:
        lines += ["", "Differences per generation [95% two-level bootstrap interval]; beside every interval that covers 0, "
                  "the minimum detectable effect (80% power).", "",
                  "| comparison | " + " | ".join(f"gen {g}" for g in range(gens)) + " |", "|---|" + "---|" * gens]
        pairs = dict.fromkeys((c["left"], c["right"]) for c in curves["comparisons"])
        for left, right in pairs:
            cells = {c["generation"]: f"{_pts(c['delta'])} [{_pts(c['low'])}, {_pts(c['high'])}]"
                     + (_null_note(c) if c["low"] <= 0 <= c["high"] else "")
                     for c in curves["comparisons"] if (c["left"], c["right"]) == (left, right)}
            lines.append(f"| {left} - {right} | " + " | ".join(cells.get(g, "") for g in range(gens)) + " |")
    return lines + [""]

DEFAULT_TITLE = "CPU study: does the population help?"


def wall_cell(row: dict) -> str:
    """Wall minutes of a control: one mean, or one per kind of machine where its runs were on several."""
    kinds = row.get("wall_by_machine") or []
    if len(kinds) <= 1:
        return f"{row['wall_s']['mean'] / 60:.0f}"
    return "; ".join(f"{k['mean_s'] / 60:.0f} ({k['n']} on {k['features'] or 'an unrecorded machine'})" for k in kinds)


def markdown(study: dict, title: str = DEFAULT_TITLE) -> str:
    lines = [f"# {title}", "",
             f"{len(study['runs'])} runs: {', '.join(study['runs'])}.", "",
             "Scores are pass@1 in points (students' mean; the baseline's adapter is its student), mean over seeds "
             "with a 95% t-interval across seeds.", ""]
    for bench in READ_BENCHES:
        if not any(bench in row["bench"] for row in study["controls"]):
            continue
        lines += [f"## {TITLES[bench]}", "", "| control | seeds | students | all members | students - base | base | per seed |",
                  "|---|---|---|---|---|---|---|"]
        for row in study["controls"]:
            entry = row["bench"].get(bench)
            if entry:
                lines.append(f"| {row['control']} | {len(row['seeds'])} | {_ci(entry['students'])} | {_ci(entry['members'])} | "
                             f"{_ci(entry['students_minus_base'])} | {_pts(entry['base'])} | "
                             f"{', '.join(_pts(v) for v in entry['students']['values'])} |")
        lines.append("")
    if study.get("heldout_curves"):
        lines += curve_table(study["heldout_curves"])
    if study.get("per_run"):
        lines += per_run_table(study["per_run"])
    lines += ["## With copied answers counted wrong", "",
              "An answer that copies the input or one argument scores 0 even where it is right (the base model too).", "",
              "| control | benchmark | students | students - base | base |", "|---|---|---|---|---|"]
    for row in study["controls"]:
        for bench in READ_BENCHES:
            entry = row["bench"].get(bench, {}).get("copy_free")
            if entry:
                lines.append(f"| {row['control']} | {bench} | {_ci(entry['students'])} | {_ci(entry['students_minus_base'])} | "
                             f"{_pts(entry['base'])} |")
    gold_rows = [(row, bench) for row in study["controls"] for bench in READ_BENCHES if row["bench"].get(bench, {}).get("gold")]
    if gold_rows:
        lines += ["", "## The gold answer's log-likelihood (nats per problem, summed over its tokens)", "",
                  "Under each student the log-probability of CRUXEval's gold answer after the same prompt, mean over "
                  "problems (higher: the gold answer is likelier); mean over seeds [95% t-interval].", "",
                  "| control | benchmark | students | students - base | base | per seed |", "|---|---|---|---|---|---|"]
        for row, bench in gold_rows:
            entry = row["bench"][bench]["gold"]
            lines.append(f"| {row['control']} | {bench} | {_ci(entry['students'], _nats)} | "
                         f"{_ci(entry['students_minus_base'], _nats)} | {_nats(entry['base'])} | "
                         f"{', '.join(_nats(v) for v in entry['students']['values'])} |")
    lines += ["", "## Between controls and against the base (two-level bootstrap: seeds, then problems)", "",
              "The minimum detectable effect is the true difference this comparison finds with 80% power at the 5% "
              "level (2.8 standard errors, read off the interval): a \"no detectable difference\" says nothing about "
              "effects below it. Differences are in points, the gold log-likelihood's in nats per problem.", "",
              "| comparison | benchmark | score | seeds | difference | 95% interval | minimum detectable effect | verdict |",
              "|---|---|---|---|---|---|---|---|"]
    for c in study["comparisons"]:
        fmt = _in_units(c["score"])
        lines.append(f"| {c['left']} - {c['right']} | {c['bench']} | {c['score']} | {c['seeds'][0]} vs {c['seeds'][1]} | "
                     f"{fmt(c['delta'])} | [{fmt(c['low'])}, {fmt(c['high'])}] | "
                     f"{_mde(c, fmt)} | {c['verdict']} |")
    lines += ["", "## Accounting per adapter (mean over seeds of the run's totals)", "",
              "| control | role | optimizer steps | trained tokens | rollouts with signal | sum of ||B A||_F | wall min |",
              "|---|---|---|---|---|---|---|"]
    for row in study["controls"]:
        for role in ("students", "teachers"):
            acc = row["accounting"]
            if f"{role}.optimizer_steps" in acc:
                lines.append(f"| {row['control']} | {role} | {acc[f'{role}.optimizer_steps']:g} | {acc[f'{role}.trained_tokens']:g} | "
                             f"{acc[f'{role}.rollouts_with_signal']:g} | {acc.get(f'{role}.delta_norm', float('nan')):.4f} | "
                             f"{wall_cell(row)} |")
    lines += ["", "## Students' answers (share of problems, mean over students and seeds)", "",
              "| control | benchmark | truncated | no answer | copies input | copies an argument | answer tokens |",
              "|---|---|---|---|---|---|---|"]
    for row in study["controls"]:
        for bench, d in row["diagnostics"].items():
            if d:
                lines.append(f"| {row['control']} | {bench} | {_pts(d.get('truncated'))} | {_pts(d.get('no_answer'))} | "
                             f"{_pts(d.get('copies_input'))} | {_pts(d.get('copies_argument'))} | {d.get('mean_answer_tokens', 0):.1f} |")
    if study.get("training_copies"):
        gens = max(len(r["n"]) for r in study["training_copies"])
        lines += ["", "## Students' training answers that copy, by generation", "",
                  "Per generation: answers that copy what the task showed (code_o: the input or an argument; code_i: the "
                  "output) / answers (copies graded right; all answers graded right).", "",
                  "| run | type | " + " | ".join(f"gen {g}" for g in range(gens)) + " |", "|---|---|" + "---|" * gens]
        for r in study["training_copies"]:
            cells = [f"{c}/{n} ({cc}; {ok})" for c, n, cc, ok in zip(r["copies"], r["n"], r["copies_correct"], r["correct"])]
            lines.append(f"| {r['run']} | {r['type']} | " + " | ".join(cells + [""] * (gens - len(cells))) + " |")
    return "\n".join(lines) + "\n"

CURVES, BY_TYPE = "held-out curves", "held-out curves by type"
CONTROL_COLORS = ["tab:blue", "tab:green", "tab:purple", "tab:brown", "tab:gray", "tab:olive", "tab:cyan"]  # one per control, both curve panels

def figure_panels(study: dict) -> list[str]:
    """The study figure's panels: one per benchmark scored (the bottom row), the held-out learning curves
    and the same by task type where the pool holds more than one type (the top row, where there are curves)."""
    curves = study.get("heldout_curves") or {}
    return ([b for b in READ_BENCHES if any(b in r["bench"] for r in study["controls"])]
            + ([CURVES] if curves else []) + ([BY_TYPE] if len(curves.get("by_type") or {}) > 1 else []))

def plot(study: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = study.get("heldout_curves") or {}
    names = figure_panels(study)
    benches = [name for name in names if name in READ_BENCHES]
    # the learning curves on top, where a reader looks first; the final scores below (one row when there are no curves)
    grid = [row for row in ([n for n in names if n not in READ_BENCHES], benches) if row]
    width = max(len(row) for row in grid)
    fig, axes = plt.subplots(len(grid), width, figsize=(5.5 * width, 4.2 * len(grid)), squeeze=False)
    for r, row in enumerate(grid):
        for ax in axes[r][len(row):]:
            ax.set_visible(False)
    panel = {name: axes[r][c] for r, row in enumerate(grid) for c, name in enumerate(row)}
    if CURVES in names:
        plot_curves(panel[CURVES], curves)
    if BY_TYPE in names:
        plot_type_curves(panel[BY_TYPE], curves["by_type"])
    for ax, bench in [(panel[b], b) for b in benches]:
        rows = [r for r in study["controls"] if bench in r["bench"]]
        for x, row in enumerate(rows):
            entry = row["bench"][bench]["students"]
            ax.scatter([x] * len(entry["values"]), [100 * v for v in entry["values"]], color="0.4", s=16, zorder=3)
            if entry["low"] is not None:
                ax.errorbar([x], [100 * entry["mean"]], yerr=[[100 * (entry["mean"] - entry["low"])], [100 * (entry["high"] - entry["mean"])]],
                            fmt="o", color="tab:blue", capsize=4, zorder=4)
            else:
                ax.scatter([x], [100 * entry["mean"]], color="tab:blue", zorder=4)
            free = row["bench"][bench].get("copy_free")
            if free:  # the same students with copied answers counted wrong
                ax.scatter([x + 0.15], [100 * free["students"]["mean"]], marker="x", color="tab:orange", zorder=4,
                           label="copies counted wrong" if x == 0 else None)
        if rows:
            ax.axhline(100 * rows[0]["bench"][bench]["base"], color="tab:red", ls="--", lw=1, label="base model")
            if rows[0]["bench"][bench].get("copy_free"):
                ax.axhline(100 * rows[0]["bench"][bench]["copy_free"]["base"], color="tab:orange", ls=":", lw=1,
                           label="base, copies counted wrong")
            ax.legend(fontsize=8)
        ax.set_xticks(range(len(rows)), [r["control"] for r in rows], fontsize=8, rotation=15)
        ax.set_ylabel("students' accuracy (points)" if bench == "heldout" else "students' pass@1 (points)")
        ax.set_title(f"{TITLES[bench]}: seeds (dots), mean and 95% t-interval", fontsize=9)
        ax.grid(axis="y", alpha=0.3)
        ax.set_ylim(bottom=-1)  # accuracy is not negative: a two-seed t-interval's lower arm runs off the panel
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

def plot_curves(ax, curves: dict) -> None:
    """Held-out accuracy per generation: every control's seeds (thin lines) and their mean (thick), the base."""
    for k, (control, points) in enumerate(curves["controls"].items()):
        color = CONTROL_COLORS[k % len(CONTROL_COLORS)]
        gens = list(range(len(points)))
        for seed in range(points[0]["n"]):
            ax.plot(gens, [100 * p["values"][seed] for p in points], color=color, lw=0.8, alpha=0.45)
        ax.plot(gens, [100 * p["mean"] for p in points], color=color, lw=2.2, marker="o", label=control)
    ax.axhline(100 * curves["base"], color="tab:red", ls="--", lw=1, label="base model")
    ax.set_xlabel("generation")
    ax.set_ylabel("students' held-out accuracy (points)")
    ax.set_title(f"held-out pool ({curves['n_tasks']} tasks): seeds (thin), mean (thick)", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)

def plot_type_curves(ax, by_type: dict) -> None:
    """Held-out accuracy per generation by task type: every control's mean over seeds, one line style per
    type; each type's base level in red, in that type's line style."""
    styles = ["-", "--", ":", "-."]
    for t, (task_type, entry) in enumerate(by_type.items()):
        for k, (control, points) in enumerate(entry["controls"].items()):
            ax.plot(range(len(points)), [100 * p["mean"] for p in points], color=CONTROL_COLORS[k % len(CONTROL_COLORS)],
                    ls=styles[t % len(styles)], lw=1.8, marker="o", ms=3, label=f"{control}, {task_type}")
        ax.axhline(100 * entry["base"], color="tab:red", ls=styles[t % len(styles)], lw=0.8, label=f"base, {task_type}")
    ax.set_xlabel("generation")
    ax.set_ylabel("students' held-out accuracy (points)")
    ax.set_title("held-out pool by task type: mean over seeds", fontsize=9)
    ax.legend(fontsize=6, ncol=2)
    ax.grid(alpha=0.3)
