"""The replacement step of population-based training, as pure functions, plus lineage records.

Within one sub-population (teachers or students, never mixed):

1. rank members by their ``fitness`` when given (see :func:`fitness_of`: what the member's own
   reward pays for), else by conservative TrueSkill ``mu - 3 sigma``; ties by conservative
   TrueSkill, then by id;
2. the ``replace_k`` lowest are replaced; at least one member must survive (a sub-population of
   one is never replaced: :func:`replacements`);
3. a mutation's parent, and a crossover's first parent, come from the *parent pool*: the strongest
   ``parent_pool`` survivors (default ``min(survivors, max(2, ceil(n / 2)))``), drawn uniformly;
4. a crossover's second parent (``parents="population"``, the default) is drawn uniformly from
   every other member of the sub-population, the one being replaced included, as in evolution
   strategies that recombine the whole generation before selection: a sub-population of two then
   crosses its survivor with the member it replaces. With ``parents="survivors"`` both come from the
   parent pool, and a pool of one falls back to a mutation;
5. each child's operator is drawn from ``operator_mix`` (weights need not sum to 1); where a crossover
   cannot find two distinct parents it falls back to a mutation from the mix (renormalised), or
   ``fallback_mutation`` if the mix has none;
6. the child inherits the mean mu *and the mean sigma* of its parents. A reset sigma (TrueSkill's
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
PARENT_MODES = ("population", "survivors")
CONFIDENT = 0.95  # a replacement is "decided within noise" below this probability that the survivor is fitter


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


def accumulate_rewards(
    records: Mapping[str, Mapping[str, float]], new: Mapping[str, Mapping[str, float]]
) -> dict[str, dict[str, float]]:
    """Add one generation's ``{"<slot>/<role>": {"sum", "count"}}`` reward totals to the running ones.

    >>> accumulate_rewards({"t0/propose": {"sum": 1.0, "count": 2}}, {"t0/propose": {"sum": -1.0, "count": 1}})
    {'t0/propose': {'count': 3, 'sum': 0.0}}
    """
    out = {k: dict(v) for k, v in records.items()}
    for key, add in new.items():
        entry = out.setdefault(key, {"sum": 0.0, "count": 0})
        entry["sum"] = float(entry["sum"]) + float(add["sum"])
        entry["count"] = int(entry["count"]) + int(add["count"])
        if "sumsq" in add and ("sumsq" in entry or entry["count"] == int(add["count"])):
            entry["sumsq"] = float(entry.get("sumsq", 0.0)) + float(add["sumsq"])  # only while every reward had one
        else:
            entry.pop("sumsq", None)
    return {k: dict(sorted(v.items())) for k, v in sorted(out.items())}


def mean_reward(records: Mapping[str, Mapping[str, float]], key: str) -> float | None:
    entry = records.get(key)
    return float(entry["sum"]) / entry["count"] if entry and entry["count"] else None


def reward_standard_error(entry: Mapping[str, float] | None) -> float | None:
    """Standard error of a reward record's mean (``sumsq`` kept since the records have it; a record
    without it, or of one reward, gets the widest a reward in [-1, 1] allows: sd 1).

    >>> round(reward_standard_error({"sum": 0.0, "sumsq": 4.0, "count": 4}), 3)
    0.577
    """
    if not entry or not entry.get("count"):
        return None
    n = int(entry["count"])
    if "sumsq" not in entry or n < 2:
        return 1.0 / math.sqrt(n)
    mean = float(entry["sum"]) / n
    variance = max(0.0, (float(entry["sumsq"]) - n * mean * mean) / (n - 1))
    return math.sqrt(variance / n)


def fitter_probability(stronger: Mapping[str, Any], weaker: Mapping[str, Any]) -> float | None:
    """P(`stronger` is truly fitter than `weaker`), normal approximation of each one's fitness:
    ``Phi((f_s - f_w) / sqrt(se_s^2 + se_w^2))`` with the entries' ``value`` and ``error`` (a mean
    reward and its standard error, or a TrueSkill mu and sigma). None where an error is unknown.

    >>> round(fitter_probability({"value": 1.0, "error": 0.5}, {"value": 0.0, "error": 0.5}), 3)
    0.921
    """
    if stronger.get("error") is None or weaker.get("error") is None:
        return None
    spread = math.hypot(float(stronger["error"]), float(weaker["error"]))
    if spread == 0:
        return 1.0 if stronger["value"] > weaker["value"] else 0.5
    return 0.5 * (1.0 + math.erf((float(stronger["value"]) - float(weaker["value"])) / (spread * math.sqrt(2.0))))


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
        raise ValueError(
            f"replace_k must be in [0, {len(members) - 1}] for {len(members)} members "
            f"(at least one must survive to be a parent), got {replace_k}"
        )
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
    parents: str = "population",
) -> list[dict[str, Any]]:
    """Plan which members to replace and how to make their children (see module docstring).

    Returns one dict per child: ``child_id`` (``f"{id_prefix}-g{generation:04d}-{i}"``),
    ``replaces``, ``parents`` (ids, strongest first), ``fitness`` (their ranking values,
    :func:`fitness_of`), ``operator``, ``seed`` (for ``make_child``), ``generation``, ``inherited_mu``,
    ``sigma``.
    """
    _validate(members, replace_k, operator_mix, fallback_mutation)
    if parents not in PARENT_MODES:
        raise ValueError(f"unknown parent selection {parents!r}; use one of {PARENT_MODES}")
    if replace_k == 0:
        return []
    ranked = rank_members(members, k_sigma)
    n = len(ranked)
    survivors, victims = ranked[: n - replace_k], ranked[n - replace_k :][::-1]  # weakest first
    pool = _parent_pool(survivors, n, parent_pool)
    partners = ranked if parents == "population" else pool
    mutation_mix = {op: w for op, w in operator_mix.items() if op in MUTATIONS and w > 0}
    rng = np.random.default_rng([int(seed), int(generation)])
    plan = []
    for i, victim in enumerate(victims):
        # one stream, drawn per child in a fixed order (operator, parents, seed): reordering the draws
        # would change every plan already made from the same seed
        operator = _draw(rng, operator_mix)
        if operator in CROSSOVERS and len(partners) < 2:
            operator = _draw(rng, mutation_mix) if mutation_mix else fallback_mutation
        chosen = _draw_parents(rng, operator, pool, partners, ranked)
        child_seed = int(rng.integers(0, 2**31 - 1))
        child_id = f"{id_prefix}-g{int(generation):04d}-{i}"
        plan.append(_child_plan(child_id, victim, chosen, operator, child_seed, generation, k_sigma, initial_sigma))
    return plan


def _parent_pool(
    survivors: Sequence[Mapping[str, Any]], n: int, parent_pool: int | None
) -> Sequence[Mapping[str, Any]]:
    """The strongest survivors a child's first parent is drawn from: ``parent_pool`` of them, by default
    half the sub-population but at least two; never more than survive, never none."""
    pool_size = parent_pool if parent_pool is not None else max(2, math.ceil(n / 2))
    return survivors[: max(1, min(pool_size, len(survivors)))]


def _draw_parents(
    rng: np.random.Generator,
    operator: str,
    pool: Sequence[Mapping[str, Any]],
    partners: Sequence[Mapping[str, Any]],
    ranked: Sequence[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """A child's parents, strongest first (so ``make_child`` knows the fitter one): the first from
    the parent pool, and for a crossover a second, distinct one from ``partners``."""
    first = pool[int(rng.integers(len(pool)))]
    chosen = [first]
    if operator in CROSSOVERS:
        others = [m for m in partners if m["id"] != first["id"]]
        chosen.append(others[int(rng.integers(len(others)))])
    order = {m["id"]: k for k, m in enumerate(ranked)}
    return sorted(chosen, key=lambda m: order[m["id"]])


def _child_plan(
    child_id: str,
    victim: Mapping[str, Any],
    chosen: Sequence[Mapping[str, Any]],
    operator: str,
    child_seed: int,
    generation: int,
    k_sigma: float,
    initial_sigma: float | None,
) -> dict[str, Any]:
    """The planned child of `chosen` replacing `victim`; it inherits its parents' mean mu and, unless
    ``initial_sigma`` resets it, their mean sigma (why: see the module docstring, step 6)."""
    return {
        "child_id": child_id,
        "replaces": victim["id"],
        "parents": [p["id"] for p in chosen],
        "fitness": [fitness_of(p, k_sigma) for p in chosen],
        "operator": operator,
        "seed": child_seed,
        "generation": int(generation),
        "inherited_mu": float(np.mean([float(p["mu"]) for p in chosen])),
        "sigma": float(np.mean([float(p["sigma"]) for p in chosen]) if initial_sigma is None else initial_sigma),
    }


# ---------------------------------------------------------------- lineage


LINEAGE_KEYS = ("child_id", "parents", "operator", "seed", "generation", "replaces")
LINEAGE_EXTRAS = ("slot", "role", "inherited_mu", "sigma", "fitness")  # recorded when present


def founder_events(
    member_ids: Sequence[str],
    generation: int = 0,
    *,
    seeds: Sequence[int] | None = None,
    slots: Sequence[str] | None = None,
) -> list[dict[str, Any]]:
    """Lineage events for the initial members (no parents, operator ``"init"``)."""
    events = []
    for i, m in enumerate(member_ids):
        event: dict[str, Any] = {
            "child_id": m,
            "parents": [],
            "operator": "init",
            "seed": None if seeds is None else int(seeds[i]),
            "generation": int(generation),
            "replaces": None,
        }
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


def _ranking_row(member: Mapping[str, Any], rank: int, members: Mapping[str, str], record, by_reward: bool) -> dict:
    """One member's line of a replacement's ranking: what ranked it and how certain that is."""
    row = {
        "slot": member["id"],
        "member": members[member["id"]],
        "rank": rank,
        "fitness": fitness_of(member),
        "conservative": conservative(member),
        "by": "reward" if by_reward else "trueskill",
        "mu": float(member["mu"]),
        "sigma": float(member["sigma"]),
        "rewards": int(record["count"]) if record else 0,
    }
    if by_reward:
        row.update(value=member.get("fitness"), error=reward_standard_error(record))
    else:
        row.update(value=float(member["mu"]), error=float(member["sigma"]))
    return row


def member_id(arm: str, slot: str, born: int) -> str:
    """Stable id of the member born into `slot` at generation `born` (``population/teacher0@g000``)."""
    return f"{arm}/{slot}@g{born:03d}"


def plan_generation_replacement(
    state,
    ratings: Mapping[str, Mapping[str, float]],
    reward_records: Mapping[str, Mapping[str, float]],
    *,
    generation: int,
    replace: int,
    operator_mix: Mapping[str, float],
    teacher_mode: str,
    fitness_mode: str,
    seed_of: Any,
    parents: str = "population",
) -> dict[str, Any]:
    """One arm's replacement step after `generation`, as data (no tensors).

    `state` is the generation's starting `State`, `ratings` the ratings after its games,
    `reward_records` the running reward totals *including* this generation (`accumulate_rewards`),
    `seed_of(role)` the seed for each sub-population. Returns:

    * ``rankings``: per role, every member's fitness (the value it was ranked by), its
      conservative rating and rank, strongest first, with its uncertainty: TrueSkill's ``mu`` and
      ``sigma``, the ``rewards`` behind its record, and ``value``/``error`` (mean reward and its
      standard error when ranked by reward, else mu and sigma): recorded at every replacement;
    * ``events``: lineage events of the children (member ids), with ``slot``, ``role``,
      ``parent_slots`` and ``make_child`` arguments (``operator``, ``seed``, ``fitness``), and how
      sure the replacement was: ``confidence`` (P that the weakest survivor is truly fitter than the
      member replaced, :func:`fitter_probability`) and ``within_noise`` (below ``CONFIDENT``);
    * ``members``, ``ratings``, ``reward_records``: the arm after replacement (a child's rating is
      its parents' mean mu and sigma, its reward record starts at the parents' mean fitness).
    """
    members, new_ratings, records = dict(state.members), {k: dict(v) for k, v in ratings.items()}, dict(reward_records)
    rankings: dict[str, list[dict]] = {}
    events: list[dict] = []
    for role, reward_role in (("teachers", "propose"), ("students", "solve")):
        by_reward = uses_reward_fitness(role, teacher_mode, fitness_mode)
        pool = _sub_population(getattr(state, role), ratings, reward_records, reward_role, by_reward)
        rankings[role] = [
            _ranking_row(m, i, members, reward_records.get(f"{m['id']}/{reward_role}"), by_reward)
            for i, m in enumerate(rank_members(pool))
        ]
        plan = plan_replacement(
            pool,
            replace_k=replacements(len(pool), replace),
            operator_mix=operator_mix,
            seed=seed_of(role),
            generation=generation,
            parents=parents,
        )
        events += _replacement_events(plan, rankings[role], members, state.arm, role, generation)
        for entry in plan:
            new_ratings[entry["replaces"]] = {"mu": entry["inherited_mu"], "sigma": entry["sigma"]}
            records[f"{entry['replaces']}/{reward_role}"] = _newborn_record(entry["fitness"], by_reward)
    # slots move to their children only now: every event names the members as the generation left them
    for event in events:
        members[event["slot"]] = event["child_id"]
    return {
        "rankings": rankings,
        "events": events,
        "members": members,
        "ratings": new_ratings,
        "reward_records": records,
    }


def _sub_population(
    slots: Sequence[str],
    ratings: Mapping[str, Mapping[str, float]],
    reward_records: Mapping[str, Mapping[str, float]],
    reward_role: str,
    by_reward: bool,
) -> list[dict[str, Any]]:
    """The members of one sub-population as :func:`plan_replacement` takes them: each slot's rating,
    and its mean reward as ``fitness`` when the sub-population is ranked by reward."""
    return [
        {
            "id": slot,
            **ratings[slot],
            "fitness": mean_reward(reward_records, f"{slot}/{reward_role}") if by_reward else None,
        }
        for slot in slots
    ]


def _replacement_events(
    plan: Sequence[Mapping[str, Any]],
    ranking: Sequence[Mapping[str, Any]],
    members: Mapping[str, str],
    arm: str,
    role: str,
    generation: int,
) -> list[dict[str, Any]]:
    """Lineage events of one sub-population's planned children (slots turned into member ids), each
    with how sure its replacement was: the member replaced against the weakest survivor."""
    if not plan:
        return []
    victims = {entry["replaces"] for entry in plan}
    weakest_survivor = [row for row in ranking if row["slot"] not in victims][-1]
    events = []
    for entry in plan:
        slot = entry["replaces"]
        victim = next(row for row in ranking if row["slot"] == slot)
        confidence = fitter_probability(weakest_survivor, victim)
        events.append(
            {
                "child_id": member_id(arm, slot, generation + 1),
                "slot": slot,
                "role": role,
                "replaces": members[slot],
                "parents": [members[p] for p in entry["parents"]],
                "parent_slots": entry["parents"],
                "operator": entry["operator"],
                "seed": entry["seed"],
                "fitness": entry["fitness"],
                "generation": generation + 1,
                "inherited_mu": entry["inherited_mu"],
                "sigma": entry["sigma"],
                "weakest_survivor": weakest_survivor["slot"],
                "confidence": None if confidence is None else round(confidence, 6),
                "within_noise": confidence is None or confidence < CONFIDENT,
            }
        )
    return events


def _newborn_record(parent_fitness: Sequence[float], by_reward: bool) -> dict[str, float]:
    """A child's starting reward record. Ranked by reward, it holds one reward at its parents' mean
    fitness: the child starts where its parents stood, a prior that weighs as one of its own rewards;
    ranked by TrueSkill, it starts empty.

    >>> _newborn_record([0.5, 0.25], True), _newborn_record([20.0], False)
    ({'count': 1, 'sum': 0.375, 'sumsq': 0.140625}, {'count': 0, 'sum': 0.0})
    """
    if not by_reward:
        return {"count": 0, "sum": 0.0}
    prior = float(np.mean(parent_fitness))
    return {"count": 1, "sum": prior, "sumsq": prior * prior}
