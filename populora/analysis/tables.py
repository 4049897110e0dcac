"""The study's tables (study.md) from `populora.analysis.comparisons.summarize`; the figure is `figure.py`.

python -m populora.analysis study/learning/runs --plan study/learning/plan.yaml --out study/learning
"""

from __future__ import annotations

import math

from populora.analysis.gate import gate_lines
from populora.analysis.passk import passk_table
from populora.analysis.proposals import proposal_tables
from populora.analysis.readings import machine_kind, share
from populora.analysis.runs import READ_BENCHES

TITLES = {"heldout": "held-out pool (in-distribution, greedy)", "cruxeval_o": "cruxeval_o", "cruxeval_i": "cruxeval_i"}
DEFAULT_TITLE = "Study: does the population help?"
INTERVALS = (
    "Between two controls: Welch's 95% interval over the seed-level scores; against the base model (the "
    "same verdicts in every run): a one-sample t over the seeds' gains; one seed on a side: the paired "
    'bootstrap over problems, which knows nothing of the spread between seeds (method "one seed"). The '
    "minimum detectable effect (MDE) is the true difference found with 80% power at the 5% level, from the "
    "same t distribution, and never below the rule-of-three bound 3 / problems (no discordant problem is no "
    'proof of equality): a "no detectable difference" says nothing about effects below it. '
    "(`python -m populora.analysis.calibration`: in simulated null studies of three seeds that take off or not, "
    "these cover ~96% between controls, the old two-level bootstrap ~89%; against the base no 3-seed interval "
    "does when seeds either take off or not: ~83-86%, with six seeds ~97%.)"
)


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


def _null_note(c: dict) -> str:
    """Beside a null: its MDE (never 0: `populora.core.stats.rule_of_three`), "one seed" where it has no seed spread."""
    seeds = "; one seed" if c.get("df") is None else ""
    return f" (MDE {_pts(c['mde'])}{seeds})" if c["low"] <= 0 <= c["high"] else (" (one seed)" if seeds else "")


def plan_section(study: dict) -> list[str]:
    lines = ["## Plan", ""]
    primary = study.get("primary")
    if primary and not primary.get("missing"):
        lines += [
            f"Primary comparison (declared): **{primary['left']} - {primary['right']}** on {primary['endpoint']} "
            f"({primary.get('score', 'pass@1')}), {primary['test_name']}: **{_pts(primary['delta'])} [{_pts(primary['low'])}, {_pts(primary['high'])}]** "
            f"points, MDE {_pts(primary['mde'])}, seeds {primary['seeds'][0]} vs {primary['seeds'][1]}: "
            f"{primary['verdict']}.",
            "",
        ]
    elif primary:
        lines += [
            f"Primary comparison {primary['left']} - {primary['right']} on {primary['endpoint']} "
            f"({primary.get('score', 'pass@1')}): not in these runs.",
            "",
        ]
    if study.get("tuning_runs"):
        lines += [
            f"Tuning runs, left out of every figure below but the per-run tables: {', '.join(study['tuning_runs'])}.",
            "",
        ]
    lines += [f"* {finding}" for finding in study.get("plan") or []] or ["Every run is as the plan declares."]
    return lines + [""]


def per_run_table(rows: list[dict]) -> list[str]:
    """One line per run (and the base model): each benchmark raw (and with copies counted wrong), the
    accounting per adapter (students; teachers), wall time and machine; tuning runs marked."""
    benches = [b for b in READ_BENCHES if any(b in r["bench"] for r in rows)]
    lines = [
        "## Per run",
        "",
        "Students' mean score per benchmark (copies wrong: every answer that copies the input or one argument "
        "counted wrong). Per adapter (mean over the run's students; teachers): optimizer steps / trained tokens / "
        "rollouts with signal / sum of ||B A||_F. Wall minutes compare only between runs of one kind of machine "
        "and threads (a resumed run's sum every attempt). *tuning*: a run of a tuning seed, outside the answer.",
        "",
        "| run | "
        + " | ".join(f"{b} | {b}, copies wrong" for b in benches)
        + " | students | teachers | wall min | machine |",
        "|---|" + "---|---|" * len(benches) + "---|---|---|---|",
    ]
    for row in rows:
        acc = row.get("accounting") or {}
        cells = [
            f"{_pts(row['bench'].get(b, {}).get('pass@1'))} | {_pts(row['bench'].get(b, {}).get('copies_wrong'))}"
            for b in benches
        ]
        wall = (
            ""
            if row["wall_s"] is None
            else f"{round(row['wall_s'] / 60)}"
            + (f" ({row['attempts']} attempts)" if (row.get("attempts") or 1) > 1 else "")
        )
        lines.append(
            f"| {row['run']}{' *tuning*' if row.get('tuning') else ''} | " + " | ".join(cells) + " | "
            f"{_totals(acc.get('students'))} | {_totals(acc.get('teachers'))} | {wall} | "
            f"{machine_kind(row['machine']) or ''} |"
        )
    return lines + [""]


