"""TRR++ advantages (AZR's Task-Relative REINFORCE++), a per-task (leave-one-out) baseline, the
answers' advantage scaling (`reward.scale_rewards`, TRL's `scale_rewards`), and a per-sequence
REINFORCE loss.

Each rollout belongs to a group, normally ``(role, task_type)``: six groups,
propose/solve x code_o/code_i/code_f. Within a group the advantage is the whitened reward

    A = (r - mean_g) / (std_g + eps)

with per-sequence statistics: each rollout counts once, whatever its length (AZR whitens
over tokens, which weights long responses more; the design asks for per-sequence). ``std_g``
is the population standard deviation (ddof=0), so two rollouts with different rewards get
advantages of about +1 and -1.

A group with a single member, or whose rewards are all equal, carries no learning signal
relative to its own baseline: every member gets advantage ``0.0`` (rather than dividing by
``eps``, which would blow float noise up into huge advantages).

Rewards may be ``None`` (e.g. a teacher task nobody attempted, see ``populora.rl.rewards``):
such rollouts are left out of the statistics and get advantage ``None``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch only where a loss is computed: the reward stage (advantages) never loads it
    import torch

EPS = 1e-6
BASELINES = ("trr++", "per_task")  # reward.advantage_baseline
SCALES = ("group", "batch", "none")  # reward.scale_rewards (TRL's names)
# the scaling each baseline is published with: AZR whitens (TRR++), RLOO does not scale
NATIVE_SCALE = {"trr++": "group", "per_task": "none"}
# Below this std a group is treated as constant: rewards are multiples of 0.125 or 0.5 in
# practice, so any real spread is many orders of magnitude larger.
ZERO_STD = 1e-9


def group_key(role: str, task_type: str) -> str:
    """Canonical TRR++ group name.

    >>> group_key("solve", "code_o")
    'solve/code_o'
    """
    return f"{role}/{task_type}"


def group_stats(rewards: Sequence[float | None], groups: Sequence[Hashable]) -> dict[Hashable, dict[str, float]]:
    """Per-group ``{"n", "mean", "std"}`` over the non-``None`` rewards (std with ddof=0)."""
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group keys")
    members: dict[Hashable, list[float]] = {}
    for reward, key in zip(rewards, groups):
        if reward is None:
            continue
        if not math.isfinite(reward):
            raise ValueError(f"non-finite reward {reward!r} in group {key!r}")
        members.setdefault(key, []).append(float(reward))
    stats = {}
    for key, values in members.items():
        mean = math.fsum(values) / len(values)
        var = math.fsum((v - mean) ** 2 for v in values) / len(values)
        stats[key] = {"n": len(values), "mean": mean, "std": math.sqrt(var)}
    return stats


def whiten_advantages(
    rewards: Sequence[float | None], groups: Sequence[Hashable], eps: float = EPS
) -> list[float | None]:
    """TRR++ advantages: rewards whitened within their group, one entry per rollout.

    >>> adv = whiten_advantages([1.0, -0.5, 0.0, 0.0], ["s/o", "s/o", "p/o", "p/o"])
    >>> [round(a, 4) for a in adv]
    [1.0, -1.0, 0.0, 0.0]
    """
    stats = group_stats(rewards, groups)
    out: list[float | None] = []
    for reward, key in zip(rewards, groups):
        if reward is None:
            out.append(None)
            continue
        s = stats[key]
        if s["n"] < 2 or s["std"] < ZERO_STD:
            out.append(0.0)
        else:
            out.append((float(reward) - s["mean"]) / (s["std"] + eps))
    return out


def leave_one_out_advantages(rewards: Sequence[float | None], groups: Sequence[Hashable]) -> list[float | None]:
    """Per-task baseline (RLOO): each reward minus the mean of the *other* rewards of its group,
    normally (adapter, task): the samples one adapter drew for one prompt. Unlike TRR++'s type-wide
    baseline, a task every sample solves (or fails) gives its samples 0, so the signal is which
    answers beat their siblings, not which tasks are easy. A group of one gets 0; ``None`` stays
    ``None`` and takes no part. No scaling by the std (Dr. GRPO: it up-weights near-uniform groups).

    >>> leave_one_out_advantages([1.0, -0.5, -0.5, 1.0, 1.0], ["t", "t", "t", "u", "u"])
    [1.5, -0.75, -0.75, 0.0, 0.0]
    """
    if len(rewards) != len(groups):
        raise ValueError(f"{len(rewards)} rewards but {len(groups)} group keys")
    sums: dict[Hashable, float] = {}
    counts: dict[Hashable, int] = {}
    for reward, key in zip(rewards, groups):
        if reward is not None:
            if not math.isfinite(reward):
                raise ValueError(f"non-finite reward {reward!r} in group {key!r}")
            sums[key] = sums.get(key, 0.0) + float(reward)
            counts[key] = counts.get(key, 0) + 1
    out: list[float | None] = []
    for reward, key in zip(rewards, groups):
        if reward is None:
            out.append(None)
        elif counts[key] < 2:
            out.append(0.0)
        else:
            out.append(float(reward) - (sums[key] - float(reward)) / (counts[key] - 1))
    return out


def answer_advantages(
    rewards: Sequence[float | None],
    groups: Sequence[Hashable],
    batches: Sequence[Hashable],
    baseline: str,
    scale: str,
    eps: float = EPS,
) -> list[float | None]:
    """Advantages of answers: each reward minus its baseline (`trr++`: the mean of its group, itself
    included; `per_task`: the mean of the *other* rewards of its group, RLOO), then divided by a
    standard deviation (`scale`, TRL's `scale_rewards`): `group`, of the rewards of its group; `batch`,
    of the rewards of its batch (normally all of one adapter's answers, PPO-Lite); `none`, not at all
    (Dr. GRPO: dividing by the std up-weights the groups whose rewards barely differ). A group of
    one, or whose rewards are all equal, gets 0 (so does a batch with no spread under `batch`);
    ``None`` stays ``None`` and takes no part. `trr++` with `group` is `whiten_advantages`, `per_task`
    with `none` is `leave_one_out_advantages`, to the bit.

    >>> answer_advantages([1.0, -0.5, -0.5, 1.0, 1.0], list("tttuu"), "a" * 5, "per_task", "none")
    [1.5, -0.75, -0.75, 0.0, 0.0]
    >>> [round(a, 4) for a in answer_advantages([1.0, -0.5, -0.5, 1.0, 1.0], list("tttuu"), "a" * 5, "trr++", "none")]
    [1.0, -0.5, -0.5, 0.0, 0.0]
    """
    if baseline not in BASELINES or scale not in SCALES:
        raise ValueError(
            f"advantage baseline must be one of {BASELINES} and scale one of {SCALES}, got {baseline!r}, {scale!r}"
        )
    if len(batches) != len(rewards):
        raise ValueError(f"{len(rewards)} rewards but {len(batches)} batch keys")
    stats = group_stats(rewards, groups)
    if baseline == "per_task":
        centred = leave_one_out_advantages(rewards, groups)
    else:
        centred = [
            None
            if r is None
            else 0.0
            if stats[g]["n"] < 2 or stats[g]["std"] < ZERO_STD
            else float(r) - stats[g]["mean"]
            for r, g in zip(rewards, groups)
        ]
    if scale == "none":
        return centred
    spread = stats if scale == "group" else group_stats(rewards, batches)
    keys = groups if scale == "group" else batches
    return [
        a if a is None or a == 0.0 else 0.0 if spread[k]["std"] < ZERO_STD else a / (spread[k]["std"] + eps)
        for a, k in zip(centred, keys)
    ]


def sequence_logprobs(token_logprobs: torch.Tensor, mask: torch.Tensor, token_reduction: str = "mean") -> torch.Tensor:
    """Reduce ``[batch, time]`` token log-probs over the response mask to one value per sequence.

    ``"mean"`` divides by the sequence's own response length (empty sequences give 0), so every
    sequence has the same weight in the loss; ``"sum"`` is the plain sequence log-likelihood.
    """
    if token_logprobs.shape != mask.shape or token_logprobs.dim() != 2:
        raise ValueError(
            f"need matching [batch, time] tensors, got {tuple(token_logprobs.shape)} and {tuple(mask.shape)}"
        )
    mask = mask.to(token_logprobs.dtype)
    total = (token_logprobs * mask).sum(dim=1)
    if token_reduction == "sum":
        return total
    if token_reduction == "mean":
        return total / mask.sum(dim=1).clamp(min=1.0)
    raise ValueError(f"token_reduction must be 'mean' or 'sum', got {token_reduction!r}")


def reinforce_loss(
    logprobs: torch.Tensor,
    advantages: Sequence[float] | torch.Tensor,
    mask: torch.Tensor | None = None,
    token_reduction: str = "mean",
) -> torch.Tensor:
    """REINFORCE loss ``mean_i(-A_i * logp_i)`` over sequences (one term per sequence).

    ``logprobs`` is either ``[batch]`` per-sequence values (``mask`` must be ``None``) or
    ``[batch, time]`` token log-probs with a response ``mask``, reduced by
    :func:`sequence_logprobs` (default: mean over the sequence's tokens, so the gradient
    does not grow with response length). Advantages are constants (no gradient).

    >>> import torch
    >>> reinforce_loss(torch.tensor([-1.0, -3.0]), [1.0, -1.0])
    tensor(-1.)
    """
    import torch

    if mask is None:
        if logprobs.dim() != 1:
            raise ValueError("token-level logprobs need a mask; per-sequence logprobs are 1-D")
        seq = logprobs
    else:
        seq = sequence_logprobs(logprobs, mask, token_reduction)
    adv = torch.as_tensor(advantages, dtype=seq.dtype, device=seq.device).detach()
    if adv.shape != seq.shape:
        raise ValueError(f"{adv.numel()} advantages for {seq.numel()} sequences")
    if seq.numel() == 0:
        return seq.sum()  # zero loss that still participates in autograd
    return -(adv * seq).mean()


def shuffle_within_groups(rollouts: Sequence[dict], seed: int) -> list[dict]:
    """The null control: each rollout's ``advantage`` swapped for another's of the same TRR++ group
    (adapter, role, task type), seeded. The data, the rewards and each group's set of advantages
    are unchanged; only which sample gets which advantage is random, so the update keeps its size
    and direction statistics but loses its learning signal. Rollouts without an advantage (None)
    keep theirs and take no part; every other field is copied untouched.

    >>> rows = [{"adapter": "a", "role": "solve", "type": "code_o", "advantage": x} for x in (1.0, -1.0)]
    >>> sorted(r["advantage"] for r in shuffle_within_groups(rows, seed=0))
    [-1.0, 1.0]
    """
    import random

    rng = random.Random(seed)
    members: dict[tuple, list[int]] = {}
    for index, rollout in enumerate(rollouts):
        if rollout.get("advantage") is not None:
            key = (rollout["adapter"], group_key(rollout["role"], rollout["type"]))
            members.setdefault(key, []).append(index)
    out = [dict(r) for r in rollouts]
    for key in sorted(members):
        indices = members[key]
        values = [rollouts[i]["advantage"] for i in indices]
        rng.shuffle(values)
        for index, value in zip(indices, values):
            out[index]["advantage"] = value
    return out
