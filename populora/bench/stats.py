"""Uncertainty of benchmark scores: Wilson intervals per result, paired-bootstrap intervals of
differences between models scored on the same problems. Pure functions, seeded.

    >>> wilson_interval(7, 100)
    (0.034319, 0.137495)
    >>> wilson_interval(0, 0)
    (0.0, 1.0)
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Z95 = 1.959964  # two-sided 95% normal quantile
BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0


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


def paired_bootstrap(differences: Sequence[float], *, samples: int = BOOTSTRAP_SAMPLES,
                     seed: int = BOOTSTRAP_SEED) -> tuple[float, float, float]:
    """(mean, low, high): the mean per-problem difference and its 95% percentile interval from
    `samples` resamplings of the problems with replacement (the same problems for both models,
    so the pairing is kept). Deterministic for a given seed; (0, 0, 0) for no problems."""
    values = [float(d) for d in differences]
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = sum(values) / n
    if all(v == values[0] for v in values):  # every resample has the same mean
        return round(mean, 6), round(mean, 6), round(mean, 6)
    import numpy as np

    rng = np.random.default_rng(seed)
    means = np.asarray(values)[rng.integers(0, n, size=(samples, n))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return round(mean, 6), round(float(low), 6), round(float(high), 6)


def covers_zero(low: float, high: float) -> bool:
    """True when a difference's interval includes 0: no detectable difference."""
    return low <= 0 <= high


Z80 = 0.841621  # one-sided normal quantile of 80% power


def mcnemar_exact(first: Sequence[bool], second: Sequence[bool]) -> dict:
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


def minimum_detectable_effect(low: float, high: float, z: float = Z95, power_z: float = Z80) -> float:
    """The smallest true difference a measurement with this 95% interval finds with 80% power at the
    5% level: (z_0.975 + z_0.8) x its standard error, the error read off the interval's half-width
    (2.8 / 1.96 = 1.43 half-widths). Beside a "no detectable difference" it says how large a
    difference could still hide.

    >>> minimum_detectable_effect(-0.02, 0.02)
    0.028588
    """
    return round((z + power_z) * (high - low) / (2 * z), 6)
