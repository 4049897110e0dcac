"""The generated report: `write_report(results, dynamics, out_dir)` writes `report.md` with the
benchmark figure (populora/report/figures.py) and tables (populora/report/tables.py) next to the
training dynamics (populora/report/dynamics.py) and the per-job timings of a Snakemake run
(populora/report/timings.py), and the same as one self-contained page, `report.html`
(populora/report/html.py).

`results` are the bench stage's result dicts, `metrics` the bench_summary stage's
`results/metrics.json` computed from them (`populora.report.metrics.benchmark_metrics`; read, not
recomputed); `dynamics` maps an arm to its `dynamics.json` rows.
The headline population statistics are over students (the solvers): teachers are never trained to
solve, so mixing them in would measure the proposer role's drift on a solving benchmark. Teachers
are shown separately. Every paired difference whose 95% interval covers 0 is reported as
"no detectable difference".
"""

from __future__ import annotations

from pathlib import Path

from populora.core.io import write_text
from populora.report.dynamics import (
    SIGNAL_NOTE,
    final_dynamics_table,
    plot_complexity,
    plot_dynamics,
    plot_ratings,
    signal_table,
)
from populora.report.figures import plot_benchmarks
from populora.report.heldout import HELDOUT_NOTE, constant_line, heldout_table, learning_note
from populora.report.html import report_html
from populora.report.metrics import best_weakest_members, refs_of, result_intervals, score_table
from populora.report.tables import (
    HEADLINE_NOTE,
    benchmark_table,
    claims,
    differences_table,
    gold_loglik_table,
    versus_base_table,
)
from populora.report.timings import TIMINGS_NOTE, timings_table
from populora.report.warm_start import warm_start_section


def write_report(
    results: list[dict],
    metrics: dict[str, float],
    dynamics: dict[str, list[dict]],
    out_dir: str | Path,
    heldout: dict[str, dict] | None = None,
    timings: list[dict] | None = None,
    warm_start: dict | None = None,
) -> Path:
    """Write report.md and its figures into `out_dir`; returns the Markdown path. `heldout` maps an arm
    to its held-out verdicts (`heldout_verdicts.json`, populora/report/heldout.py); `timings` are the
    per-stage rows of `populora.report.timings.stage_timings` (none: the report says so); `warm_start` is the
    warm start's record (`results/warm_start.json`, populora/report/warm_start.py)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sections = [
        *_benchmark_sections(results, metrics, out_dir),
        "## Training dynamics",
        "",
        *_heldout_sections(heldout or {}),
        *_dynamics_sections(dynamics, out_dir),
        *warm_start_section(warm_start, out_dir),
        "## Per-job timings",
        "",
        *([TIMINGS_NOTE, ""] if timings else []),
        timings_table(timings or []),
        "",
    ]
    path = out_dir / "report.md"
    write_text(path, "\n".join(sections))
    write_text(out_dir / "report.html", report_html(path.read_text(), out_dir))  # the same, one page with its figures
    return path


_EXTREMES_NOTE = (
    "pop. best / weakest student: the scores of the student with the best / weakest overall "
    "aggregate (one student for every row), not the per-row maximum / minimum. Member columns: "
    "score [95% Wilson interval]."
)
_DIFFERENCES_NOTE = (
    "Per-problem differences resampled over problems (2000 paired-bootstrap samples): the uncertainty of "
    "these models on other problems, not of another seed's run (`python -m populora.analysis` compares seeds). "
    "An interval that covers 0 means no detectable difference at this sample size. The best / weakest "
    "student is chosen on the same data, which the intervals do not account for. The minimum detectable "
    "effect is the true difference found with 80% power at the 5% level, never below the rule-of-three "
    "bound 3 / n (no problem's verdict differing is no proof of equality): no detectable difference says "
    "nothing below it."
)
_VERSUS_NOTE = "Problems only the member or only the base solves, and the exact McNemar p of that split."
_GOLD_NOTE = (
    "The log-probability (nats) each model gives the gold answer in the benchmark's own prompt, one forward "
    "pass per problem: a paired, continuous measure that moves on every problem, where pass@1 moves on the "
    "few the models disagree on. Higher is better."
)
_PASS_RATE_NOTE = (
    "The same pool, the mean pass rate over heldout.samples answers per task at temperature 1 "
    "(%; a continuous measure that moves on every task, not only where the greedy answer flips):"
)


def _subsection(title: str, note: str, body: str | None) -> list[str]:
    """Markdown lines of a titled table with its note; none when the table is empty."""
    return [title, "", note, "", body, ""] if body else []


def _introduction(results: list[dict], models: int) -> list[str]:
    """The report's title and what its scores are: how many results, problems, token caps."""
    caps = sorted({str(r.get("max_new_tokens")) for r in results})
    return [
        "# PopuLoRA: benchmarks and training dynamics",
        "",
        f"Generated by `stages/report.py` from {len(results)} benchmark results of {models} "
        f"model{'s' if models != 1 else ''} (the first n problems of each benchmark file, in file order, n as in "
        f"the table: bench.limit, or bench.limits per benchmark; bench.max_new_tokens = {', '.join(caps)}).",
        "Scores are percentages: code = EvalPlus pass@1 on base + extra tests (greedy), math = accuracy "
        "(greedy, zero-shot, boxed answer), CRUXEval = pass@1 graded by the project's verifier (greedy); with n "
        "problems one problem is worth 100/n points.",
        "",
        HEADLINE_NOTE,
        "",
    ]


