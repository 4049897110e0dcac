"""The report's benchmark tables in Markdown: scores per model and benchmark, the paired
differences with their intervals and verdicts, and the paper's two claims checked on this run.

They read `results/metrics.json` (`populora.report.metrics.benchmark_metrics`) and the score table;
nothing here computes a statistic.
"""

from __future__ import annotations

from populora.core.refs import BASE, ModelRef
from populora.core.stats import covers_zero, minimum_detectable_effect
from populora.report.figures import model_order
from populora.report.metrics import BASELINE, POPULATION, score_columns


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def benchmark_table(
    table: dict[str, dict[str, float]], counts: dict[str, int], metrics: dict[str, float], refs: dict[str, ModelRef]
) -> str:
    """Markdown: one row per benchmark / average; columns: the population's students (headline) and
    teachers, baseline, base, every member (`metrics` is benchmark_metrics()'s output for the same results)."""
    members = [ref.name for ref in model_order(refs[m] for m in table if m != BASE)]
    stats = [
        ("population.mean", "pop. students mean"),
        ("population.best", "pop. best student"),
        ("population.weakest", "pop. weakest student"),
        ("population.teachers.mean", "pop. teachers mean"),
        ("baseline", "baseline"),
        ("base", "base"),
    ]
    stats = [(key, label) for key, label in stats if any(k.endswith("." + key) for k in metrics)]
    header = ["benchmark", "n"] + [label for _, label in stats] + members
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for column in score_columns(table):
        prefix = column if column.startswith("avg.") else f"bench.{column}"
        n = str(counts[column]) if column in counts else ""
        cells = [column.replace("avg.", "**avg ") + ("**" if column.startswith("avg.") else ""), n]
        cells += [_pct(metrics.get(f"{prefix}.{key}")) for key, _ in stats]
        cells += [_with_interval(metrics, prefix, m) for m in members]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _with_interval(metrics: dict[str, float], prefix: str, model: str) -> str:
    value = _pct(metrics.get(f"{prefix}.member.{model}"))
    low, high = metrics.get(f"{prefix}.ci.{model}.low"), metrics.get(f"{prefix}.ci.{model}.high")
    return value if low is None or high is None else f"{value} [{100 * low:.0f}-{100 * high:.0f}]"


DIFFERENCES = (
    ("students_mean_minus_baseline", "population students' mean - baseline"),
    ("best_minus_baseline", "best student - baseline"),
    ("weakest_minus_baseline", "weakest student - baseline"),
    ("mean_minus_base", "students' mean - base model"),
    ("students_mean_minus_base", "population students' mean - base model"),
    ("baseline_minus_base", "baseline - base model"),
)


def difference_verdict(delta: float, low: float, high: float) -> str:
    """'no detectable difference' when the 95% interval covers 0 (its MDE, never 0, beside it), else which
    side is higher."""
    if covers_zero(low, high):
        return "no detectable difference"
    return "higher" if delta > 0 else "lower"


def _mde_cell(low: float, high: float, n_problems: int | None, scale: float, digits: int) -> str:
    """The MDE of a paired difference: read off its interval and, for verdicts on n problems, never below
    the rule-of-three bound (no discordant problem is no proof of equality: `populora.core.stats`)."""
    if not n_problems and high <= low:
        return "-"  # a continuous score that did not move on any problem: no spread to read an MDE from
    return f"{scale * minimum_detectable_effect(low, high, n_problems=n_problems):.{digits}f}"


