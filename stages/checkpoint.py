"""Stage checkpoint: the self-contained state the next generation (or a resumed run) starts from,
plus this generation's metrics.

    python -m stages.checkpoint --params params.yaml --arm population --gen 0 --state results/population/init \
        --trained results/population/gen000/trained --evolved results/population/gen000/evolved \
        --ratings results/population/gen000/ratings.json \
        --tasks results/population/gen000/tasks.jsonl --stats results/population/gen000/reward_stats.json \
        --pairing results/population/gen000/pairing.json --isolation results/population/gen000/isolation.json \
        --checkpoint results/population/gen000/checkpoint --metrics results/population/gen000/metrics.json \
        --history results/dynamics/population/dynamics.json --steps results/dynamics/population/update_steps.json \
        --progress results/progress.json --tracking results/tracking

The checkpoint holds adapters (the trained ones, hard-linked, and evolution's children; a
replaced member's trained adapter stays under replaced/ for the benchmarks),
optimizer moments (a child's: its first parent's, carried by evolve), `State` (ratings, members, reward records, lineage,
coverage hashes) and the task buffer with this generation's valid tasks appended. metrics.json is
flat and numeric (sorted keys; definitions in `populora.rl.generation_metrics`); it also goes
into the arm's live history (`--history`, `--steps`, `--progress`, `--tracking`: populora/report/live.py).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from populora.core.io import read_json, replace_dir, staging_dir, write_json
from populora.core.rows import BufferEntry, Task, read_rows, write_rows
from populora.core.seeds import derive_seed
from populora.core.state import (
    ADAPTERS,
    BUFFER,
    EVOLUTION,
    RATINGS,
    UPDATE_STATS,
    State,
    link_checkpoint_adapters,
    load_buffer,
    load_state,
    save_state,
)
from populora.lm.adapters import delta_norm, read_state_dict
from populora.population.diversity import weight_diversity
from populora.population.evolution import append_lineage
from populora.rl import generation_metrics as gm
from populora.tasks.tasks import extend_pair_buffers, is_valid_task
from stages._common import setup, stage_parser
from stages._live import add_live_flags, record_live


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    params, log = setup(args, "checkpoint")
    prev = load_state(args.state)
    trained, evolved = Path(args.trained), Path(args.evolved)
    evolution = read_json(evolved / EVOLUTION)
    ratings = read_json(evolved / RATINGS)
    stats = read_json(args.stats)
    tasks = read_rows(args.tasks, Task)
    coverage, matched, coverage_metrics = gm.coverage_update(
        tasks,
        prev.coverage_hashes,
        prev.matched_coverage_hashes,
        per_adapter=params.propose.per_type * 2,
        seed=derive_seed(params.base.seed, "coverage", args.arm, args.gen),
    )

    tmp = staging_dir(args.checkpoint)
    link_checkpoint_adapters(tmp, prev.slots, trained, evolved, {event["slot"] for event in evolution["events"]})
    _write_buffer(tmp, params, args, tasks)
    save_state(tmp, _next_state(prev, args, evolution, ratings, coverage, matched))
    metrics = _generation_metrics(
        args,
        prev,
        tmp,
        tasks=tasks,
        stats=stats,
        ratings=ratings,
        evolution=evolution,
        coverage_metrics=coverage_metrics,
    )
    write_json(args.metrics, metrics)
    replace_dir(tmp, args.checkpoint)
    record_live(args, params.tracking, log, metrics, drop_later=True)  # rows after this generation are an earlier run's
    log.info(
        "checkpoint: %d valid tasks added; coverage %d (+%d), matched %d (+%d)",
        sum(is_valid_task(t) for t in tasks),
        len(coverage),
        coverage_metrics["coverage.new_programs"],
        len(matched),
        coverage_metrics["coverage.matched.new_programs"],
    )
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in (
        "--state",
        "--trained",
        "--evolved",
        "--ratings",
        "--tasks",
        "--stats",
        "--pairing",
        "--isolation",
        "--checkpoint",
        "--metrics",
    ):
        parser.add_argument(flag, required=True)
    add_live_flags(parser)
    return parser.parse_args(argv)


def _write_buffer(tmp: Path, params, args: argparse.Namespace, tasks: list[dict]) -> None:
    """The next generation's task buffer in the staged checkpoint `tmp`: the previous checkpoint's with this
    generation's valid tasks appended, capped at buffer.max_size (per pair under `--pairing`'s pairs)."""
    write_rows(
        tmp / BUFFER,
        extend_pair_buffers(
            load_buffer(args.state),
            [t for t in tasks if is_valid_task(t)],
            params.buffer.max_size,
            read_json(args.pairing),
        ),
        BufferEntry,
    )


def _next_state(
    prev: State, args: argparse.Namespace, evolution: dict, ratings: dict, coverage: list[str], matched: list[str]
) -> State:
    """The `State` after generation `--gen`: evolution's members, ratings, reward records and lineage, and the
    coverage so far; the members as trained and their ratings (`--ratings`) stay beside them for the benchmarks."""
    return prev.evolve(
        generation=args.gen,
        ratings=ratings,
        members=evolution["members"],
        fitness=evolution["reward_records"],
        lineage=append_lineage(prev.lineage, evolution["events"]),
        coverage_hashes=coverage,
        matched_coverage_hashes=matched,
        trained_members=prev.members,
        trained_ratings=read_json(args.ratings),
    )


def _generation_metrics(
    args: argparse.Namespace,
    prev: State,
    checkpoint: Path,
    *,
    tasks: list[dict],
    stats: dict,
    ratings: dict,
    evolution: dict,
    coverage_metrics: dict,
) -> dict:
    """metrics.json (definitions in `populora.rl.generation_metrics`). Adapter distances are measured on the
    staged `checkpoint`, so a slot evolution refilled counts its child; weight diversity on the members as
    trained."""
    trained = Path(args.trained)
    return {
        "generation": args.gen,
        **gm.rate_metrics(stats),
        **gm.complexity_metrics(tasks),
        **coverage_metrics,
        **gm.rating_metrics(ratings),
        **gm.compute_metrics(stats, read_json(trained / UPDATE_STATS)),
        **gm.distance_metrics({slot: delta_norm(read_state_dict(checkpoint / ADAPTERS / slot)) for slot in prev.slots}),
        **gm.pairing_metrics(read_json(args.pairing)),
        **gm.evolution_metrics(evolution),
        **gm.isolation_metrics(read_json(args.isolation)),
        **_weight_diversity(prev, trained),
    }


def _weight_diversity(prev: State, trained: Path) -> dict:
    """How far apart the members trained this generation are, per role (populora/population/diversity.py)."""
    return {
        key: value
        for role in ("teachers", "students")
        for key, value in weight_diversity(
            role, {slot: read_state_dict(trained / ADAPTERS / slot) for slot in getattr(prev, role)}
        ).items()
    }


if __name__ == "__main__":
    raise SystemExit(main())
