"""How different the members of a sub-population are in weight space (torch: the adapters' tensors).

* **Weight distance** of two adapters: ``||dW_1 - dW_2|| / mean(||dW_1||, ||dW_2||)`` with ``dW`` every
  module's ``B @ A`` stacked into one vector (Frobenius norms summed in squares over modules). 0: the
  same function; about 1.41 for two updates of equal size in unrelated directions; 2: opposite. Two
  members still at ``B = 0`` (the base model) are at distance 0. Computed from r x r products only
  (``||B A||^2 = tr(B^T B A A^T)``), never forming ``dW``.

How alike their answers are (verdict agreement on the held-out pool, clone pairs) is
populora/population/agreement.py, which needs no torch.

    >>> import torch
    >>> a = {"m.lora_A.weight": torch.eye(2), "m.lora_B.weight": torch.eye(2)}
    >>> b = {"m.lora_A.weight": torch.eye(2), "m.lora_B.weight": -torch.eye(2)}
    >>> weight_distance(a, a), weight_distance(a, b)
    (0.0, 2.0)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from statistics import mean

import torch

from populora.population.agreement import pairwise
from populora.population.operators import lora_modules

StateDict = Mapping[str, torch.Tensor]


def _inner(first: StateDict, second: StateDict) -> float:
    """``<dW_1, dW_2>`` summed over modules: ``tr((B_1^T B_2)(A_2 A_1^T))`` per module, float64."""
    total = 0.0
    for module in lora_modules(dict(first)):
        a1, b1 = first[module.a_key].double(), first[module.b_key].double()
        a2, b2 = second[module.a_key].double(), second[module.b_key].double()
        total += float(torch.trace((b1.T @ b2) @ (a2 @ a1.T)))
    return total


def delta_norm(sd: StateDict) -> float:
    """``||dW||`` over every module (square root of the summed squared Frobenius norms)."""
    return math.sqrt(max(0.0, _inner(sd, sd)))


def weight_distance(first: StateDict, second: StateDict) -> float:
    """``||dW_1 - dW_2|| / mean(||dW_1||, ||dW_2||)``; 0 when both are 0 (two copies of the base)."""
    n1, n2 = _inner(first, first), _inner(second, second)
    scale = 0.5 * (math.sqrt(max(n1, 0.0)) + math.sqrt(max(n2, 0.0)))
    if scale == 0:
        return 0.0
    return math.sqrt(max(0.0, n1 + n2 - 2 * _inner(first, second))) / scale


def weight_diversity(role: str, adapters: Mapping[str, StateDict]) -> dict[str, float | int | None]:
    """Flat metrics of one sub-population's weights: mean and smallest pairwise distance, pairs."""
    distances = [weight_distance(adapters[a], adapters[b]) for a, b in pairwise(list(adapters))]
    return {
        f"diversity.{role}.pairs": len(distances),
        f"diversity.{role}.weight_distance": round(mean(distances), 6) if distances else None,
        f"diversity.{role}.weight_distance_min": round(min(distances), 6) if distances else None,
    }