def _totals(acc: dict | None) -> str:
    """ "12 / 1,626 / 176 / 10.6": optimizer steps / trained tokens / rollouts with signal / sum of ||B A||_F."""
    values = [(acc or {}).get(k) for k in ("optimizer_steps", "trained_tokens", "rollouts_with_signal", "delta_norm")]
    if any(v is None for v in values):
        return ""
    steps, tokens, signal, moved = values
    return f"{steps:g} / {tokens:,.0f} / {signal:g} / {moved:.1f}"


NOT_SCORED = "·"  # a generation the held-out pool did not score (heldout.every)


def curve_table(curves: dict, baselines: dict | None = None) -> list[str]:
    """The held-out learning curves: per control the students' accuracy after each generation (mean over
    seeds [95% t-interval]), by task type (with each type's best constant answer beside, where known),
    then per generation each comparison with its MDE beside a null."""
    gens = max(len(v) for v in curves["controls"].values())
    head = "| " + " | ".join(f"gen {g}" for g in range(gens)) + " |"
    lines = [
        "## Held-out pool by generation",
        "",
        f"{curves['n_tasks']} tasks; the base model scores {_pts(curves['base'])}"
        + (" (the runs' mean: their bases differ, each run is compared with its own)" if curves.get("bases") else "")
        + ". Students' accuracy after each generation, mean over seeds [95% t-interval].",
        "",
        "| control " + head,
        "|---|" + "---|" * gens,
    ]
    for control, points in curves["controls"].items():
        lines.append(
            f"| {control} | " + " | ".join(_ci(p).split(" (n=")[0] if p else NOT_SCORED for p in points) + " |"
        )
    if len(curves.get("by_type") or {}) > 1:
        lines += [
            "",
            "By task type: mean over seeds (the base's beside the type).",
            "",
            "| control | type (base) " + head,
            "|---|---|" + "---|" * gens,
        ]
        for control in next(iter(curves["by_type"].values()))["controls"]:
            for task_type, entry in curves["by_type"].items():
                cells = [_pts(p["mean"]) if p else NOT_SCORED for p in entry["controls"][control]]
                lines.append(
                    f"| {control} | {task_type}, {entry['n_tasks']} tasks ({_pts(entry['base'])}) | "
                    + " | ".join(cells + [""] * (gens - len(cells)))
                    + " |"
                )
        for task_type, entry in (baselines or {}).items():
            lines.append(
                f"| constant `{entry['best']['answer']}` | {task_type} | "
                + " | ".join([_pts(entry["best"]["share"])] * gens)
                + " |"
            )
    if curves["comparisons"]:
        lines += [
            "",
            "Differences per generation [95% interval across seeds]; beside every interval that covers 0, the MDE.",
            "",
            "| comparison " + head,
            "|---|" + "---|" * gens,
        ]
        for left, right in dict.fromkeys((c["left"], c["right"]) for c in curves["comparisons"]):
            by_generation = {
                c["generation"]: f"{_pts(c['delta'])} [{_pts(c['low'])}, {_pts(c['high'])}]{_null_note(c)}"
                for c in curves["comparisons"]
                if (c["left"], c["right"]) == (left, right)
            }
            lines.append(f"| {left} - {right} | " + " | ".join(by_generation.get(g, "") for g in range(gens)) + " |")
    return lines + [""]


