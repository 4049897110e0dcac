"""Stage evolve: on schedule, replace the weakest members of each sub-population by children of the strongest.

    python -m stages.evolve --params params.yaml --arm population --gen 1 --state results/population/gen000/checkpoint \
        --trained results/population/gen001/trained --ratings results/population/gen001/ratings.json \
        --stats results/population/gen001/reward_stats.json --evolved results/population/gen001/evolved

Runs after generation g when (g + 1) % evolve.interval == 0, in the population arm only (the
baseline has one adapter), whatever the run's length: the final checkpoint may hold children, but
the benchmarks export the members trained in the final generation (`stages.export`). Teachers
evolve among teachers, students among students; a sub-population of one is never replaced.
Ranking (`evolve.fitness`, see `populora.population.evolution.uses_reward_fitness`): teachers by their
mean reward under the learnability reward, otherwise conservative TrueSkill (mu - 3 sigma). A
child is made by a LoRA weight-space operator that keeps the rank (and each module's factor balance),
takes its parents' mean mu and sigma, and carries its first (fitter) parent's AdamW moments: with them
its first step is as long as its parent's; fresh moments make that step an Adam burst, about 2.4x a
trained member's (docs/design.md, "Evolution operators"; perf/child_step.py).

Writes only what changed: evolved/adapters/<slot>/ and evolved/optimizer/<slot>.safetensors for each
child, evolved/ratings.json and
evolved/evolution.json (events, every member's fitness and rank, members, reward records);
`stages.checkpoint` combines them with the trained adapters.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from populora.core.io import read_json, replace_dir, staging_dir, write_json
from populora.core.seeds import derive_seed
from populora.core.state import ADAPTERS, EVOLUTION, OPTIMIZER, RATINGS, load_state
from populora.lm.adapters import carry_moments, read_state_dict, write_adapter
from populora.population.diversity import weight_distance
from populora.population.evolution import accumulate_rewards, plan_generation_replacement
from populora.population.operators import make_child
from stages._common import setup, stage_parser


def is_scheduled(gen: int, interval: int) -> bool:
    return (gen + 1) % interval == 0


def evolves(arm: str, gen: int, evolve) -> bool:
    """Whether generation `gen` of `arm` ends with a replacement step: the population arm only, on
    schedule, and never with `evolve.replace: 0` (the evolution-off control)."""
    return arm == "population" and evolve.replace > 0 and is_scheduled(gen, evolve.interval)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    params, log = setup(args, "evolve")
    state = load_state(args.state)
    ratings = read_json(args.ratings)
    records = accumulate_rewards(state.fitness, read_json(args.stats)["rewards"])
    scheduled = evolves(args.arm, args.gen, params.evolve)
    result = {"events": [], "rankings": {}, "members": state.members, "ratings": ratings, "reward_records": records}
    if scheduled:
        result = _plan_replacement(args, params, state, ratings, records)
    tmp = staging_dir(args.evolved)
    (tmp / ADAPTERS).mkdir()
    for event in result["events"]:
        _write_child(event, Path(args.trained), tmp)
        log.info(
            "%s: %s replaced by %s, %s(%s)",
            event["role"],
            event["replaces"],
            event["child_id"],
            event["operator"],
            event["parents"],
        )
    _log_rankings(log, result["rankings"])
    write_json(tmp / RATINGS, result["ratings"])
    write_json(
        tmp / EVOLUTION,
        {"scheduled": scheduled, **{k: result[k] for k in ("events", "rankings", "members", "reward_records")}},
    )
    replace_dir(tmp, args.evolved)
    log.info("%d evolution events", len(result["events"]))
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--state", "--trained", "--ratings", "--stats", "--evolved"):
        parser.add_argument(flag, required=True)
    return parser.parse_args(argv)


def _plan_replacement(args: argparse.Namespace, params, state, ratings: dict, records: dict) -> dict:
    """The generation's replacement step as data (`plan_generation_replacement`): events, rankings, members,
    ratings and reward records; each role's seed derived from the arm and generation."""
    return plan_generation_replacement(
        state,
        ratings,
        records,
        generation=args.gen,
        replace=params.evolve.replace,
        operator_mix=params.evolve.operators,
        teacher_mode=params.reward.teacher_mode,
        fitness_mode=params.evolve.fitness,
        parents=params.evolve.parents,
        seed_of=lambda role: derive_seed(params.base.seed, "evolve", args.arm, args.gen, role),
    )


def _write_child(event: dict, trained: Path, out: Path) -> None:
    """Make the child `event` plans from its parents' trained adapters and write it into `out`: its adapter and
    its first parent's optimizer moments. Records in `event` its weight distance to each parent and whether
    the moments were carried."""
    first = event["parent_slots"][0]
    parents = [read_state_dict(trained / ADAPTERS / slot) for slot in event["parent_slots"]]
    child = make_child(parents, event["operator"], event["seed"], fitness=event["fitness"])
    event["distance_to_parents"] = [round(weight_distance(child, parent), 6) for parent in parents]
    moments = trained / OPTIMIZER / f"{first}.safetensors"
    # a parent that took no step yet has no moments: the child starts fresh, as the parent would
    carried = moments.is_file() and carry_moments(
        moments, out / OPTIMIZER / f"{event['slot']}.safetensors", first, event["slot"]
    )
    event["moments"] = "carried" if carried else "fresh"
    write_adapter(out / ADAPTERS / event["slot"], child, config_from=trained / ADAPTERS / first)


def _log_rankings(log: logging.Logger, rankings: dict) -> None:
    for role, ranking in rankings.items():
        log.info(
            "%s ranked by %s: %s",
            role,
            ranking[0]["by"] if ranking else "-",
            [(r["slot"], round(r["fitness"], 3)) for r in ranking],
        )


if __name__ == "__main__":
    raise SystemExit(main())
