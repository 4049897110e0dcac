"""Rewards for the two roles (pure functions, no I/O).

Student (solver): AZR format shaping, so that a signal exists even while nothing is solved:
``1.0`` correct, ``-0.5`` well formed but wrong, ``-1.0`` malformed (no parseable answer).

Teacher (proposer): scored by its matched students' solve rate ``p = n_correct / n_attempts``
on one valid task.

* ``mode="learnability"`` (AZR, the default): ``1 - p`` if ``0 < p < 1`` else ``0``. Trivial tasks
  (everyone solves) and impossible ones (nobody solves) earn nothing.
* ``mode="zero_sum"``: ``1 - p`` for every ``p``, so a task nobody solves earns ``1.0``. This is the
  literal zero-sum reading of the paper; it also rewards junk that is merely unsolvable.

A malformed or invalid proposal earns ``-1.0`` in both modes. A valid task that no student
attempted (``n_attempts == 0``) has no defined solve rate: its reward is ``None``, meaning
"exclude this rollout from the policy-gradient batch" (it is neither good nor bad, and a
made-up number would bias the group baseline).
"""

from __future__ import annotations

REWARD_CORRECT = 1.0
REWARD_WRONG = -0.5
REWARD_MALFORMED = -1.0
REWARD_INVALID_PROPOSAL = -1.0

TEACHER_MODES = ("learnability", "zero_sum")


def student_reward(correct: bool, well_formed: bool = True) -> float:
    """AZR-shaped solver reward.

    A malformed answer scores -1 whatever ``correct`` says (an answer that could not be
    parsed cannot have been graded correct).

    >>> student_reward(True), student_reward(False), student_reward(False, well_formed=False)
    (1.0, -0.5, -1.0)
    """
    if not well_formed:
        return REWARD_MALFORMED
    return REWARD_CORRECT if correct else REWARD_WRONG


def solve_rate(n_correct: int, n_attempts: int) -> float | None:
    """Fraction of attempts that were correct; ``None`` when there were no attempts.

    >>> solve_rate(3, 4), solve_rate(0, 0)
    (0.75, None)
    """
    if n_attempts < 0 or n_correct < 0 or n_correct > n_attempts:
        raise ValueError(f"need 0 <= n_correct <= n_attempts, got {n_correct}/{n_attempts}")
    if n_attempts == 0:
        return None
    return n_correct / n_attempts


def teacher_reward_from_rate(valid: bool, p: float | None, mode: str = "learnability") -> float | None:
    """Proposer reward from a solve rate ``p`` in [0, 1] (``None`` = nobody attempted).

    >>> teacher_reward_from_rate(True, 0.25), teacher_reward_from_rate(True, 0.0)
    (0.75, 0.0)
    >>> teacher_reward_from_rate(True, 0.0, mode="zero_sum"), teacher_reward_from_rate(False, None)
    (1.0, -1.0)
    """
    if mode not in TEACHER_MODES:
        raise ValueError(f"unknown teacher reward mode {mode!r}; use one of {TEACHER_MODES}")
    if not valid:
        return REWARD_INVALID_PROPOSAL
    if p is None:
        return None
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"solve rate must be in [0, 1], got {p}")
    if mode == "zero_sum":
        return 1.0 - p
    return 1.0 - p if 0.0 < p < 1.0 else 0.0


def teacher_reward(valid: bool, n_correct: int = 0, n_attempts: int = 0, mode: str = "learnability") -> float | None:
    """Proposer reward from counts of its matched students' attempts on one task.

    Returns ``None`` for a valid task with no attempts (exclude it from training).

    >>> teacher_reward(True, 2, 8), teacher_reward(True, 8, 8), teacher_reward(True, 0, 0)
    (0.75, 0.0, None)
    """
    if not valid:
        # An invalid proposal has no meaningful attempts; do not validate counts for it.
        return teacher_reward_from_rate(False, None, mode)
    return teacher_reward_from_rate(True, solve_rate(n_correct, n_attempts), mode)
