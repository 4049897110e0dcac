"""Which rollouts each optimizer step of an adapter's update goes over (`populora.rl.update`): the rollouts that
carry a gradient (`with_signal`), by role (`role_parts`, `update.role_steps: per_role`), and per optimizer round
all of them or a share each (`step_schedule`, `update.step_rollouts`; `step_shares` deals them out by task).
Pure functions of the rollouts and the update's params, tested in tests/test_update_split.py (doctests too)."""

from __future__ import annotations


def with_signal(rollouts: list[dict]) -> list[dict]:
    """The rollouts that carry a gradient: a nonzero advantage (None: a proposal no student
    attempted; 0.0: a group with no spread)."""
    return [r for r in rollouts if r.get("advantage")]


def role_parts(rollouts: list[dict]) -> list[list[dict]]:
    """The rollouts split by role (propose first), dropping empty roles."""
    return [part for role in ("propose", "solve") if (part := [r for r in rollouts if r["role"] == role])]


def step_shares(rollouts: list[dict], steps: int) -> list[list[dict]]:
    """`rollouts` dealt out by task into `steps` disjoint shares (`update.step_rollouts: split`), the tasks in the
    order of their first rollout, one to each share in turn: a task's rollouts stay together (its answers share a
    prompt and a baseline). Fewer shares where there are fewer tasks; a rollout without a task is a task alone.

    >>> [[r["task_id"] for r in share] for share in step_shares([{"task_id": t} for t in "aabbcd"], 2)]
    [['a', 'a', 'c'], ['b', 'b', 'd']]
    """
    tasks: dict[object, list[dict]] = {}
    for index, rollout in enumerate(rollouts):
        tasks.setdefault(rollout.get("task_id", ("rollout", index)), []).append(rollout)
    shares: list[list[dict]] = [[] for _ in range(min(steps, len(tasks)))]
    for k, members in enumerate(tasks.values()):
        shares[k % len(shares)].extend(members)
    return shares


def step_schedule(parts: list[list[dict]], config) -> tuple[list[tuple[list[dict], int]], list[list[int]]]:
    """The adapter's losses and, per optimizer round, which of them it steps on: `parts` are its rollouts (one
    part, or one per role under `role_steps: per_role`); a loss is (its rollouts with signal, the rollouts its mean
    counts under `update.normalize: batch`). `step_rollouts: all`: one loss per part, every round over each
    (`steps` epochs); `split`: one per share of each part (`step_shares`), round k over the k-th shares, so every
    rollout is in one loss.

    >>> from types import SimpleNamespace as config
    >>> rows = [{"task_id": t, "advantage": 1.0} for t in "abc"]
    >>> step_schedule([rows], config(step_rollouts="all", steps=2))[1]
    [[0], [0]]
    >>> losses, rounds = step_schedule([rows], config(step_rollouts="split", steps=2))
    >>> rounds, [[r["task_id"] for r in loss] for loss, counted in losses]
    ([[0], [1]], [['a', 'c'], ['b']])
    """
    if config.step_rollouts == "all":
        return [(with_signal(part), len(part)) for part in parts], [list(range(len(parts)))] * config.steps
    losses: list[tuple[list[dict], int]] = []
    rounds: list[list[int]] = [[] for _ in range(config.steps)]
    for part in parts:
        for k, share in enumerate(step_shares(part, config.steps)):
            rounds[k].append(len(losses))
            losses.append((with_signal(share), len(share)))
    return losses, rounds
