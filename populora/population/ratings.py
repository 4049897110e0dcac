"""TrueSkill ratings and PFSP teacher-student pairing.

Ratings are stored as plain dicts ``{"mu": float, "sigma": float}`` keyed by member id, so
they can live in JSON artifacts. The ``trueskill`` package does the Bayesian updates.

Games. Every graded student attempt on a teacher's task is one 1v1 game: the student wins
when its answer is correct, the teacher wins otherwise. There are no draws, so the
environment uses ``draw_probability=0``. Games are applied one by one in the order given,
which makes the result deterministic for a given game list. A game of a member against
itself (the single-agent baseline, whose one adapter is both teacher and student) carries
no information about relative skill and is skipped: the baseline's rating stays put.

Pairing. Prioritised fictitious self-play (PFSP) on the TrueSkill win probability
``p = Phi((mu_s - mu_t) / sqrt(2 beta^2 + sigma_s^2 + sigma_t^2))`` of student s against
teacher t. The concrete scheme (:func:`pfsp_pairing`):

1. weights ``w(t | s) = f(p_ts) ** (1 / temperature)``, normalised over teachers for each
   student; ``f`` is ``p (1 - p)`` for ``"variance"`` (peaks at 0.5, AlphaStar),
   ``(1 - p) ** 2`` for ``"hard"`` (favours teachers that beat the student) or ``1`` for
   ``"uniform"``; all-zero weights fall back to uniform;
2. each student draws ``slots_per_student`` teachers i.i.d. from ``w(. | s)``, so every
   student is served every generation;
3. repair: each teacher left without a student takes over one slot from a teacher holding
   two or more, choosing the move that loses the least weight ``w(t_new|s) - w(t_old|s)``.
   Only if there are fewer student slots than teachers does a teacher get an extra slot
   (with the student it suits best), so then some students get more than
   ``slots_per_student`` slots.

A slot is a unit of work the pipeline maps to tasks (e.g. a slot = one batch of the
teacher's tasks solved by that student).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any

import numpy as np
import trueskill

MU0 = 25.0
SIGMA0 = MU0 / 3
WEIGHTINGS = ("variance", "hard", "uniform")


@dataclass(frozen=True)
class RatingEnv:
    """TrueSkill settings (the library defaults, with no draws)."""

    mu: float = MU0
    sigma: float = SIGMA0
    beta: float = SIGMA0 / 2
    tau: float = SIGMA0 / 100
    draw_probability: float = 0.0

    def make(self) -> trueskill.TrueSkill:
        return trueskill.TrueSkill(
            mu=self.mu,
            sigma=self.sigma,
            beta=self.beta,
            tau=self.tau,
            draw_probability=self.draw_probability,
        )


def as_env(env: RatingEnv | Mapping[str, float] | None) -> RatingEnv:
    """Accept a ``RatingEnv``, a params dict with any of its fields, or ``None`` (defaults)."""
    if env is None:
        return RatingEnv()
    if isinstance(env, RatingEnv):
        return env
    unknown = set(env) - set(asdict(RatingEnv()))
    if unknown:
        raise ValueError(f"unknown TrueSkill settings {sorted(unknown)}")
    return RatingEnv(**{k: float(v) for k, v in env.items()})


def new_rating(env: RatingEnv | Mapping[str, float] | None = None) -> dict[str, float]:
    """A fresh rating as a plain dict.

    >>> new_rating()
    {'mu': 25.0, 'sigma': 8.333333333333334}
    """
    e = as_env(env)
    return {"mu": e.mu, "sigma": e.sigma}


def to_dict(rating: trueskill.Rating) -> dict[str, float]:
    return {"mu": float(rating.mu), "sigma": float(rating.sigma)}


def _mu_sigma(r: Mapping[str, float] | trueskill.Rating) -> tuple[float, float]:
    if isinstance(r, trueskill.Rating):
        return float(r.mu), float(r.sigma)
    return float(r["mu"]), float(r["sigma"])


def conservative(r: Mapping[str, float] | trueskill.Rating, k: float = 3.0) -> float:
    """Conservative skill ``mu - k sigma``.

    >>> conservative({"mu": 25.0, "sigma": 2.0})
    19.0
    """
    mu, sigma = _mu_sigma(r)
    return mu - k * sigma


def win_probability(student, teacher, beta: float = SIGMA0 / 2) -> float:
    """P(student solves) = Phi((mu_s - mu_t) / sqrt(2 beta^2 + sigma_s^2 + sigma_t^2)).

    >>> win_probability({"mu": 25, "sigma": 1}, {"mu": 25, "sigma": 3})
    0.5
    """
    mu_s, sigma_s = _mu_sigma(student)
    mu_t, sigma_t = _mu_sigma(teacher)
    denom = math.sqrt(2 * beta**2 + sigma_s**2 + sigma_t**2)
    return NormalDist().cdf((mu_s - mu_t) / denom)


def update_from_games(
    ratings: Mapping[str, Mapping[str, float]],
    games: Sequence[tuple[str, str, bool]],
    env: RatingEnv | Mapping[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """Apply 1v1 games ``(student_id, teacher_id, student_won)`` in order; return new ratings.

    The input is not modified; every member of ``ratings`` is in the output. Self-games
    (student id == teacher id) are skipped. Unknown ids raise ``KeyError``.
    """
    ts = as_env(env).make()
    current = {m: ts.create_rating(float(r["mu"]), float(r["sigma"])) for m, r in ratings.items()}
    for student, teacher, student_won in games:
        for member in (student, teacher):
            if member not in current:
                raise KeyError(f"game involves {member!r}, which has no rating")
        if student == teacher:
            continue
        if student_won:
            current[student], current[teacher] = trueskill.rate_1vs1(current[student], current[teacher], env=ts)
        else:
            current[teacher], current[student] = trueskill.rate_1vs1(current[teacher], current[student], env=ts)
    return {m: to_dict(r) for m, r in current.items()}


def pfsp_weight(p: float, weighting: str = "variance", temperature: float = 1.0) -> float:
    """Unnormalised PFSP priority of a match whose student win probability is ``p``.

    >>> pfsp_weight(0.5), pfsp_weight(0.1) < pfsp_weight(0.5), pfsp_weight(0.2, "uniform")
    (0.25, True, 1.0)
    """
    if weighting == "variance":
        f = p * (1.0 - p)
    elif weighting == "hard":
        f = (1.0 - p) ** 2
    elif weighting == "uniform":
        f = 1.0
    else:
        raise ValueError(f"unknown PFSP weighting {weighting!r}; use one of {WEIGHTINGS}")
    if temperature <= 0:
        raise ValueError(f"PFSP temperature must be > 0, got {temperature}")
    return max(f, 0.0) ** (1.0 / temperature)


def _check_ids(kind: str, ids: Sequence[str]) -> None:
    if not ids:
        raise ValueError(f"need at least one {kind}")
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate {kind} ids in {list(ids)}")


def pfsp_pairing(
    teachers: Sequence[str],
    students: Sequence[str],
    ratings: Mapping[str, Mapping[str, float]],
    *,
    slots_per_student: int = 1,
    weighting: str = "variance",
    temperature: float = 1.0,
    seed: int = 0,
    beta: float = SIGMA0 / 2,
) -> dict[str, Any]:
    """Sample a teacher-student pairing (see the module docstring for the scheme).

    Returns a JSON-able dict: ``counts[t][s]`` (slots, ints, full matrix),
    ``win_probability[t][s]``, ``weights[t][s]`` (per-student sampling probabilities before
    repair), ``repairs`` (slot moves made to cover every teacher) and the settings used.
    """
    _check_pairing_inputs(teachers, students, ratings, slots_per_student)
    prob = np.array([[win_probability(ratings[s], ratings[t], beta) for s in students] for t in teachers])
    weights = _pfsp_weights(prob, weighting, temperature)
    counts = _draw_slots(weights, slots_per_student, seed)
    repairs = _cover_every_teacher(counts, weights, teachers, students)

    def matrix(values, cast):
        return {t: {s: cast(values[i, j]) for j, s in enumerate(students)} for i, t in enumerate(teachers)}

    return {
        "scheme": "pfsp",
        "weighting": weighting,
        "temperature": float(temperature),
        "seed": int(seed),
        "slots_per_student": int(slots_per_student),
        "beta": float(beta),
        "teachers": list(teachers),
        "students": list(students),
        "counts": matrix(counts, int),
        "win_probability": matrix(prob, float),
        "weights": matrix(weights, float),
        "repairs": repairs,
    }


def _check_pairing_inputs(
    teachers: Sequence[str],
    students: Sequence[str],
    ratings: Mapping[str, Mapping[str, float]],
    slots_per_student: int,
) -> None:
    _check_ids("teacher", teachers)
    _check_ids("student", students)
    if slots_per_student < 1:
        raise ValueError(f"slots_per_student must be >= 1, got {slots_per_student}")
    missing = [m for m in (*teachers, *students) if m not in ratings]
    if missing:
        raise KeyError(f"no rating for {sorted(set(missing))}")


def _pfsp_weights(prob: np.ndarray, weighting: str, temperature: float) -> np.ndarray:
    """Step 1: each student's sampling probabilities over teachers (a column of ``prob[t, s]``
    normalised), uniform for a student whose weights are all zero.

    >>> _pfsp_weights(np.array([[0.5, 1.0], [0.9, 1.0]]), "variance", 1.0).round(3).tolist()
    [[0.735, 0.5], [0.265, 0.5]]
    """
    raw = np.array([[pfsp_weight(p, weighting, temperature) for p in row] for row in prob])
    col_sums = raw.sum(axis=0)
    return np.where(col_sums > 0, raw / np.where(col_sums > 0, col_sums, 1.0), 1.0 / len(prob))


def _draw_slots(weights: np.ndarray, slots_per_student: int, seed: int) -> np.ndarray:
    """Step 2: ``counts[t, s]``, each student's ``slots_per_student`` teachers drawn i.i.d. from its column."""
    n_t, n_s = weights.shape
    rng = np.random.default_rng(seed)
    counts = np.zeros((n_t, n_s), dtype=np.int64)
    for j in range(n_s):
        draws = rng.choice(n_t, size=slots_per_student, p=weights[:, j] / weights[:, j].sum())
        np.add.at(counts[:, j], draws, 1)
    return counts