def comparison_table(rows: list[dict], heading: str, note: str) -> list[str]:
    lines = [
        heading,
        "",
        note,
        "",
        "| comparison | benchmark | score | seeds | difference | 95% interval | MDE | method | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in rows:
        fmt = _in_units(c["score"])
        lines.append(
            f"| {c['left']} - {c['right']} | {c['bench']} | {c['score']} | {c['seeds'][0]} vs {c['seeds'][1]} | "
            f"{fmt(c['delta'])} | [{fmt(c['low'])}, {fmt(c['high'])}] | {fmt(c['mde'])} | {c['method']} | {c['verdict']} |"
        )
    return lines + [""]


def signal_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    gens = max(len(r["generations"]) for r in rows)
    lines = [
        "## Signal accounting: what the students' nonzero advantages differed in",
        "",
        "Per generation: the students' rollouts with a nonzero advantage, and the share whose group's rewards differ "
        'only in format (-1 malformed against -0.5 wrong, no answer right) / in correctness. "≥": runs from before '
        "the exact count, a lower bound on the format-only share (per-task advantages: at most solve.samples x "
        "answers right can differ in correctness).",
        "",
        "| run | " + " | ".join(f"gen {g}" for g in range(gens)) + " | run |",
        "|---|" + "---|" * (gens + 1),
    ]
    for r in rows:

        def cell(e, exact=r["exact"]):
            fmt, cor = _pts(share(e, "format_only")), _pts(share(e, "correctness"))
            return f"{e['with_signal']}: {fmt} / {cor}" if exact else f"{e['with_signal']}: ≥{fmt}"

        cells = [cell(e) for e in r["generations"]] + [""] * (gens - len(r["generations"]))
        lines.append(
            f"| {r['run']}{' *tuning*' if r['tuning'] else ''} | " + " | ".join(cells) + f" | {cell(r['total'])} |"
        )
    return lines + [""]


def bench_tables(study: dict) -> list[str]:
    lines = []
    for bench in READ_BENCHES:
        rows = [row for row in study["controls"] if bench in row["bench"]]
        if not rows:
            continue
        lines += [
            f"## {TITLES[bench]}",
            "",
            "| control | seeds | students | all members | students - base | base | per seed |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in rows:
            e = row["bench"][bench]
            minus = _ci(e["students_minus_base"]) if "students_minus_base" in e else "-"
            lines.append(
                f"| {row['control']} | {len(row['seeds'])} | {_ci(e['students'])} | {_ci(e['members'])} | {minus} | "
                f"{_pts(e.get('base'))} | {', '.join(_pts(v) for v in e['students']['values'])} |"
            )
        lines += [""] + _bases_note(rows, bench)
    return lines


def _bases_note(rows: list[dict], bench: str) -> list[str]:
    """Where runs scored different bases (a warm base made again on another machine kind): which run had which,
    and that `base` is their mean while every run's gain is taken from its own."""
    bases = {name: b for row in rows for name, b in (row["bench"][bench].get("bases") or {}).items()}
    if not bases:
        return []
    by_value: dict[float, list[str]] = {}
    for name, b in sorted(bases.items()):
        by_value.setdefault(b, []).append(name)
    listed = "; ".join(
        f"{_pts(b)} in {', '.join(names) if len(names) <= 3 else f'{len(names)} runs'}"
        for b, names in sorted(by_value.items(), key=lambda kv: len(kv[1]))
    )
    return [f"The runs' bases differ ({listed}): `base` is their mean; each run's gain is over its own base.", ""]


def other_scores(study: dict) -> list[str]:
    lines = [
        "## With copied answers counted wrong",
        "",
        "An answer that copies the input or one argument scores 0 even where it is right (the base model too).",
        "",
        "| control | benchmark | students | students - base | base |",
        "|---|---|---|---|---|",
    ]
    for row in study["controls"]:
        for bench, entry in ((b, row["bench"].get(b, {}).get("copy_free")) for b in READ_BENCHES):
            if entry:
                lines.append(
                    f"| {row['control']} | {bench} | {_ci(entry['students'])} | {_ci(entry['students_minus_base'])} | "
                    f"{_pts(entry['base'])} |"
                )
    gold = [(row, b) for row in study["controls"] for b in READ_BENCHES if row["bench"].get(b, {}).get("gold")]
    if gold:
        lines += [
            "",
            "## The gold answer's log-likelihood (nats per problem, summed over its tokens)",
            "",
            "Mean over problems under each student (higher: the gold answer is likelier); mean over seeds [95% t-interval].",
            "",
            "| control | benchmark | students | students - base | base | per seed |",
            "|---|---|---|---|---|---|",
        ]
        for row, bench in gold:
            e = row["bench"][bench]["gold"]
            lines.append(
                f"| {row['control']} | {bench} | {_ci(e['students'], _nats)} | {_ci(e['students_minus_base'], _nats)} | "
                f"{_nats(e['base'])} | {', '.join(_nats(v) for v in e['students']['values'])} |"
            )
    return lines + [""]


def wall_cell(row: dict) -> str:
    """Wall minutes of a control: one mean, or one per kind of machine where its runs were on several."""
    kinds = row.get("wall_by_machine") or []
    if not row.get("wall_s"):
        return ""
    if len(kinds) <= 1:
        return f"{row['wall_s']['mean'] / 60:.0f}"
    return "; ".join(f"{k['mean_s'] / 60:.0f} ({k['n']} on {k['machine'] or 'an unrecorded machine'})" for k in kinds)


def accounting_tables(study: dict) -> list[str]:
    lines = [
        "## Accounting per adapter (mean over seeds of the run's totals)",
        "",
        "| control | role | optimizer steps | trained tokens | rollouts with signal | sum of ||B A||_F | wall min |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in study["controls"]:
        for role in ("students", "teachers"):
            acc = row["accounting"]
            if f"{role}.optimizer_steps" in acc:
                lines.append(
                    f"| {row['control']} | {role} | {acc[f'{role}.optimizer_steps']:g} | {acc[f'{role}.trained_tokens']:g} | "
                    f"{acc[f'{role}.rollouts_with_signal']:g} | {acc.get(f'{role}.delta_norm', float('nan')):.4f} | {wall_cell(row)} |"
                )
    lines += [
        "",
        "## Students' answers (share of problems, mean over students and seeds)",
        "",
        "| control | benchmark | truncated | no answer | copies input | copies an argument | answer tokens |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in study["controls"]:
        for bench, d in row["diagnostics"].items():
            if d:
                lines.append(
                    f"| {row['control']} | {bench} | {_pts(d.get('truncated'))} | {_pts(d.get('no_answer'))} | "
                    f"{_pts(d.get('copies_input'))} | {_pts(d.get('copies_argument'))} | {d.get('mean_answer_tokens', 0):.1f} |"
                )
    if study.get("training_copies"):
        gens = max(len(r["n"]) for r in study["training_copies"])
        lines += [
            "",
            "## Students' training answers that copy, by generation",
            "",
            "Per generation: answers that copy what the task showed (code_o: the input or an argument; code_i: the "
            "output) / answers (copies graded right; all answers graded right).",
            "",
            "| run | type | " + " | ".join(f"gen {g}" for g in range(gens)) + " |",
            "|---|---|" + "---|" * gens,
        ]
        for r in study["training_copies"]:
            cells = [
                f"{c}/{n} ({cc}; {ok})" for c, n, cc, ok in zip(r["copies"], r["n"], r["copies_correct"], r["correct"])
            ]
            lines.append(f"| {r['run']} | {r['type']} | " + " | ".join(cells + [""] * (gens - len(cells))) + " |")
    return lines + [""]


def headline_table(rows: list[dict]) -> list[str]:
    if not rows:
        return []
    lines = [
        "## Headline metrics: mean and spread across seeds",
        "",
        "| control | key | seeds | mean | sd | min | max | 95% t-interval |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        shown = "" if r["interval"] is None else f"[{r['interval'][1]:+.3f}, {r['interval'][2]:+.3f}]"
        lines.append(
            f"| {r['control']} | {r['key']} | {r['n']} | {r['mean']:.3f} | {r['sd']:.3f} | {r['min']:.3f} | "
            f"{r['max']:.3f} | {shown} |"
        )
    return lines + [""]


def baselines_lines(study: dict) -> list[str]:
    """What the pool gives away without reasoning, beside its scores: per type the best constant answer
    and the copy baseline (`populora.analysis.baselines`), and the pooled score of answering each type's
    best constant everywhere."""
    by_type = study.get("pool_baselines") or {}
    if not by_type:
        return []
    lines = [
        "**What the pool gives away** (graded by the project's grader, `python -m populora.analysis.baselines`): "
        + "; ".join(
            f"{t}: the constant `{v['best']['answer']}` is right on {v['best']['correct']} of {v['n_tasks']} "
            f"({_pts(v['best']['share'])}), copying what the task shows on {v['copy']['correct']} "
            f"({_pts(v['copy']['share'])})"
            for t, v in by_type.items()
        )
    ]
    n = sum(v["n_tasks"] for v in by_type.values())
    best = sum(v["best"]["correct"] for v in by_type.values())
    lines[0] += f". One constant per type scores {best} of {n} ({_pts(best / n)}) on the whole pool."
    return lines + [""]


def markdown(study: dict, title: str = DEFAULT_TITLE) -> str:
    lines = [
        f"# {title}",
        "",
        f"{len(study['runs'])} runs: {', '.join(study['runs'])}.",
        "",
        "Scores are in points (students' mean; the baseline's adapter is its student), mean over seeds with a 95% "
        "t-interval across seeds.",
        "",
        *plan_section(study),
        *gate_lines(study.get("gate")),
        *baselines_lines(study),
        *bench_tables(study),
    ]
    if study.get("heldout_curves"):
        lines += curve_table(study["heldout_curves"], study.get("pool_baselines"))
    lines += passk_table(study.get("passk") or {})
    lines += proposal_tables(study.get("proposals") or {})
    lines += comparison_table(study["comparisons"], "## Between controls and against the base, across seeds", INTERVALS)
    lines += [f"* {note}" for note in study.get("notes") or []] + ([""] if study.get("notes") else [])
    if study.get("with_tuning"):
        lines += comparison_table(
            study["with_tuning"],
            "## The held-out pool with the tuning runs counted in (not the answer)",
            "The last generation's comparisons as they would read with the tuning seeds' runs in: what setting them apart moved.",
        )
    lines += signal_table(study.get("signal") or [])
    if study.get("per_run"):
        lines += per_run_table(study["per_run"])
    lines += other_scores(study) + accounting_tables(study) + headline_table(study.get("headline") or [])
    return "\n".join(lines).rstrip() + "\n"
