"""Stage evolve: on schedule, replace the weakest members of each sub-population by children of the strongest.

    python -m stages.evolve --params params.yaml --arm population --gen 1 --state results/population/gen000/checkpoint \
        --trained results/population/gen001/trained --ratings results/population/gen001/ratings.json \
        --out results/population/gen001/evolved

Runs after generation g when (g + 1) % evolve.interval == 0, in the population arm only (the
baseline has one adapter). Teachers evolve among teachers, students among students. Weakest =
lowest conservative TrueSkill (mu - 3 sigma); a child is made by a LoRA weight-space operator
that keeps the rank, takes its parents' mean mu and a reset sigma, and starts with fresh
optimizer moments. Off schedule the trained adapters pass through unchanged.
Writes evolved/adapters/, evolved/optimizer/, evolved/ratings.json, evolved/evolution.json.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from populora.adapters import read_state_dict, write_adapter
from populora.evolution import plan_replacement
from populora.io import read_json, replace_dir, staging_dir, write_json
from populora.operators import make_child
from populora.state import ADAPTERS, OPTIMIZER, load_state
from stages._common import derive_seed, setup, stage_parser


def is_scheduled(gen: int, interval: int) -> bool:
    return (gen + 1) % interval == 0


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--state", "--trained", "--ratings", "--out"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "evolve")
    state = load_state(args.state)
    trained = Path(args.trained)
    ratings = read_json(args.ratings)
    members = dict(state["members"])
    tmp = staging_dir(args.out)
    shutil.copytree(trained / ADAPTERS, tmp / ADAPTERS)
    shutil.copytree(trained / OPTIMIZER, tmp / OPTIMIZER)
    shutil.copy(trained / "update_stats.json", tmp / "update_stats.json")
    events = []
    if args.arm == "population" and params.evolve.replace > 0 and is_scheduled(args.gen, params.evolve.interval):
        for role in ("teachers", "students"):
            pool = [{"id": slot, **ratings[slot]} for slot in state[role]]
            plan = plan_replacement(pool, replace_k=params.evolve.replace, operator_mix=params.evolve.operators,
                                    seed=derive_seed(params.base.seed, "evolve", args.arm, args.gen, role),
                                    generation=args.gen, initial_sigma=params.ratings.sigma)
            for event in plan:
                slot = event["replaces"]
                parents = [read_state_dict(trained / ADAPTERS / p) for p in event["parents"]]
                child = make_child(parents, event["operator"], event["seed"], fitness=event["fitness"])
                shutil.rmtree(tmp / ADAPTERS / slot)
                write_adapter(tmp / ADAPTERS / slot, child, config_from=trained / ADAPTERS / event["parents"][0])
                (tmp / OPTIMIZER / f"{slot}.safetensors").unlink(missing_ok=True)
                ratings[slot] = {"mu": event["inherited_mu"], "sigma": event["sigma"]}
                child_id = f"{args.arm}/{slot}@g{args.gen + 1:03d}"
                events.append({"child_id": child_id, "slot": slot, "replaces": members[slot], "role": role,
                               "parents": [members[p] for p in event["parents"]], "operator": event["operator"],
                               "seed": event["seed"], "generation": args.gen + 1, "inherited_mu": event["inherited_mu"]})
                log.info("%s: %s replaced by %s(%s)", role, members[slot], event["operator"], event["parents"])
        for event in events:
            members[event["slot"]] = event["child_id"]
    write_json(tmp / "ratings.json", ratings)
    write_json(tmp / "evolution.json", {"events": events, "members": members})
    replace_dir(tmp, args.out)
    log.info("%d evolution events", len(events))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