def _cover_every_teacher(
    counts: np.ndarray, weights: np.ndarray, teachers: Sequence[str], students: Sequence[str]
) -> list[dict[str, str | None]]:
    """Step 3, in place on ``counts``: give every teacher without a slot one, moved from a teacher
    holding two or more where there is one (:func:`_cheapest_move`), else an extra slot with the
    student whose weights favour it most. Returns the moves made, in teacher order."""
    repairs: list[dict[str, str | None]] = []
    for i in range(len(teachers)):
        if counts[i].sum() > 0:
            continue
        move = _cheapest_move(counts, weights, i)
        if move is not None:
            j, d = move
            counts[d, j] -= 1
            counts[i, j] += 1
            repairs.append({"teacher": teachers[i], "student": students[j], "from_teacher": teachers[d]})
        else:  # fewer student slots than teachers: add a slot with the best-suited student
            j = int(np.argmax(weights[i]))
            counts[i, j] += 1
            repairs.append({"teacher": teachers[i], "student": students[j], "from_teacher": None})
    return repairs


def _cheapest_move(counts: np.ndarray, weights: np.ndarray, i: int) -> tuple[int, int] | None:
    """``(student, donor)`` of the slot teacher `i` should take over: from a donor holding two or more
    slots, the one losing the least weight ``w(i|s) - w(donor|s)``; None if no teacher has a spare.

    >>> _cheapest_move(np.array([[0, 0], [2, 1]]), np.array([[0.3, 0.6], [0.7, 0.4]]), 0)
    (1, 1)
    """
    n_t, n_s = counts.shape
    best = None  # (score, student, donor); strict ">" keeps the first in (student, donor) order
    for j in range(n_s):
        for d in range(n_t):
            if d != i and counts[d, j] > 0 and counts[d].sum() >= 2:
                score = weights[i, j] - weights[d, j]
                if best is None or score > best[0]:
                    best = (score, j, d)
    return None if best is None else (best[1], best[2])


