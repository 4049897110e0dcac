"""Stage heldout: every member of a generation's checkpoint answers the held-out pool, greedy.

    python -m stages.heldout --params params.yaml --arm population --gen 0 --base-model results/base_model \
        --pool results/heldout/pool.jsonl --state results/population/gen000/checkpoint \
        --scores results/population/gen000/heldout.json

Members of the roles in `heldout.roles` answer. Writes `{"metrics": {heldout.<member|students|teachers>.accuracy, ...}, "verdicts": {member: {task_id: 0|1}},
"roles": {...}}` (populora/selfplay/heldout.py): the prompts are the pool's own (same worked examples
for every member, arm and generation), so verdicts pair task by task across arms and generations.
An empty pool writes empty scores and loads no model.
"""

from __future__ import annotations

import logging

from populora.core.io import read_jsonl, write_json
from populora.core.progress import Progress
from populora.core.state import adapter_dirs, load_state
from populora.lm.engines import load_sampler
from populora.lm.sampling import GenRow, run_plans
from populora.selfplay.heldout import heldout_metrics, scoring_jobs, verdict_table
from populora.selfplay.parsing import parse_answer
from populora.selfplay.prompts import chat_wrapper
from populora.verifier import IsolationError, grade_rows, sandbox_for
from stages._common import setup, stage_parser, timed

log = logging.getLogger("heldout")


def score_members(params, model, tokenizer, pool: list[dict], members: list[str | None],
                  roles: dict[str, list[str]], sandbox) -> tuple[dict, dict]:
    """(metrics, verdict table) of `members` (adapter names on `model`; None: the bare base) on `pool`,
    greedy, with the solver's settings (`solve.mode`, `solve.max_new_tokens`, `solve.batch_size`)."""
    cfg = params.solve
    jobs = scoring_jobs(pool, members, mode=cfg.mode, chat=chat_wrapper(tokenizer))
    results = run_plans(model, tokenizer, [GenRow(plan, meta["student"]) for meta, plan in jobs], temperature=0.0,
                        top_p=1.0, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, seed=0, desc="heldout")
    rows = []
    for (meta, _), result in zip(jobs, results):
        answer, reason = parse_answer(result.completion, meta["type"], mode=cfg.mode, truncated=result.truncated)
        rows.append({**meta, "answer": answer, "parse_reason": reason})
    with Progress(len(rows), "heldout grading", unit="answers", log=log) as progress:
        table = verdict_table(grade_rows(pool, rows, params.verify, sandbox=sandbox, progress=progress.update))
    return heldout_metrics(table, pool, roles), table


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--base-model", "--pool", "--state", "--scores"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "heldout")
    pool = read_jsonl(args.pool)
    state = load_state(args.state)
    roles = {role: list(getattr(state, role)) for role in params.heldout.roles}  # students, teachers
    members = list(dict.fromkeys(m for role in roles.values() for m in role))
    if not pool:
        write_json(args.scores, {"metrics": {}, "verdicts": {}, "roles": roles})
        log.info("empty held-out pool: nothing scored")
        return 0
    try:
        with sandbox_for(params.verify) as sandbox:
            tokenizer, model = load_sampler(args.base_model, adapter_dirs(args.state, members), params)
            with timed(log, f"{len(members)} members x {len(pool)} held-out tasks"):
                metrics, table = score_members(params, model, tokenizer, pool, members, roles, sandbox)
    except IsolationError as error:
        log.error("%s", error)
        return 3
    write_json(args.scores, {"metrics": metrics, "verdicts": table, "roles": roles})
    log.info("held-out accuracy: %s", {m: metrics[f"heldout.{m}.accuracy"] for m in [*members, *roles]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
