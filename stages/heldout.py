"""Stage heldout: the members trained in a generation, and the children evolution made, answer the held-out pool.

    python -m stages.heldout --params params.yaml --arm population --gen 0 --base-model results/base_model \
        --pool results/heldout/pool.jsonl --heldout-base results/heldout/base.json \
        --state results/population/gen000/checkpoint --scores results/population/gen000/heldout.json \
        --history results/dynamics/population/dynamics.json --steps results/dynamics/population/update_steps.json \
        --progress results/progress.json --tracking results/tracking

Greedy verdicts come after the generations due at `heldout.every` (every one by default) and always after
the last, pass rates after those due at `heldout.sample_every`; a generation with neither writes an empty record
(`verdicts: {}`, which every reader takes as "not scored") and loads no model.

Members of the roles in `heldout.roles` answer, greedy: each slot's member *as trained in this
generation* (the same models the benchmarks score: `populora.core.state.trained_adapter_dir`), so a
curve follows the members that learnt, never an untrained child put in their place. A child born by
evolution after the generation answers too, as its own point (`born`: its member id, parents and
verdicts; its parents' verdicts are the reference). Writes `{"metrics": {heldout.<slot|students|teachers>.accuracy,
heldout.<slot|role>.pass_rate with `heldout.samples`, heldout.born.<slot>.accuracy, diversity.<role>.verdict_agreement, diversity.<role>.clone_pairs, ...},
"verdicts": {slot: {task_id: 0|1}}, "born": {slot: {...}}, "roles": {...}}` (populora/heldout/scoring.py):
the prompts are the pool's own (same worked examples for every member, arm and generation), so verdicts
pair task by task across arms and generations. The metrics (and the base's, from `--heldout-base`) go into
generation g's row of the live history (populora/report/live.py). An empty pool writes empty scores and
loads no model.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import NamedTuple

from populora.core.io import read_json, read_jsonl, write_json
from populora.core.state import ADAPTERS, REPLACED, State, load_state, trained_adapter_dir
from populora.heldout.scoring import heldout_metrics, pass_rate_metrics, pass_rates, score_members
from populora.lm.engines import load_sampler
from populora.population.agreement import verdict_diversity
from populora.verifier import IsolationError, sandbox_for
from stages._common import setup, stage_parser, timed
from stages._live import add_live_flags, record_live

BORN = ".born"  # adapter name of a slot's newborn child, beside the slot's trained member


class _Scoring(NamedTuple):
    """Who answers the pool after this generation, and how."""

    roles: dict[str, list[str]]  # heldout.roles: role -> its slots
    members: list[str]  # the slots of those roles, each once
    greedy: bool  # greedy verdicts due (heldout.every, and always after the last generation)
    sampled: bool  # pass rates due (heldout.samples, heldout.sample_every)
    born: dict[str, str]  # slot -> adapter name of the child evolution put in it, scored with the greedy verdicts


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    params, log = setup(args, "heldout", chain=True)
    pool = read_jsonl(args.pool)
    state = load_state(args.state)
    plan = _scoring(params, args, state)
    if not pool:
        write_json(args.scores, {"metrics": {}, "verdicts": {}, "born": {}, "roles": plan.roles, "pass_rates": {}})
        log.info("empty held-out pool: nothing scored")
        return 0
    if not (plan.greedy or plan.sampled):
        write_json(args.scores, {"metrics": {}, "verdicts": {}, "born": {}, "roles": plan.roles, "pass_rates": {}})
        record_live(args, params.tracking, log, {"generation": args.gen, **read_json(args.heldout_base)["metrics"]})
        log.info("not scored after generation %d (heldout.every, heldout.sample_every)", args.gen)
        return 0
    try:
        scored, table, rates = _answer_pool(params, args, state, pool, plan, log)
    except IsolationError as error:
        log.error("%s", error)
        return 3
    trained = {slot: table.get(slot, {}) for slot in plan.members} if plan.greedy else {}
    metrics = pass_rate_metrics(rates, pool, plan.roles)
    if plan.greedy:
        metrics |= _greedy_metrics(trained, scored, pool, plan)
    children = _born_children(state, plan.born, table)
    metrics |= _born_metrics(plan.born, children, pool)
    write_json(
        args.scores,
        {
            "metrics": metrics,
            "verdicts": trained,
            "born": children,
            "roles": plan.roles,
            "pass_rates": rates,
            "members": {slot: state.trained_members.get(slot, state.members[slot]) for slot in plan.members},
        },
    )
    record_live(
        args, params.tracking, log, {"generation": args.gen, **metrics, **read_json(args.heldout_base)["metrics"]}
    )
    if plan.greedy:
        log.info("held-out accuracy: %s", {m: metrics[f"heldout.{m}.accuracy"] for m in [*plan.members, *plan.roles]})
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--base-model", "--pool", "--heldout-base", "--state", "--scores"):
        parser.add_argument(flag, required=True)
    add_live_flags(parser)
    return parser.parse_args(argv)


def _scoring(params, args: argparse.Namespace, state: State) -> _Scoring:
    """What is due after generation `--gen` (heldout.every, heldout.sample_every) and who answers."""
    roles = {role: list(getattr(state, role)) for role in params.heldout.roles}  # students, teachers
    members = list(dict.fromkeys(m for role in roles.values() for m in role))
    greedy = due(args.gen, params.heldout.every) or args.gen == params.dag.generations - 1
    # a child born this generation, as born, is scored greedily beside its trained self (nothing else reads it)
    born = {slot: f"{slot}{BORN}" for slot in members if greedy and (Path(args.state) / REPLACED / slot).is_dir()}
    sampled = bool(params.heldout.samples) and due(args.gen, params.heldout.sample_every)
    return _Scoring(roles, members, greedy, sampled, born)


def _answer_pool(
    params, args: argparse.Namespace, state: State, pool: list[dict], plan: _Scoring, log: logging.Logger
) -> tuple[dict, dict, dict]:
    """The members (as trained) and the born children answer `pool`, with one model load for both measures:
    `score_members`' metrics and verdict table when greedy verdicts are due, the pass rates when they are due."""
    adapters = {slot: trained_adapter_dir(args.state, state, slot) for slot in plan.members}
    adapters |= {name: Path(args.state) / ADAPTERS / slot for slot, name in plan.born.items()}
    with sandbox_for(params.verify) as sandbox:
        tokenizer, model = load_sampler(args.base_model, adapters, params)
        table: dict = {}
        scored: dict = {}
        if plan.greedy:
            with timed(log, f"{len(adapters)} members ({len(plan.born)} born) x {len(pool)} held-out tasks"):
                scored, table = score_members(params, model, tokenizer, pool, list(adapters), plan.roles, sandbox)
        rates = {}
        if plan.sampled:
            with timed(log, f"{len(plan.members)} members x {len(pool)} tasks x {params.heldout.samples} answers"):
                rates = pass_rates(
                    params, model, tokenizer, pool, plan.members, sandbox, samples=params.heldout.samples, seed=args.gen
                )
    return scored, table, rates