def round_robin_pairing(
    teachers: Sequence[str], students: Sequence[str], *, slots_per_student: int = 1
) -> dict[str, Any]:
    """Deterministic alternative to PFSP: slots are dealt to teachers in turn, student by student;
    when teachers outnumber the student slots, the remaining teachers get one extra slot each
    (students in turn), so every teacher gets a student, as with PFSP.

    >>> round_robin_pairing(["t0", "t1", "t2"], ["s0"], slots_per_student=2)["counts"]
    {'t0': {'s0': 1}, 't1': {'s0': 1}, 't2': {'s0': 1}}
    """
    _check_ids("teacher", teachers)
    _check_ids("student", students)
    counts = {t: {s: 0 for s in students} for t in teachers}
    position = 0
    for s in students:
        for _ in range(slots_per_student):
            counts[teachers[position % len(teachers)]][s] += 1
            position += 1
    for extra, t in enumerate(teachers[position:]):
        counts[t][students[extra % len(students)]] += 1
    return {
        "scheme": "round_robin",
        "teachers": list(teachers),
        "students": list(students),
        "counts": counts,
        "slots_per_student": int(slots_per_student),
    }


def pairs_pairing(teachers: Sequence[str], students: Sequence[str], *, slots_per_student: int = 1) -> dict[str, Any]:
    """The ensemble control's pairing: teacher k serves student k only, every slot (as many
    independent 1T-1S pairs as there are students). `pairs` maps each teacher to its student; the
    propose and solve stages read it to keep every pair's buffer its own (`populora.tasks.roles`).

    >>> pairs_pairing(["t0", "t1"], ["s0", "s1"], slots_per_student=2)["counts"]
    {'t0': {'s0': 2, 's1': 0}, 't1': {'s0': 0, 's1': 2}}
    """
    _check_ids("teacher", teachers)
    _check_ids("student", students)
    if len(teachers) != len(students):
        raise ValueError(
            f"pairs need as many teachers as students, got {len(teachers)} teachers and {len(students)} "
            "students (population.teachers must equal population.students)"
        )
    counts = {
        t: {s: int(slots_per_student) if j == k else 0 for j, s in enumerate(students)} for k, t in enumerate(teachers)
    }
    return {
        "scheme": "pairs",
        "teachers": list(teachers),
        "students": list(students),
        "counts": counts,
        "slots_per_student": int(slots_per_student),
        "pairs": dict(zip(teachers, students)),
    }
