"""The project's one statistics module: the run report's per-result and paired-problem figures, and
the study's comparisons across seeds. Pure functions, seeded; `populora.analysis.calibration` shows by
simulation which intervals keep their 95% promise in which shape of data.

* `wilson_interval`            one model's score on n problems;
* `paired_bootstrap`           two models on the same problems (one run: what the report pairs); calibrated
                               at the report's sizes, says nothing about seeds;
* `mcnemar_exact`              the same pair, the problems only one of them solves;
* `t_interval`, `welch_interval`, `seed_comparison`
                               **the primary comparison between controls**: seed-level scores, a Student-t
                               interval (one side against the fixed base model) or Welch's (two controls),
                               and the MDE from the same t distribution;
* `minimum_detectable_effect`  the MDE read off an interval, never below the `rule_of_three` bound when the
                               measure is a verdict per problem (no discordant problem is no MDE of 0);
* `two_level_bootstrap`        seeds then problems: kept to show (calibration) that with three seeds that
                               either take off or not it under-covers (~88%); not used for any reported figure.

    >>> wilson_interval(7, 100)
    (0.034319, 0.137495)
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

Z95 = 1.959964  # two-sided 95% normal quantile
Z80 = 0.841621  # one-sided normal quantile of 80% power
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0
TWO_LEVEL_DRAWS = 4000
# how a seed-level comparison was made (the `method` of `seed_comparison`)
WELCH, ONE_SAMPLE, ONE_SEED = "Welch t over seeds", "t over seeds (the base is fixed)", "one seed: tasks only"
BASE_MEASURED = "t over seeds + the base's sampling noise"


def is_finite_number(value) -> bool:
    """A real, finite int or float (not a bool, None, NaN or a string): what a metric file may hold as a figure.

    >>> [is_finite_number(v) for v in (1, 0.5, True, None, float("nan"), "1")]
    [True, True, False, False, False, False]
    """
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def wilson_interval(correct: int, n: int, z: float = Z95) -> tuple[float, float]:
    """95% Wilson score interval of a proportion correct/n (rounded to 6 decimals); (0, 1) when n = 0."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= correct <= n:
        raise ValueError(f"correct = {correct} is not within 0..n = {n}")
    p = correct / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return round(max(0.0, centre - half), 6), round(min(1.0, centre + half), 6)


