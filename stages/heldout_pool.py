"""Stage heldout_pool: make the held-out pool once (the base model proposes, the sandbox verifies) and
score the base model on it.

    python -m stages.heldout_pool --params params.yaml --base-model results/base_model \
        --pool results/heldout/pool.jsonl --base results/heldout/base.json

The pool (populora/selfplay/heldout.py) holds `heldout.per_type` verified code_o/code_i tasks (the
trained types among `propose.types`), each with its worked examples; `--base` gets the base model's
greedy verdicts on it (`{"metrics": ..., "verdicts": {"base": {task_id: 0|1}}, "size": ...}`). Round r
asks the base model, in the teacher's prompt, for one batch of proposals (`propose.batch_size`, split
over the types; on the 2-core CPU about 8 of 32 SmolLM2-135M proposals enter; references from the
seed tasks and the pool so far, seed derived from `heldout.seed`, not `base.seed`); rounds stop when
the pool is full or after `heldout.max_rounds` (a short pool is logged and kept). With
`heldout.pool_file` the pool is that file's (a study's committed pool), verified again, and no proposal
is made. With `heldout.per_type: 0` both files are written empty and no model loads.
"""

from __future__ import annotations

import random

from populora.core.io import read_jsonl, write_json, write_jsonl
from populora.core.paths import shipped_path
from populora.core.progress import Progress
from populora.core.seeds import derive_seed
from populora.lm.engines import load_sampler
from populora.lm.sampling import GenRow, run_plans
from populora.selfplay.heldout import (
    accept_into_pool,
    attach_examples,
    pool_is_full,
    pool_types,
    score_members,
)
from populora.selfplay.prompts import chat_wrapper
from populora.selfplay.roles import proposal_rows, proposer_jobs
from populora.selfplay.tasks import is_copyable, mark_duplicates, seed_proposals
from populora.verifier import IsolationError, sandbox_for, verify_rows
from stages._common import setup, stage_parser, timed


def verified_seeds(params, sandbox) -> list[dict]:
    """The seed tasks as the init stage keeps them (verified; without copyable ones under reject_copyable)."""
    code_f_inputs = params.propose.code_f_inputs
    seeds = [row for row in verify_rows(seed_proposals(params.buffer.seeds, code_f_inputs), params.verify,
                                        sandbox=sandbox, code_f_inputs=code_f_inputs) if row["valid"]]
    return [row for row in seeds if not (params.propose.reject_copyable and is_copyable(row))]


def build_pool(params, model, tokenizer, seeds: list[dict], sandbox, log) -> list[dict]:
    cfg, per_type = params.propose, params.heldout.per_type
    types = pool_types(cfg.types)
    chat = chat_wrapper(tokenizer)
    pool: list[dict] = []
    for round_index in range(params.heldout.max_rounds):
        seed = derive_seed(params.heldout.seed, "heldout_pool", round_index)
        # one full batch of proposals per round, over the types not yet full (a full type's proposals would be wasted)
        missing = [t for t in types if sum(p["type"] == t for p in pool) < per_type]
        per_round = max(1, -(-cfg.batch_size // len(missing)))
        jobs = proposer_jobs(["base"], [*seeds, *pool], per_type=per_round, references=cfg.references,
                             n_inputs=cfg.code_f_inputs, mode=cfg.mode, chat=chat, rng=random.Random(seed),
                             arm="heldout", gen=round_index, types=missing)
        results = run_plans(model, tokenizer, [GenRow(plan, None) for _, plan in jobs], temperature=cfg.temperature,
                            top_p=cfg.top_p, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, seed=seed,
                            desc=f"heldout pool round {round_index}")
        rows = mark_duplicates(proposal_rows(jobs, results, mode=cfg.mode, n_inputs=cfg.code_f_inputs), [*seeds, *pool])
        parsed = [row for row in rows if row["parse_reason"] is None]
        with Progress(len(parsed), f"heldout pool round {round_index} verify", unit="proposals", log=log) as progress:
            verified = verify_rows(parsed, params.verify, sandbox=sandbox, code_f_inputs=cfg.code_f_inputs,
                                   progress=progress.update)
        pool = accept_into_pool(pool, verified, seeds, per_type=per_type, types=types)
        log.info("round %d: %d proposals, %d parsed, %d valid; pool %s", round_index, len(rows), len(parsed),
                 sum(r["valid"] for r in verified), {t: sum(p["type"] == t for p in pool) for t in types})
        if pool_is_full(pool, per_type, types):
            break
    else:
        log.warning("held-out pool short after %d rounds: %s of %d per type (heldout.max_rounds)",
                    params.heldout.max_rounds, {t: sum(p["type"] == t for p in pool) for t in types}, per_type)
    return attach_examples(pool, seeds, params.solve.worked_examples, derive_seed(params.heldout.seed, "examples"))


def reuse_pool(params, sandbox, log) -> list[dict]:
    """The tasks of `heldout.pool_file` that the sandbox verifies again with the same outputs, the
    first `heldout.per_type` of each type (their worked examples as they were made)."""
    made = read_jsonl(shipped_path(params.heldout.pool_file))
    types = pool_types(params.propose.types)
    fields = ("task_id", "type", "program", "inputs", "message")
    again = verify_rows([{k: row.get(k) for k in fields} for row in made], params.verify, sandbox=sandbox,
                        code_f_inputs=params.propose.code_f_inputs)
    kept, counts = [], dict.fromkeys(types, 0)
    for row, check in zip(made, again):
        same = check["valid"] and check["outputs"] == row.get("outputs")
        if row.get("type") in counts and same and counts[row["type"]] < params.heldout.per_type:
            kept.append(row)
            counts[row["type"]] += 1
    dropped = len(made) - len(kept)
    log.info("reused %s: %d tasks kept %s, %d left out (beyond per_type, another type, or not verified again alike)",
             params.heldout.pool_file, len(kept), counts, dropped)
    if any(count < params.heldout.per_type for count in counts.values()):
        log.warning("held-out pool short: %s of %d per type in %s", counts, params.heldout.per_type,
                    params.heldout.pool_file)
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    for flag in ("--base-model", "--pool", "--base"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "heldout_pool")
    if params.heldout.per_type == 0 or not pool_types(params.propose.types):
        write_jsonl(args.pool, [])
        write_json(args.base, {"metrics": {}, "verdicts": {}, "size": {}})
        log.info("no held-out pool (heldout.per_type: 0 or no code_o/code_i in propose.types)")
        return 0
    try:
        with sandbox_for(params.verify) as sandbox:
            seeds = verified_seeds(params, sandbox)
            tokenizer, model = load_sampler(args.base_model, {}, params)
            if params.heldout.pool_file:  # a pool made before: no proposals
                pool = reuse_pool(params, sandbox, log)
            else:
                with timed(log, "building the held-out pool"):
                    pool = build_pool(params, model, tokenizer, seeds, sandbox, log)
            with timed(log, f"scoring the base model on {len(pool)} held-out tasks"):
                metrics, table = score_members(params, model, tokenizer, pool, [None], {}, sandbox)
    except IsolationError as error:  # a layer of verify.required_layers is missing
        log.error("%s", error)
        return 3
    write_jsonl(args.pool, pool)
    size = {t: sum(p["type"] == t for p in pool) for t in pool_types(params.propose.types)}
    write_json(args.base, {"metrics": metrics, "verdicts": table, "size": size, "per_type": params.heldout.per_type})
    log.info("held-out pool of %d tasks %s; base accuracy %s", len(pool), size, metrics.get("heldout.base.accuracy"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
