"""Flat, stable benchmark metrics for `results/metrics.json` (what `dvc metrics diff` compares).

Input: the per-(model, benchmark) result JSONs of stages/bench.py. Each benchmark contributes its
primary metric (code: EvalPlus `pass@1` on base + extra tests; math: `accuracy`), a fraction.
Models are `base`, or `<arm>-<slot>` (arm `population` or `baseline`).

Keys (sorted, numbers only, present only for the arms that ran):

    bench.<b>.n                         problems evaluated
    bench.<b>.base                      the bare base model
    bench.<b>.baseline                  the single-agent baseline (mean if it had several members)
    bench.<b>.population.mean           mean over the population's members
    bench.<b>.population.best           the best member's score (best by overall aggregate, see below)
    bench.<b>.population.weakest        the weakest member's score (weakest by overall aggregate)
    bench.<b>.member.<model>            every member of every arm
    avg.<group>.<same suffixes>         group = code, math, overall
    avg.overall.population.mean_minus_baseline, avg.overall.population.weakest_minus_baseline

A model's aggregate over a group is the mean of its scores on the group's benchmarks; `overall`
is the mean of the code and math averages (AZR's "Total Avg"), or the one present. The best and
weakest members are chosen once, by overall aggregate (ties broken by name), so every `best` key
describes the same member, as the paper's "even the weakest member beats the baseline on
aggregate" requires; `best_weakest_members` returns their names for the report.
"""

from __future__ import annotations

from statistics import mean

from populora.bench import BenchError, benchmark_kind, primary_metric

BASE = "base"
POPULATION = "population"
BASELINE = "baseline"


def arm_of(model: str) -> str:
    return BASE if model == BASE else model.split("-", 1)[0]


def score_table(results: list[dict]) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """{model: {benchmark: primary score}} and {benchmark: n}; errors on duplicates or gaps."""
    table: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for result in results:
        model, bench = result["model"], result["benchmark"]
        if bench in table.setdefault(model, {}):
            raise BenchError(f"two results for {model} on {bench}. Fix: pass each result file once.")
        table[model][bench] = float(result["metrics"][primary_metric(bench)])
        counts[bench] = max(counts.get(bench, 0), int(result["n"]))
    benchmarks = set(counts)
    for model, scores in table.items():
        missing = benchmarks - set(scores)
        if missing:
            raise BenchError(f"{model} has no result for {', '.join(sorted(missing))}; aggregates would not be "
                             "comparable. Fix: run the bench stage for those pairs.")
    return table, counts


def aggregates(scores: dict[str, float]) -> dict[str, float]:
    """code / math averages of one model, and overall = mean of the averages present."""
    groups: dict[str, list[float]] = {}
    for bench, value in scores.items():
        groups.setdefault(benchmark_kind(bench), []).append(value)
    out = {kind: mean(values) for kind, values in groups.items()}
    out["overall"] = mean(out.values())
    return out


def best_weakest_members(table: dict[str, dict[str, float]]) -> tuple[str, str] | None:
    """Names of the population's best and weakest members by overall aggregate, or None."""
    members = sorted(m for m in table if arm_of(m) == POPULATION)
    if not members:
        return None
    overall = {m: aggregates(table[m])["overall"] for m in members}
    best = min(members, key=lambda m: (-overall[m], m))
    weakest = min(members, key=lambda m: (overall[m], m))
    return best, weakest


def _group_values(prefix: str, values: dict[str, float], out: dict, extremes: tuple[str, str] | None) -> None:
    """Keys of one benchmark or aggregate: base, baseline, population stats, every member."""
    by_arm: dict[str, list[str]] = {}
    for model in values:
        by_arm.setdefault(arm_of(model), []).append(model)
    if BASE in by_arm:
        out[f"{prefix}.base"] = values[BASE]
    if BASELINE in by_arm:
        out[f"{prefix}.baseline"] = mean(values[m] for m in by_arm[BASELINE])
    if POPULATION in by_arm and extremes is not None:
        out[f"{prefix}.population.mean"] = mean(values[m] for m in by_arm[POPULATION])
        out[f"{prefix}.population.best"] = values[extremes[0]]
        out[f"{prefix}.population.weakest"] = values[extremes[1]]
    for model in values:
        if model != BASE:
            out[f"{prefix}.member.{model}"] = values[model]


def summarize(results: list[dict]) -> dict[str, float]:
    """The flat metrics dict (see the module docstring), values rounded to 6 decimals."""
    if not results:
        raise BenchError("no benchmark results given. Fix: pass the bench stage outputs with --results.")
    table, counts = score_table(results)
    extremes = best_weakest_members(table)
    out: dict[str, float] = {}
    for bench in sorted(counts):
        out[f"bench.{bench}.n"] = counts[bench]
        _group_values(f"bench.{bench}", {m: table[m][bench] for m in table}, out, extremes)
    per_model = {m: aggregates(scores) for m, scores in table.items()}
    for group in ("code", "math", "overall"):
        values = {m: agg[group] for m, agg in per_model.items() if group in agg}
        if values:
            _group_values(f"avg.{group}", values, out, extremes)
    if "avg.overall.population.mean" in out and "avg.overall.baseline" in out:
        out["avg.overall.population.mean_minus_baseline"] = out["avg.overall.population.mean"] - out["avg.overall.baseline"]
        out["avg.overall.population.weakest_minus_baseline"] = (out["avg.overall.population.weakest"]
                                                                - out["avg.overall.baseline"])
    return {key: round(value, 6) if isinstance(value, float) else value for key, value in sorted(out.items())}