def paired_bootstrap(
    differences: Sequence[float], *, samples: int = BOOTSTRAP_SAMPLES, seed: int = BOOTSTRAP_SEED
) -> tuple[float, float, float]:
    """(mean, low, high): the mean per-problem difference and its 95% percentile interval from
    `samples` resamplings of the problems with replacement (the same problems for both models,
    so the pairing is kept). Deterministic for a given seed; (0, 0, 0) for no problems."""
    values = np.asarray([float(d) for d in differences])
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 0.0
    centre = float(values.mean())
    if np.all(values == values[0]):  # every resample has the same mean
        return round(centre, 6), round(centre, 6), round(centre, 6)
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, n, size=(samples, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return round(centre, 6), round(float(low), 6), round(float(high), 6)


def covers_zero(low: float, high: float) -> bool:
    """True when a difference's interval includes 0: no detectable difference."""
    return low <= 0 <= high


def mcnemar_exact(first: Sequence[int], second: Sequence[int]) -> dict:
    """Exact McNemar test of two models' verdicts on the same problems: `first_only` and
    `second_only` count the problems only one of them solves, `p` is the two-sided exact binomial
    p-value of that split under "equally good" (1.0 when they never disagree).

    >>> mcnemar_exact([1, 1, 1, 0], [0, 0, 1, 0])
    {'first_only': 2, 'second_only': 0, 'p': 0.5}
    """
    if len(first) != len(second):
        raise ValueError(f"{len(first)} verdicts against {len(second)}: not the same problems")
    only_first = sum(bool(a) and not bool(b) for a, b in zip(first, second))
    only_second = sum(bool(b) and not bool(a) for a, b in zip(first, second))
    if only_first + only_second == 0:
        return {"first_only": 0, "second_only": 0, "p": 1.0}
    from scipy.stats import binomtest

    p = binomtest(only_first, only_first + only_second, 0.5).pvalue
    return {"first_only": only_first, "second_only": only_second, "p": float(f"{min(1.0, p):.3g}")}


def rule_of_three(n_problems: int) -> float:
    """The bound an MDE falls back on where no problem's verdict differs: with 0 discordant problems of
    n the discordance rate's one-sided 95% upper bound is about 3 / n (the rule of three), and a
    difference of two verdict vectors is at most their discordance, so differences up to 3 / n are not
    excluded. (One discordant pair, 1 / n, is the smallest difference the measure can show at all.)

    >>> rule_of_three(128)
    0.023438
    """
    return round(3 / n_problems, 6) if n_problems else 1.0


def minimum_detectable_effect(
    low: float, high: float, z: float = Z95, power_z: float = Z80, n_problems: int | None = None
) -> float:
    """The smallest true difference a measurement with this 95% interval finds with 80% power at the
    5% level: (z_0.975 + z_0.8) x its standard error, the error read off the interval's half-width
    (2.8 / 1.96 = 1.43 half-widths). Beside a "no detectable difference" it says how large a
    difference could still hide. With `n_problems` (a verdict per problem) it is never below
    `rule_of_three(n_problems)`: an interval of width 0 (no discordant problem) is no proof of equality.

    >>> minimum_detectable_effect(-0.02, 0.02)
    0.028588
    >>> minimum_detectable_effect(0.0, 0.0, n_problems=128)
    0.023438
    """
    mde = round((z + power_z) * (high - low) / (2 * z), 6)
    return max(mde, rule_of_three(n_problems)) if n_problems else mde


def _t(q: float, df: float) -> float:
    from scipy.stats import t

    return float(t.ppf(q, df))


def t_mde(se: float, df: float) -> float:
    """The MDE of a t-based comparison: (t_0.975 + t_0.8) x its standard error, at its degrees of freedom
    (with 3 seeds: 5.4 standard errors against the base, about 3.7 between two controls)."""
    return (_t(0.975, df) + _t(0.8, df)) * se


def t_interval(values: Sequence[float], sd_floor: float = 0.0) -> tuple[float, float, float] | None:
    """(mean, low, high): the 95% Student-t interval of the mean across seeds (run-to-run drift);
    None with fewer than 2 values. `sd_floor`: the smallest standard deviation believed (`resolution`:
    seeds that happen to score alike are no proof that seeds never differ).

    >>> t_interval([1.0, 2.0, 3.0])
    (2.0, -0.484138, 4.484138)
    """
    if len(values) < 2:
        return None
    centre, sd = float(np.mean(values)), max(float(np.std(values, ddof=1)), sd_floor)
    half = _t(0.975, len(values) - 1) * sd / math.sqrt(len(values))
    return round(centre, 6), round(centre - half, 6), round(centre + half, 6)


def resolution(n_problems: int) -> float:
    """The standard deviation a seed-level score is never believed to be below: one problem's worth (1 / n).
    Verdicts move in steps of 1 / n, so two or three seeds that score alike (likely at these sizes) show a
    spread of 0 that the seeds do not have; without the floor their interval would have width 0."""
    return 1 / n_problems if n_problems else 0.0


def welch_interval(
    a: Sequence[float] | np.ndarray, b: Sequence[float] | np.ndarray, sd_floor: float = 0.0, *, df_rule: str = "hsu"
) -> dict:
    """mean(a) - mean(b) with Welch's 95% interval (unequal variances) and its MDE; both sides need 2 values or
    more; each side's standard deviation is at least `sd_floor` (`resolution`). Degrees of freedom (`df_rule`):
    Hsu's, the smaller side's values - 1 (the default: `populora.analysis.design_coverage` shows
    Welch-Satterthwaite's, which can be near the sum of both sides, covering 92% where 95% is promised when
    seeds take off or not and the two controls' spreads differ), or "satterthwaite". Where neither side
    varies the interval has width 0.

    >>> welch_interval([1.0, 2.0, 3.0], [0.0, 1.0, 2.0])["low"]
    -2.513101
    >>> welch_interval([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], df_rule="satterthwaite")["low"]
    -1.266958
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if len(a) < 2 or len(b) < 2:
        raise ValueError(f"Welch's interval needs 2 seeds a side, got {len(a)} and {len(b)}")
    if df_rule not in ("hsu", "satterthwaite"):
        raise ValueError(f"df_rule: 'hsu' or 'satterthwaite', not {df_rule!r}")
    va, vb = max(a.var(ddof=1), sd_floor**2) / len(a), max(b.var(ddof=1), sd_floor**2) / len(b)
    delta, se = float(a.mean() - b.mean()), math.sqrt(va + vb)
    if df_rule == "hsu":
        df = float(min(len(a), len(b)) - 1)
    else:
        df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1)) if se > 0 else float(len(a) + len(b) - 2)
    half = _t(0.975, df) * se
    return {
        "delta": round(delta, 6),
        "low": round(delta - half, 6),
        "high": round(delta + half, 6),
        "se": round(se, 6),
        "df": round(df, 2),
        "mde": round(t_mde(se, df), 6),
    }


def sampled_mean_variance(rates: Sequence[float] | np.ndarray, samples: int) -> float:
    """The variance of a pool's mean pass rate measured once with `samples` answers per task at temperature 1
    (`rates`: the measured per-task rates): the sum of the per-task binomial variances, unbiased
    (p(1 - p) / (samples - 1)), over the tasks squared. A base scored this way is not a fixed row: every
    seed's difference from it shares its noise, which a t over the seeds cannot see.

    >>> sampled_mean_variance([0.5, 0.5], 2)
    0.125
    """
    rates = np.asarray(rates, float)
    if samples < 2 or not len(rates):
        return 0.0
    return float((rates * (1 - rates) / (samples - 1)).sum() / len(rates) ** 2)


def bases_mean_variance(rows: np.ndarray, samples: int) -> float:
    """`sampled_mean_variance` of the mean of per-seed bases (`rows` [seeds, tasks], a seed's base's measured
    rates): the seeds sharing one base (identical rows) share its noise, so each distinct base j measured for n_j
    of the N seeds adds (n_j / N)^2 times its variance. With one base for all seeds that is its variance; with a
    base per seed the bases' noise is in the seeds' spread as well, and adding it errs wide.

    >>> bases_mean_variance(np.array([[0.5, 0.5], [0.5, 0.5]]), 2)
    0.125
    """
    rows = np.asarray(rows, float).reshape(-1, np.shape(rows)[-1])
    distinct, counts = np.unique(rows, axis=0, return_counts=True)
    return float(sum((n / len(rows)) ** 2 * sampled_mean_variance(row, samples) for row, n in zip(distinct, counts)))


def seed_comparison(
    left: np.ndarray,
    right: np.ndarray | None,
    *,
    right_is_base: bool = False,
    verdicts: bool = True,
    base_variance: float = 0.0,
) -> dict:
    """The primary comparison of two sides scored on the same problems: `left` [seeds, problems] of
    per-problem scores (a seed's students averaged), `right` the same for the other control or, with
    `right_is_base`, the base model's scores: one row (the same base in every run: no seed spread) or one row per
    seed of `left` (each run's own base, e.g. a warm base made again on another machine), each seed then
    compared with its own base.

    * two controls with 2+ seeds each: Welch over the seed means;
    * a control against the base with 2+ seeds: a one-sample t over the seeds' (mean - base);
    * one seed on a side: the paired bootstrap over problems (`paired_bootstrap`, seed 0 against the
      other side's mean), labelled so: it knows nothing of the spread between seeds.

    `base_variance`: the variance of the base row's mean where the base was itself sampled (a pass rate over
    answers at temperature 1: `sampled_mean_variance`); the interval against the base then adds it to the
    seeds' squared standard error, with Satterthwaite's degrees of freedom (the base's taken as many). Without
    it a control that barely varies between seeds gets an interval that ignores the base's own noise
    (`populora.analysis.design_coverage`: 64% coverage where 95% is promised); the degrees of freedom stay the
    seeds' - 1 (conservative: the base's variance is known far better than the seeds').

    Where `verdicts` (0/1 per problem) the seed-level standard deviation is at least `resolution` and the
    MDE, from the same distribution, never below `rule_of_three`. Returns delta, low, high, mde, method, df
    (None for one seed)."""
    left = np.asarray(left, float)
    base_row = _base_rows(right, left) if right_is_base else None
    right = None if right_is_base else np.asarray(right, float)
    n_problems = left.shape[1]
    floor, sd_floor = (rule_of_three(n_problems), resolution(n_problems)) if verdicts else (0.0, 0.0)
    # base_row is set with right_is_base, right without it (the other is None)
    out: dict[str, Any]
    if base_row is not None and len(left) >= 2:
        out = _t_against_base(left, base_row, sd_floor, base_variance)
    elif right is not None and len(left) >= 2 and len(right) >= 2:
        welch = welch_interval(left.mean(axis=1), right.mean(axis=1), sd_floor)
        out = {key: welch[key] for key in ("delta", "low", "high", "df", "mde")} | {"method": WELCH}
    else:
        out = _bootstrap_one_seed(left, right, base_row)
    out["mde"] = round(max(out["mde"], floor), 6)
    return out


def _base_rows(right, left: np.ndarray) -> np.ndarray:
    """The base's scores as [seeds of `left`, problems]: one row repeated, or one row per seed as given."""
    rows = np.asarray(right, float).reshape(-1, left.shape[1])
    if len(rows) == 1:
        return np.repeat(rows, len(left), axis=0)
    if len(rows) != len(left):
        raise ValueError(f"{len(rows)} base rows for {len(left)} seeds: give one row, or one per seed")
    return rows


def _t_against_base(left: np.ndarray, base_row: np.ndarray, sd_floor: float, base_variance: float) -> dict[str, Any]:
    """`seed_comparison` of 2+ seeds against their bases (`base_row`: one row per seed): a one-sample t over the
    seeds' (mean - their base's mean), the base's own variance (if sampled) added to the squared standard error.
    The MDE is not yet floored."""
    gains = left.mean(axis=1) - base_row.mean(axis=1)
    se, df = (
        math.sqrt(max(float(np.std(gains, ddof=1)), sd_floor) ** 2 / len(gains) + base_variance),
        len(gains) - 1,
    )
    centre, half = float(gains.mean()), _t(0.975, df) * se
    return {
        "delta": round(centre, 6),
        "low": round(centre - half, 6),
        "high": round(centre + half, 6),
        "df": df,
        "mde": t_mde(se, df),
        "method": BASE_MEASURED if base_variance > 0 else ONE_SAMPLE,
    }


def _bootstrap_one_seed(left: np.ndarray, right: np.ndarray | None, base_row: np.ndarray | None) -> dict[str, Any]:
    """`seed_comparison` with one seed on a side: the paired bootstrap over problems of `left` (its seeds averaged
    per problem) against `right`'s seeds averaged likewise, or the base row where `right` is None; it knows nothing
    of the spread between seeds. The MDE is not yet floored."""
    other = right.mean(axis=0) if right is not None else np.asarray(base_row, float).mean(axis=0)
    delta, low, high = paired_bootstrap(list(left.mean(axis=0) - other))
    return {
        "delta": delta,
        "low": low,
        "high": high,
        "df": None,
        "mde": minimum_detectable_effect(low, high),
        "method": ONE_SEED,
    }


def two_level_bootstrap(
    a: np.ndarray, b: np.ndarray, *, draws: int = TWO_LEVEL_DRAWS, seed: int = 0
) -> tuple[float, float, float]:
    """(difference, low, high): mean(a) - mean(b) with a 95% percentile interval from resampling
    seeds (rows, independently per side) and then problems (columns, one draw for both sides).
    Not used for a reported figure: `populora.analysis.calibration` shows it under-covers with three
    seeds that either take off or not (the shape of the learning study)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if b.shape[1] != a.shape[1]:
        raise ValueError("the two sides were scored on different numbers of problems")
    rng = np.random.default_rng(seed)
    out = np.empty(draws)
    for start in range(0, draws, 500):  # vectorised in blocks: draws x problems indices at a time
        k = min(500, draws - start)
        cols = rng.integers(0, a.shape[1], (k, a.shape[1]))
        rows_a, rows_b = rng.integers(0, len(a), (k, len(a))), rng.integers(0, len(b), (k, len(b)))
        means_a = a[:, cols].mean(axis=2).T  # [k, seeds]: each seed's mean over the drawn problems
        means_b = b[:, cols].mean(axis=2).T
        resampled_a = np.take_along_axis(means_a, rows_a, 1)  # [k, seeds]: the seeds drawn with replacement
        resampled_b = np.take_along_axis(means_b, rows_b, 1)
        out[start : start + k] = resampled_a.mean(axis=1) - resampled_b.mean(axis=1)
    low, high = np.percentile(out, [2.5, 97.5])
    return round(float(a.mean() - b.mean()), 6), round(float(low), 6), round(float(high), 6)