def _greedy_metrics(trained: dict, scored: dict, pool: list[dict], plan: _Scoring) -> dict:
    """Accuracies per member and role, the share of each member's answers the parser found none in, and how
    alike the members of each role answer (verdicts paired task by task)."""
    metrics = heldout_metrics(trained, pool, plan.roles)
    metrics |= {f"heldout.{m}.unanswered": scored[f"heldout.{m}.unanswered"] for m in plan.members}
    ids = [task["task_id"] for task in pool]
    for role, slots in plan.roles.items():
        metrics |= verdict_diversity(role, trained, slots, ids)
    return metrics


def _born_children(state: State, born: dict[str, str], table: dict) -> dict:
    """slot -> the child born in it: its member id, parents and operator (its lineage event) and its verdicts."""
    children = {}
    for slot, name in born.items():
        event = next((e for e in state.lineage if e["child_id"] == state.members[slot]), {})
        children[slot] = {
            "member": state.members[slot],
            "parents": event.get("parents", []),
            "operator": event.get("operator"),
            "verdicts": table.get(name, {}),
        }
    return children


def _born_metrics(born: dict[str, str], children: dict, pool: list[dict]) -> dict:
    """Each child's accuracies as heldout.born.<slot>.*: beside, not in place of, its slot's trained member."""
    metrics: dict = {}
    for slot, name in born.items():
        metrics |= {
            key.replace(f"heldout.{name}.", f"heldout.born.{slot}."): value
            for key, value in heldout_metrics({name: children[slot]["verdicts"]}, pool, {}).items()
        }
    return metrics


def due(gen: int, every: int) -> bool:
    """Whether generation `gen` (0-based) is one scored at a cadence of `every`: after the every-th, 2 x every-th..."""
    return (gen + 1) % every == 0


if __name__ == "__main__":
    raise SystemExit(main())
