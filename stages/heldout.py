"""Stage heldout: every member of a generation's checkpoint answers the held-out pool, greedy.

    python -m stages.heldout --params params.yaml --arm population --gen 0 --base-model results/base_model \
        --pool results/heldout/pool.jsonl --heldout-base results/heldout/base.json \
        --state results/population/gen000/checkpoint --scores results/population/gen000/heldout.json \
        --history results/dynamics/population/dynamics.json --steps results/dynamics/population/update_steps.json \
        --progress results/progress.json --tracking results/tracking

Members of the roles in `heldout.roles` answer. Writes `{"metrics": {heldout.<member|students|teachers>.accuracy, ...}, "verdicts": {member: {task_id: 0|1}},
"roles": {...}}` (populora/selfplay/heldout.py): the prompts are the pool's own (same worked examples
for every member, arm and generation), so verdicts pair task by task across arms and generations.
The accuracies (and the base's, from `--heldout-base`) go into generation g's row of the live history
(populora/report/live.py). An empty pool writes empty scores and loads no model.
"""

from __future__ import annotations

from populora.core.io import read_json, read_jsonl, write_json
from populora.core.state import adapter_dirs, load_state
from populora.lm.engines import load_sampler
from populora.selfplay.heldout import score_members
from populora.verifier import IsolationError, sandbox_for
from stages._common import setup, stage_parser, timed
from stages._live import add_live_flags, record_live


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--base-model", "--pool", "--heldout-base", "--state", "--scores"):
        parser.add_argument(flag, required=True)
    add_live_flags(parser)
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
    record_live(args, params.tracking, log, {"generation": args.gen, **metrics, **read_json(args.heldout_base)["metrics"]})
    log.info("held-out accuracy: %s", {m: metrics[f"heldout.{m}.accuracy"] for m in [*members, *roles]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
