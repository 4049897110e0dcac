"""Stage checkpoint: the self-contained state the next generation (or a resumed run) starts from,
plus this generation's metrics.

    python -m stages.checkpoint --params params.yaml --arm population --gen 0 --state results/population/init \
        --evolved results/population/gen000/evolved --tasks results/population/gen000/tasks.jsonl \
        --stats results/population/gen000/reward_stats.json --pairing results/population/gen000/pairing.json \
        --out results/population/gen000/checkpoint --metrics results/population/gen000/metrics.json

The checkpoint holds adapters, optimizer moments, ratings, members, lineage, the task buffer
(this generation's valid tasks appended) and the cumulative problem-space coverage hashes.
metrics.json is flat and numeric (sorted keys) so `dvc metrics diff` and `dvc plots` read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from statistics import mean

from populora.io import read_json, read_jsonl, replace_dir, staging_dir, write_json, write_jsonl
from populora.program_metrics import normalized_ast_hash, program_metrics
from populora.ratings import conservative
from populora.state import ADAPTERS, BUFFER, OPTIMIZER, STATE, load_buffer, load_state
from populora.tasks import extend_buffer, is_valid_task
from stages._common import setup, stage_parser

METRIC_NAMES = ("ast_depth", "cyclomatic_complexity", "loc", "distinct_variables")


def generation_metrics(gen: int, stats: dict, update: dict, ratings: dict, valid: list[dict], coverage: int,
                       new_programs: int, evolution: list[dict], pairing: dict) -> dict:
    by_type = stats["by_type"].values()
    proposals, attempts = sum(r["proposals"] for r in by_type), sum(r["attempts"] for r in by_type)
    metrics: dict = {"generation": gen, "coverage_distinct_programs": coverage, "new_distinct_programs": new_programs,
                     "validity_rate": sum(r["valid"] for r in by_type) / proposals if proposals else None,
                     "solve_rate": sum(r["solved"] for r in by_type) / attempts if attempts else None,
                     "teacher_reward_mean": stats["teacher_reward_mean"], "student_reward_mean": stats["student_reward_mean"],
                     "rating_games": stats["games"], "evolution_events": len(evolution)}
    for task_type, row in stats["by_type"].items():
        for key in ("proposals", "valid", "validity_rate", "attempts", "solved", "solve_rate"):
            metrics[f"{task_type}.{key}"] = row[key]
        for reason, count in row["reasons"].items():
            metrics[f"{task_type}.reason.{reason}"] = count
        programs = [program_metrics(t["program"]) for t in valid if t["type"] == task_type]
        for name in METRIC_NAMES:
            metrics[f"{task_type}.program.{name}"] = mean(p[name] for p in programs) if programs else None
    for slot, value in ratings.items():
        metrics[f"rating.{slot}.mu"] = value["mu"]
        metrics[f"rating.{slot}.sigma"] = value["sigma"]
        metrics[f"rating.{slot}.conservative"] = conservative(value)
    for key, tokens in stats["tokens"].items():
        metrics[f"tokens.{key}"] = tokens
    for key, count in stats["rollouts"].items():
        metrics[f"samples.{key}"] = count
    for slot, row in update.items():
        metrics[f"optimizer_steps.{slot}"] = row["optimizer_steps"]
        metrics[f"trained_tokens.{slot}"] = row["trained_tokens"]
    # PFSP's matchups this generation: task slots each teacher filled for each student
    for teacher, row in pairing["counts"].items():
        for student, count in row.items():
            metrics[f"pairing.{teacher}.{student}"] = count
    return metrics


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--state", "--evolved", "--tasks", "--stats", "--pairing", "--out", "--metrics"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "checkpoint")
    prev = load_state(args.state)
    evolved = Path(args.evolved)
    evolution = read_json(evolved / "evolution.json")
    ratings = read_json(evolved / "ratings.json")
    tasks = read_jsonl(args.tasks)
    valid = [t for t in tasks if is_valid_task(t)]
    seen = set(prev["coverage_hashes"])
    hashes = {normalized_ast_hash(t["program"]) for t in valid if t["type"] != "code_f"}
    coverage = sorted(seen | hashes)

    tmp = staging_dir(args.out)
    shutil.copytree(evolved / ADAPTERS, tmp / ADAPTERS)
    if (evolved / OPTIMIZER).is_dir():
        shutil.copytree(evolved / OPTIMIZER, tmp / OPTIMIZER)
    write_jsonl(tmp / BUFFER, extend_buffer(load_buffer(args.state), valid, params.buffer.max_size))
    state = {**prev, "generation": args.gen, "ratings": ratings, "members": evolution["members"],
             "lineage": prev["lineage"] + evolution["events"], "coverage_hashes": coverage}
    write_json(tmp / STATE, state)
    metrics = generation_metrics(args.gen, read_json(args.stats), read_json(evolved / "update_stats.json"), ratings,
                                 valid, len(coverage), len(hashes - seen), evolution["events"], read_json(args.pairing))
    write_json(args.metrics, metrics)
    replace_dir(tmp, args.out)
    log.info("checkpoint: %d valid tasks added, coverage %d (+%d)", len(valid), len(coverage), len(hashes - seen))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
