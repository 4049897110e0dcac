"""The replacement step of population-based training, as pure functions, plus lineage records.

Within one sub-population (teachers or students, never mixed):

1. rank members by their ``fitness`` when given (see :func:`fitness_of`: what the member's own
   reward pays for), else by conservative TrueSkill ``mu - 3 sigma``; ties by conservative
   TrueSkill, then by id;
2. the ``replace_k`` lowest are replaced; at least one member must survive (a sub-population of
   one is never replaced: :func:`replacements`);
3. parents come from the *parent pool*: the strongest ``parent_pool`` survivors
   (default ``min(survivors, max(2, ceil(n / 2)))``), drawn uniformly without replacement;
4. each child's operator is drawn from ``operator_mix`` (weights need not sum to 1). A
   crossover needs two distinct parents; when the pool has only one member it falls back to
   a mutation from the mix (renormalised), or ``fallback_mutation`` if the mix has none;
5. the child inherits the mean mu *and the mean sigma* of its parents. A reset sigma (TrueSkill's
   initial 8.3) would make ``mu - 3 sigma`` of every newborn far below its parents', so the child
   would be the next victim whatever it does; with the parents' uncertainty it competes on equal
   terms, and its own games then move its rating (``initial_sigma=`` restores the reset).

Parents of a crossover are listed strongest first, and ``fitness`` holds their ranking values,
so ``make_child(parents, op, seed, fitness=...)`` knows the fitter one.
Everything is derived from ``(seed, generation)``: the same inputs give the same plan.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from populora.population.operators import CROSSOVERS, MUTATIONS
from populora.population.ratings import conservative

FITNESS_MODES = ("auto", "trueskill", "reward")


def fitness_of(member: Mapping[str, Any], k_sigma: float = 3.0) -> float:
    """The value a member is ranked by: ``fitness`` when present and not None, else conservative TrueSkill."""
    value = member.get("fitness")
    return conservative(member, k_sigma) if value is None else float(value)


def rank_members(members: Sequence[Mapping[str, Any]], k_sigma: float = 3.0) -> list[Mapping[str, Any]]:
    """Members sorted strongest first by :func:`fitness_of` (ties: conservative TrueSkill, then id)."""
    return sorted(members, key=lambda m: (-fitness_of(m, k_sigma), -conservative(m, k_sigma), str(m["id"])))


def uses_reward_fitness(role: str, teacher_mode: str, mode: str = "auto") -> bool:
    """Whether a sub-population is ranked by mean reward (True) or by conservative TrueSkill.

    ``auto``: teachers by their mean reward under the learnability reward, because a TrueSkill win
    of a teacher is an *unsolved* attempt (malformed answers included), which learnability pays 0
    for: ranking teachers by TrueSkill would keep the members the reward discourages. Under the
    zero-sum reward a teacher win is exactly what the reward pays, and students' wins are exactly
    their correct answers, so those rank by TrueSkill (which also weighs the opponent's strength).

    >>> uses_reward_fitness("teachers", "learnability"), uses_reward_fitness("teachers", "zero_sum")
    (True, False)
    >>> uses_reward_fitness("students", "learnability"), uses_reward_fitness("students", "zero_sum", "reward")
    (False, True)
    """
    if mode not in FITNESS_MODES:
        raise ValueError(f"unknown fitness mode {mode!r}; use one of {FITNESS_MODES}")
    if mode != "auto":
        return mode == "reward"
    return role == "teachers" and teacher_mode == "learnability"


def accumulate_rewards(records: Mapping[str, Mapping[str, float]],
                       new: Mapping[str, Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Add one generation's ``{"<slot>/<role>": {"sum", "count"}}`` reward totals to the running ones.

    >>> accumulate_rewards({"t0/propose": {"sum": 1.0, "count": 2}}, {"t0/propose": {"sum": -1.0, "count": 1}})
    {'t0/propose': {'count': 3, 'sum': 0.0}}
    """
    out = {k: dict(v) for k, v in records.items()}
    for key, add in new.items():
        entry = out.setdefault(key, {"sum": 0.0, "count": 0})
        entry["sum"] = float(entry["sum"]) + float(add["sum"])
        entry["count"] = int(entry["count"]) + int(add["count"])
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def mean_reward(records: Mapping[str, Mapping[str, float]], key: str) -> float | None:
    entry = records.get(key)
    return float(entry["sum"]) / entry["count"] if entry and entry["count"] else None


def replacements(pool_size: int, replace: int) -> int:
    """Members to replace in a sub-population: ``replace``, but a sub-population of one is never
    replaced (its only member would have no surviving parent); params validation forbids
    replacing every member of a larger one.

    >>> replacements(1, 1), replacements(4, 1)
    (0, 1)
    """
    return 0 if pool_size <= 1 else min(replace, pool_size - 1)


def _validate(members, replace_k, operator_mix, fallback_mutation) -> None:
    ids = [m["id"] for m in members]
    if len(set(ids)) != len(ids):
        raise ValueError(f"duplicate member ids: {ids}")
    if not 0 <= replace_k < len(members):
        raise ValueError(f"replace_k must be in [0, {len(members) - 1}] for {len(members)} members "
                         f"(at least one must survive to be a parent), got {replace_k}")
    known = set(MUTATIONS) | set(CROSSOVERS)
    unknown = set(operator_mix) - known
    if unknown:
        raise ValueError(f"unknown operators {sorted(unknown)} in operator mix; known: {sorted(known)}")
    if any(w < 0 for w in operator_mix.values()) or sum(operator_mix.values()) <= 0:
        raise ValueError(f"operator mix weights must be >= 0 with a positive sum, got {dict(operator_mix)}")
    if fallback_mutation not in MUTATIONS:
        raise ValueError(f"fallback_mutation must be a mutation, got {fallback_mutation!r}")


def _draw(rng: np.random.Generator, mix: Mapping[str, float]) -> str:
    names = sorted(n for n, w in mix.items() if w > 0)  # sorted: independent of dict order
    weights = np.array([mix[n] for n in names], dtype=float)
    return names[int(rng.choice(len(names), p=weights / weights.sum()))]


def plan_replacement(
    members: Sequence[Mapping[str, Any]],
    *,
    replace_k: int,
    operator_mix: Mapping[str, float],
    seed: int,
    generation: int,
    initial_sigma: float | None = None,
    parent_pool: int | None = None,
    id_prefix: str = "child",
    fallback_mutation: str = "gaussian_all",
    k_sigma: float = 3.0,
) -> list[dict[str, Any]]:
    """Plan which members to replace and how to make their children (see module docstring).

    Returns one dict per child: ``child_id`` (``f"{id_prefix}-g{generation:04d}-{i}"``),
    ``replaces``, ``parents`` (ids, strongest first), ``fitness`` (their conservative
    ratings), ``operator``, ``seed`` (for ``make_child``), ``generation``, ``inherited_mu``,
    ``sigma``.
    """
    _validate(members, replace_k, operator_mix, fallback_mutation)
    if replace_k == 0:
        return []
    ranked = rank_members(members, k_sigma)
    n = len(ranked)
    survivors, victims = ranked[: n - replace_k], ranked[n - replace_k:][::-1]  # weakest first
    pool_size = parent_pool if parent_pool is not None else max(2, math.ceil(n / 2))
    pool = survivors[: max(1, min(pool_size, len(survivors)))]
    mutation_mix = {op: w for op, w in operator_mix.items() if op in MUTATIONS and w > 0}
    rng = np.random.default_rng([int(seed), int(generation)])
    plan = []
    for i, victim in enumerate(victims):
        operator = _draw(rng, operator_mix)
        if operator in CROSSOVERS and len(pool) < 2:
            operator = _draw(rng, mutation_mix) if mutation_mix else fallback_mutation
        n_parents = 2 if operator in CROSSOVERS else 1
        picks = sorted(int(j) for j in rng.choice(len(pool), size=n_parents, replace=False))
        parents = [pool[j] for j in picks]  # pool is ranked, so sorted picks = strongest first
        plan.append({
            "child_id": f"{id_prefix}-g{int(generation):04d}-{i}",
            "replaces": victim["id"],
            "parents": [p["id"] for p in parents],
            "fitness": [fitness_of(p, k_sigma) for p in parents],
            "operator": operator,
            "seed": int(rng.integers(0, 2**31 - 1)),
            "generation": int(generation),
            "inherited_mu": float(np.mean([float(p["mu"]) for p in parents])),
            "sigma": float(np.mean([float(p["sigma"]) for p in parents]) if initial_sigma is None else initial_sigma),
        })
    return plan


# ---------------------------------------------------------------- lineage


LINEAGE_KEYS = ("child_id", "parents", "operator", "seed", "generation", "replaces")
LINEAGE_EXTRAS = ("slot", "role", "inherited_mu", "sigma", "fitness")  # recorded when present


def founder_events(member_ids: Sequence[str], generation: int = 0, *, seeds: Sequence[int] | None = None,
                   slots: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Lineage events for the initial members (no parents, operator ``"init"``)."""
    events = []
    for i, m in enumerate(member_ids):
        event = {"child_id": m, "parents": [], "operator": "init", "seed": None if seeds is None else int(seeds[i]),
                 "generation": int(generation), "replaces": None}
        if slots is not None:
            event["slot"] = slots[i]
        events.append(event)
    return events


def append_lineage(lineage: Sequence[Mapping[str, Any]], plan: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Return ``lineage`` plus one event per planned child; parents must already be recorded."""
    known = {e["child_id"] for e in lineage}
    out = [dict(e) for e in lineage]
    for entry in plan:
        missing = [p for p in entry["parents"] if p not in known]
        if missing:
            raise ValueError(f"{entry['child_id']}: parents {missing} are not in the lineage")
        if entry["child_id"] in known:
            raise ValueError(f"{entry['child_id']} is already in the lineage")
        out.append({k: entry[k] for k in LINEAGE_KEYS} | {k: entry[k] for k in LINEAGE_EXTRAS if k in entry})
        known.add(entry["child_id"])
    return out


def member_id(arm: str, slot: str, born: int) -> str:
    """Stable id of the member born into `slot` at generation `born` (``population/teacher0@g000``)."""
    return f"{arm}/{slot}@g{born:03d}"


def plan_generation_replacement(
    state, ratings: Mapping[str, Mapping[str, float]], reward_records: Mapping[str, Mapping[str, float]], *,
    generation: int, replace: int, operator_mix: Mapping[str, float], teacher_mode: str, fitness_mode: str,
    seed_of: Any,
) -> dict[str, Any]:
    """One arm's replacement step after `generation`, as data (no tensors).

    `state` is the generation's starting `State`, `ratings` the ratings after its games,
    `reward_records` the running reward totals *including* this generation (`accumulate_rewards`),
    `seed_of(role)` the seed for each sub-population. Returns:

    * ``rankings``: per role, every member's fitness (the value it was ranked by), its
      conservative rating and rank, strongest first: recorded at every replacement;
    * ``events``: lineage events of the children (member ids), with ``slot``, ``role``,
      ``parent_slots`` and ``make_child`` arguments (``operator``, ``seed``, ``fitness``);
    * ``members``, ``ratings``, ``reward_records``: the arm after replacement (a child's rating is
      its parents' mean mu and sigma, its reward record starts at the parents' mean fitness).
    """
    members, new_ratings, records = dict(state.members), {k: dict(v) for k, v in ratings.items()}, dict(reward_records)
    rankings: dict[str, list[dict]] = {}
    events: list[dict] = []
    for role, reward_role in (("teachers", "propose"), ("students", "solve")):
        by_reward = uses_reward_fitness(role, teacher_mode, fitness_mode)
        pool = [{"id": slot, **ratings[slot],
                 "fitness": mean_reward(reward_records, f"{slot}/{reward_role}") if by_reward else None}
                for slot in getattr(state, role)]
        ranked = rank_members(pool)
        rankings[role] = [{"slot": m["id"], "member": members[m["id"]], "rank": i, "fitness": fitness_of(m),
                           "conservative": conservative(m), "by": "reward" if by_reward else "trueskill"}
                          for i, m in enumerate(ranked)]
        plan = plan_replacement(pool, replace_k=replacements(len(pool), replace), operator_mix=operator_mix,
                                seed=seed_of(role), generation=generation)
        for entry in plan:
            slot = entry["replaces"]
            child = member_id(state.arm, slot, generation + 1)
            events.append({"child_id": child, "slot": slot, "role": role, "replaces": members[slot],
                           "parents": [members[p] for p in entry["parents"]], "parent_slots": entry["parents"],
                           "operator": entry["operator"], "seed": entry["seed"], "fitness": entry["fitness"],
                           "generation": generation + 1, "inherited_mu": entry["inherited_mu"], "sigma": entry["sigma"]})
            new_ratings[slot] = {"mu": entry["inherited_mu"], "sigma": entry["sigma"]}
            prior = float(np.mean(entry["fitness"]))
            key = f"{slot}/{reward_role}"
            records[key] = {"count": 1, "sum": prior} if by_reward else {"count": 0, "sum": 0.0}
    for event in events:
        members[event["slot"]] = event["child_id"]
    return {"rankings": rankings, "events": events, "members": members, "ratings": new_ratings,
            "reward_records": records}
