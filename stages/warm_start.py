"""Stage warm_start: fine-tune the base model on verified tasks it can learn from, merged into the warm base.

    python -m stages.warm_start --params params.yaml --base-model results/base_model \
        --warm-base results/warm_base --record results/warm_start.json

Every later stage uses the warm base as its frozen base (workflow/dag.py). With `warm_start.enabled` the
train split of the task families (populora/tasks/families.py) is verified in the sandbox and one LoRA
adapter is fine-tuned on it in the solver's exact prompt and answer format, then merged
(populora/warmstart/); disabled, the warm base is the base itself, hard-linked. The record holds the
loss curve and answer accuracy per step (plotted by the report) and the cost: wall, tokens, tokens/s.
"""

from __future__ import annotations

from populora.core.io import replace_dir, staging_dir, write_json
from populora.verifier import IsolationError, open_sandbox
from populora.warmstart.run import make_warm_base
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument("--base-model", required=True, help="the base model's HF folder")
    parser.add_argument("--warm-base", required=True, help="output: the warm base's HF folder")
    parser.add_argument("--record", required=True, help="output: what the warm start did (JSON)")
    args = parser.parse_args(argv)
    params, log = setup(args, "warm_start", alone=True)
    tmp = staging_dir(args.warm_base)
    try:
        sandbox = open_sandbox(params.verify, log) if params.warm_start.enabled else None
    except IsolationError as error:
        log.error("%s", error)
        return 3
    try:
        record = make_warm_base(params, args.base_model, tmp, sandbox, log)
    finally:
        if sandbox is not None:
            sandbox.close()
    replace_dir(tmp, args.warm_base)
    write_json(args.record, record)
    if record["enabled"]:
        log.info(
            "warm base ready in %s: %d examples, final loss %.3f, %.0f tokens/s, %.0f s in all",
            args.warm_base,
            record["examples"],
            record["final"]["loss"],
            record["tokens_per_s"] or 0,
            record["wall_s"],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
