"""Stage propose: teachers write tasks of all three types in mixed-adapter batches.

    python -m stages.propose --params params.yaml --arm population --gen 0 --base-model results/base_model \
        --state results/population/init --pairing results/population/gen000/pairing.json \
        --proposals results/population/gen000/proposals.jsonl

Output rows are verifier input rows (task_id, type, program, inputs, message) plus provenance,
the raw completion segments (for the update) and `parse_reason` (None when parsing succeeded).
"""

from __future__ import annotations

import random

from populora.core.io import read_json
from populora.core.rows import Proposal, write_rows
from populora.core.seeds import derive_seed
from populora.core.state import adapter_dirs, load_buffer, load_state
from populora.lm.engines import load_sampler
from populora.lm.sampling import GenRow, run_plans
from populora.tasks.prompts import chat_wrapper
from populora.tasks.roles import mark_pair_duplicates, proposal_rows, proposer_jobs
from stages._common import setup, stage_parser, timed


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--base-model", "--state", "--pairing", "--proposals"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "propose", chain=True)
    cfg = params.propose
    state = load_state(args.state)
    teachers = state.teachers
    tokenizer, model = load_sampler(args.base_model, adapter_dirs(args.state, teachers), params)
    seed = derive_seed(params.base.seed, "propose", args.arm, args.gen)
    buffer = load_buffer(args.state)
    pairing = read_json(args.pairing)  # under `pairs` each teacher reads only its pair's buffer
    jobs = proposer_jobs(
        teachers,
        buffer,
        per_type=cfg.per_type,
        references=cfg.references,
        n_inputs=cfg.code_f_inputs,
        mode=cfg.mode,
        chat=chat_wrapper(tokenizer),
        rng=random.Random(seed),
        arm=args.arm,
        gen=args.gen,
        types=cfg.types,
        pairing=pairing,
    )
    with timed(log, f"generating {len(jobs)} proposals"):
        results = run_plans(
            model,
            tokenizer,
            [GenRow(plan, meta["teacher"]) for meta, plan in jobs],
            temperature=cfg.temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            batch_size=cfg.batch_size,
            seed=seed,
            desc="propose",
        )
    rows = proposal_rows(jobs, results, mode=cfg.mode, n_inputs=cfg.code_f_inputs)
    if cfg.reject_duplicates:
        rows = mark_pair_duplicates(rows, buffer, pairing)
    write_rows(args.proposals, rows, Proposal)
    parsed_ok = sum(r["parse_reason"] is None for r in rows)
    log.info("%d/%d proposals parsed; %d tokens generated", parsed_ok, len(rows), sum(r["tokens"] for r in rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