def differences_table(metrics: dict[str, float]) -> str | None:
    """Markdown: the paired differences per benchmark, in points, with their 95% intervals and verdicts."""
    benches = sorted({key.split(".")[1] for key in metrics if key.startswith("bench.") and ".diff." in key})
    rows = []
    for bench in benches:
        for name, label in DIFFERENCES:
            key = f"bench.{bench}.diff.{name}"
            if f"{key}.delta" in metrics:
                delta, low, high = (metrics[f"{key}.{part}"] for part in ("delta", "low", "high"))
                n = int(metrics.get(f"bench.{bench}.n") or 0) or None
                rows.append(
                    f"| {bench} | {label} | {100 * delta:+.1f} | [{100 * low:+.1f}, {100 * high:+.1f}] | "
                    f"{_mde_cell(low, high, n, 100, 1)} | {difference_verdict(delta, low, high)} |"
                )
    if not rows:
        return None
    header = [
        "| benchmark | difference | points | 95% paired-bootstrap interval | minimum detectable effect | verdict |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join(header + rows)


def gold_loglik_table(metrics: dict[str, float]) -> str | None:
    """Markdown: the paired differences of the gold-answer log-likelihood (nats per problem), with the
    minimum detectable effect; a continuous measure that sees effects pass@1 cannot."""
    rows = []
    for key in sorted(k for k in metrics if ".gold_loglik.diff." in k and k.endswith(".delta")):
        bench, name = key.split(".")[1], key.split(".diff.")[1].removesuffix(".delta")
        stem = key.removesuffix(".delta")
        delta, low, high = metrics[key], metrics[f"{stem}.low"], metrics[f"{stem}.high"]
        label = dict(DIFFERENCES).get(name, name.replace("_", " "))
        verdict = "identical scores" if high <= low and delta == 0 else difference_verdict(delta, low, high)
        rows.append(
            f"| {bench} | {label} | {delta:+.3f} | [{low:+.3f}, {high:+.3f}] | "
            f"{_mde_cell(low, high, None, 1, 3)} | {verdict} |"
        )
    if not rows:
        return None
    header = [
        "| benchmark | difference | nats per problem | 95% paired-bootstrap interval | minimum detectable effect "
        "| verdict |",
        "|---|---|---|---|---|---|",
    ]
    return "\n".join(header + rows)


def versus_base_table(metrics: dict[str, float]) -> str | None:
    """Markdown: per member and benchmark, the problems only it or only the base solves, exact McNemar p."""
    rows = []
    for key in sorted(k for k in metrics if ".vs_base." in k and k.endswith(".p")):
        stem = key.removesuffix(".p")
        bench, model = stem.split(".")[1], stem.split(".vs_base.")[1]
        rows.append(
            f"| {bench} | {model} | {metrics[stem + '.member_only']} | {metrics[stem + '.base_only']} | "
            f"{metrics[key]:.3g} |"
        )
    if not rows:
        return None
    return "\n".join(
        [
            "| benchmark | member | solved by the member only | by the base only | exact McNemar p |",
            "|---|---|---|---|---|",
            *rows,
        ]
    )


def claims(metrics: dict[str, float], extremes: tuple[str, str] | None) -> list[str]:
    """The paper's two claims, checked on this run's numbers (overall aggregate), students only."""
    lines = []
    if extremes:
        lines.append(f"- Best student by overall aggregate: `{extremes[0]}`; weakest: `{extremes[1]}`.")
    if "avg.overall.population.mean_minus_baseline" in metrics:
        for key, what in (("mean", "population students' mean"), ("weakest", "weakest student")):
            delta = 100 * metrics[f"avg.overall.population.{key}_minus_baseline"]
            verdict = "is above" if delta > 0 else ("ties" if delta == 0 else "is below")
            lines.append(
                f"- The {what} {verdict} the baseline overall ({delta:+.1f} points, point estimate; see the "
                "paired intervals per benchmark below)."
            )
        diffs = [k for k in metrics if k.endswith(".diff.students_mean_minus_baseline.low")]
        if diffs and all(covers_zero(metrics[k], metrics[k[:-4] + ".high"]) for k in diffs):
            lines.append(
                "- On every benchmark the students' mean and the baseline show no detectable difference "
                "(every 95% interval covers 0)."
            )
    else:
        arms = sorted({key.split(".")[2] for key in metrics if key.startswith("avg.overall.")} & {POPULATION, BASELINE})
        ran = f"only the {arms[0]} arm ran" if arms else "no trained arm ran"
        lines.append(f"- {ran[0].upper()}{ran[1:]}, so population and baseline cannot be compared.")
    return lines


HEADLINE_NOTE = (
    "Headline = students. The population's mean / best / weakest are over its students (solvers), "
    "because benchmarks measure solving and only students (and the baseline's single adapter, which "
    "both proposes and solves) are trained to solve; teachers are trained to propose, so they are "
    "reported separately (pop. teachers mean, and each member's column) and never mixed into the headline."
)
