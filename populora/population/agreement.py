"""How alike the members of a sub-population answer: verdict agreement on the held-out pool (no torch).

* **Verdict agreement** of two members: the share of the pool's tasks both got right or both got wrong
  (a missing verdict counts wrong). A pair that agrees on every task is a **clone** pair: on the ruler
  the study uses, the two are one model (the second study's students were, after 16 of 18 evolution steps).

The weight-space counterpart, which needs the adapters' tensors, is populora/population/diversity.py. The
held-out stage (stages/heldout.py) reports these for each role, beside the members' accuracies.

    >>> verdict_diversity("students", {"s0": {"a": 1}, "s1": {"a": 1, "b": 0}}, ["s0", "s1"], ["a", "b"])
    {'diversity.students.verdict_agreement': 1.0, 'diversity.students.clone_pairs': 1}
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from statistics import mean


def pairwise(names: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of `names`, in sorted order."""
    return list(itertools.combinations(sorted(names), 2))


def verdict_agreement(first: Mapping[str, int], second: Mapping[str, int], task_ids: Sequence[str]) -> float | None:
    """Share of `task_ids` on which both verdicts are equal (a missing verdict counts wrong)."""
    if not task_ids:
        return None
    return sum(int(first.get(t, 0)) == int(second.get(t, 0)) for t in task_ids) / len(task_ids)


def verdict_diversity(
    role: str, table: Mapping[str, Mapping[str, int]], members: Sequence[str], task_ids: Sequence[str]
) -> dict[str, float | int | None]:
    """Flat metrics of one sub-population's held-out verdicts: mean pairwise agreement and clone pairs."""
    pairs = [verdict_agreement(table.get(a, {}), table.get(b, {}), task_ids) for a, b in pairwise(members)]
    agreements = [a for a in pairs if a is not None]
    return {
        f"diversity.{role}.verdict_agreement": round(mean(agreements), 6) if agreements else None,
        f"diversity.{role}.clone_pairs": sum(a == 1.0 for a in agreements) if agreements else None,
    }