def _benchmark_sections(results: list[dict], metrics: dict[str, float], out_dir: Path) -> list[str]:
    """Markdown lines from the title to the benchmark figure (drawn into `out_dir`): tables, claims, differences."""
    table, counts = score_table(results)
    refs = refs_of(results)
    extremes = best_weakest_members(table, refs)
    plot_benchmarks(table, refs, out_dir / "benchmarks.png", result_intervals(results))
    return [
        *_introduction(results, len(table)),
        "## Benchmarks",
        "",
        benchmark_table(table, counts, metrics, refs),
        "",
        *([line, ""] if (line := handed_back_line(results)) else []),
        *([line, ""] if (line := raw_base_line(metrics)) else []),
        _EXTREMES_NOTE if extremes else "",
        "",
        *claims(metrics, extremes),
        "",
        *_subsection("### Paired differences (same problems)", _DIFFERENCES_NOTE, differences_table(metrics)),
        *_subsection("### Each member against the base model", _VERSUS_NOTE, versus_base_table(metrics)),
        *_subsection("### Gold-answer log-likelihood (CRUXEval)", _GOLD_NOTE, gold_loglik_table(metrics)),
        "![Benchmark scores per model](benchmarks.png)",
        "",
    ]


def _heldout_sections(heldout: dict[str, dict]) -> list[str]:
    """Markdown lines of the held-out pool: greedy accuracy, pass rates, whether learning shows; none without a pool."""
    pool_table = heldout_table(heldout)
    if not pool_table:
        return []
    rates = heldout_table(heldout, measure="pass_rate")
    note = learning_note(heldout, measure="pass_rate" if rates else "greedy")
    return [
        *_subsection("### Held-out pool (in-distribution learning curves)", HELDOUT_NOTE, pool_table),
        constant_line(heldout),
        "",
        *([_PASS_RATE_NOTE, "", rates, ""] if rates else []),
        *([f"**{note}**", ""] if note else []),
    ]


def _dynamics_sections(dynamics: dict[str, list[dict]], out_dir: Path) -> list[str]:
    """Markdown lines of the training dynamics and their figures (drawn into `out_dir`), or the note of none."""
    if not dynamics:
        return ["No dynamics files were given, so no training dynamics are shown.", ""]
    plot_dynamics(dynamics, out_dir / "dynamics.png")
    plot_complexity(dynamics, out_dir / "complexity.png")
    plot_ratings(dynamics, out_dir / "ratings.png")
    return [
        final_dynamics_table(dynamics),
        "",
        *_subsection("### Signal accounting", SIGNAL_NOTE, signal_table(dynamics)),
        "![Solve rates, validity, rewards and coverage per generation](dynamics.png)",
        "",
        "![Complexity of valid proposed programs](complexity.png)",
        "",
        "![TrueSkill ratings per slot](ratings.png)",
        "",
    ]


HANDED_BACK = {"copy": "an argument of the call given as the output", "echo": "the output handed back as the input"}


def handed_back_line(results: list[dict]) -> str:
    """What a CRUXEval score stands beside: the copy baseline of CRUXEval-O and the echo baseline of CRUXEval-I
    (graded in the sandbox by the bench stage: `populora.bench.cruxeval.handed_back_baseline`)."""
    seen: dict[str, dict] = {}
    for result in results:
        if result.get("baseline") and result.get("benchmark") not in seen:
            seen[result["benchmark"]] = result["baseline"]
    parts = [
        f"{bench}: the {row['kind']} baseline ({HANDED_BACK[row['kind']]}) solves {row['correct']}/{row['n']} "
        f"({100 * row['accuracy']:.1f}%)"
        for bench, row in sorted(seen.items())
    ]
    return (
        "Beside the CRUXEval scores, answers that only read what the prompt shows: " + "; ".join(parts) + "."
        if parts
        else ""
    )


def raw_base_line(metrics: dict) -> str:
    """The raw base (before the warm start) beside the base on the benchmarks it was scored on (bench.raw_base)."""
    parts = []
    for key in sorted(metrics):
        if key.startswith("bench.") and key.endswith(".raw_base") and key.count(".") == 2:
            bench = key.split(".")[1]
            n, diff = metrics.get(f"bench.{bench}.n"), f"bench.{bench}.diff.base_minus_raw_base"
            part = (
                f"{bench}: raw base {metrics.get(f'bench.{bench}.correct.raw_base')}/{n}, base "
                f"{metrics.get(f'bench.{bench}.correct.base')}/{n}"
            )
            if f"{diff}.delta" in metrics:
                part += (
                    f" (base - raw base {100 * metrics[f'{diff}.delta']:+.1f} points, 95% paired bootstrap "
                    f"[{100 * metrics[f'{diff}.low']:+.1f}, {100 * metrics[f'{diff}.high']:+.1f}])"
                )
            parts.append(part)
    return (
        (
            "The base above is the warm base (the raw base after the warm start); the raw base beside it: "
            + "; ".join(parts)
            + "."
        )
        if parts
        else ""
    )
