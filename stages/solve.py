"""Stage solve: students answer their assigned tasks, several samples each, in mixed-adapter batches.

    python -m stages.solve --params params.yaml --arm population --gen 0 --base-model results/base_model \
        --state results/population/init --pairing results/population/gen000/pairing.json \
        --tasks results/population/gen000/tasks.jsonl --answers results/population/gen000/answers.jsonl \
        --solve-tasks results/population/gen000/solve_tasks.jsonl

`--solve-tasks` receives every task a student was given (this generation's valid proposals and
buffer top-ups) in the verifier's row format, so `stages.grade` can check the answers.
"""

from __future__ import annotations

import argparse
import random

from populora.core.io import read_json
from populora.core.rows import Answer, SolveTask, Task, read_rows, write_rows
from populora.core.seeds import derive_seed
from populora.core.state import adapter_dirs, load_buffer, load_state
from populora.lm.engines import load_sampler
from populora.lm.sampling import GenResult, GenRow, run_plans
from populora.tasks.parsing import parse_answer
from populora.tasks.prompts import Plan, chat_wrapper
from populora.tasks.roles import assign_tasks, solver_jobs
from stages._common import setup, stage_parser, timed

TASK_FIELDS = ("task_id", "type", "program", "inputs", "outputs", "message", "teacher", "gen", "origin", "author")


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    params, log = setup(args, "solve", chain=True)
    cfg = params.solve
    state = load_state(args.state)
    buffer = load_buffer(args.state)
    pairing = read_json(args.pairing)
    assignment = assign_tasks(
        pairing,
        read_rows(args.tasks, Task),
        buffer,
        fill_in=cfg.fill_in,
        rng=random.Random(derive_seed(params.base.seed, "fill_in", args.arm, args.gen)),
        types=params.propose.types,
    )
    tokenizer, model = load_sampler(args.base_model, adapter_dirs(args.state, state.students), params)
    seed = derive_seed(params.base.seed, "solve", args.arm, args.gen)
    jobs = solver_jobs(
        assignment,
        buffer,
        samples=cfg.samples,
        worked_examples=cfg.worked_examples,
        mode=cfg.mode,
        chat=chat_wrapper(tokenizer),
        rng=random.Random(seed),
        pairing=pairing,
    )
    with timed(log, f"generating {len(jobs)} answers"):
        results = _generate(model, tokenizer, jobs, cfg, seed)
    rows = _answer_rows(jobs, results, cfg.mode)
    used = _used_tasks(assignment)
    write_rows(args.solve_tasks, [{**{k: t.get(k) for k in TASK_FIELDS}, "valid": True} for t in used], SolveTask)
    write_rows(args.answers, rows, Answer)
    log.info(
        "%d answers (%d parsed) on %d tasks; %d tokens",
        len(rows),
        sum(r["answer"] is not None for r in rows),
        len(used),
        sum(r["tokens"] for r in rows),
    )
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--base-model", "--state", "--pairing", "--tasks", "--answers", "--solve-tasks"):
        parser.add_argument(flag, required=True)
    return parser.parse_args(argv)


def _generate(model, tokenizer, jobs: list[tuple[dict, Plan]], cfg, seed: int) -> list[GenResult]:
    """One completion per job, each with its student's adapter (mixed-adapter batches)."""
    return run_plans(
        model,
        tokenizer,
        [GenRow(plan, meta["student"]) for meta, plan in jobs],
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        batch_size=cfg.batch_size,
        seed=seed,
        desc="solve",
    )


def _answer_rows(jobs: list[tuple[dict, Plan]], results: list[GenResult], mode: str) -> list[dict]:
    """The answer rows: each job's metadata with the answer parsed from its completion (None and a
    `parse_reason` where none parses)."""
    rows = []
    for (meta, _), result in zip(jobs, results):
        answer, reason = parse_answer(result.completion, meta["type"], mode=mode, truncated=result.truncated)
        rows.append(
            {
                **meta,
                "answer": answer,
                "parse_reason": reason,
                "segments": result.segments,
                "tokens": result.tokens_generated,
            }
        )
    return rows


def _used_tasks(assignment: dict[str, dict[str, list[dict]]]) -> list[dict]:
    """Every task some student was given, once each (a task two students share is graded once), in
    first-assigned order."""
    return list(
        {t["task_id"]: t for by_type in assignment.values() for tasks in by_type.values() for t in tasks}.values()
    )


if __name__ == "__main__":
    raise SystemExit(main())
