"""The run's headline figures, `results/headline.json`: the one DVC metrics file of a run, so that
`dvc exp show` and `dvc metrics diff` read a few dozen columns, not the thousand of the full tables.

Keys (flat, numbers only; absent when what they describe did not run):

    <g>.mean | .best | .weakest     the students of the headline arm on group g: the population when it
                                    ran, else the one arm that ran (the baseline's adapter is its student)
    <g>.baseline                    the baseline's adapter, when both arms ran
    <g>.base                        the bare base model (the warm base after a warm start)
    <g>.raw_base                    the raw base before the warm start, where every benchmark of g ran on it too
                                    (bench.raw_base)
    <g>.mean_minus_baseline         students' mean minus the baseline (both arms ran)
    <g>.mean_minus_base             students' mean minus the base model
      g = code, math, cruxeval (pass@1 / accuracy averaged over the group's benchmarks), overall (mean of the groups)
    heldout.mean | .baseline | .base | .mean_minus_base | .raw_base
                                    greedy accuracy on the held-out pool after the last generation (base: the
                                    frozen base, the warm base after a warm start; raw_base: the model before it)
    heldout.pass_rate.mean | .base  the mean pass rate over heldout.samples answers at temperature 1 (when sampled)
    solve_rate.mean | .baseline     the students' solve rate in the last generation (training tasks)

Every figure is a fraction (0-1). The full tables stay in `results/metrics.json` (per benchmark and
member, intervals, paired differences: populora/report/metrics.py) and `results/dynamics/<arm>/`.
"""

from __future__ import annotations

from populora.report.metrics import BASELINE, GROUPS, POPULATION, benchmark_kind


def _put(out: dict, key: str, value) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        out[key] = round(float(value), 6)


def headline_metrics(metrics: dict, summaries: dict[str, dict]) -> dict:
    """The headline (see the module docstring) from the full benchmark metrics (`benchmark_metrics`)
    and each arm's dynamics summary (`populora.report.summary.arm_summary`: `final.*` keys)."""
    both = any(key.startswith("avg.overall.population.") for key in metrics) and "avg.overall.baseline" in metrics
    out: dict[str, float] = {}
    for group in GROUPS:
        prefix = f"avg.{group}"
        side = f"{prefix}.population." if both else f"{prefix}."
        for stat in ("mean", "best", "weakest"):
            _put(out, f"{group}.{stat}", metrics.get(side + stat))
        _put(out, f"{group}.base", metrics.get(f"{prefix}.base"))
        raw = [metrics.get(f"bench.{b}.raw_base") for b in _benchmarks(metrics) if benchmark_kind(b) == group]
        scores = [score for score in raw if score is not None]
        if raw and len(scores) == len(raw):  # every benchmark of the group ran on the raw base too
            _put(out, f"{group}.raw_base", sum(scores) / len(scores))
        if both:
            _put(out, f"{group}.baseline", metrics.get(f"{prefix}.baseline"))
        _differences(out, group)
    arms = [arm for arm in (POPULATION, BASELINE) if arm in summaries]
    if arms:
        lead = summaries[arms[0]]
        _put(out, "heldout.mean", lead.get("final.heldout.students.accuracy"))
        _put(out, "heldout.base", lead.get("final.heldout.base.accuracy"))
        _put(out, "heldout.raw_base", lead.get("final.heldout.raw_base.accuracy"))
        _put(out, "heldout.pass_rate.mean", lead.get("final.heldout.students.pass_rate"))
        _put(out, "heldout.pass_rate.base", lead.get("final.heldout.base.pass_rate"))
        _put(out, "solve_rate.mean", lead.get("final.solve_rate"))
        if len(arms) == 2:
            _put(out, "heldout.baseline", summaries[BASELINE].get("final.heldout.students.accuracy"))
            _put(out, "solve_rate.baseline", summaries[BASELINE].get("final.solve_rate"))
        _differences(out, "heldout")
    return dict(sorted(out.items()))


def _benchmarks(metrics: dict) -> list[str]:
    """The benchmarks the metrics describe (each has its `bench.<b>.n`)."""
    return [
        key[len("bench.") : -len(".n")]
        for key in metrics
        if key.startswith("bench.") and key.endswith(".n") and key.count(".") == 2
    ]


def _differences(out: dict, group: str) -> None:
    mean = out.get(f"{group}.mean")
    if mean is None:
        return
    for other in ("baseline", "base"):
        if f"{group}.{other}" in out:
            out[f"{group}.mean_minus_{other}"] = round(mean - out[f"{group}.{other}"], 6)
