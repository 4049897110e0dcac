"""Stage heldout_pool: make the held-out pool once (or reuse a committed one) and score the base model on it.

    python -m stages.heldout_pool --params params.yaml --base-model results/warm_base \
        --raw-base results/base_model --pool-file data/pool-v3/pool.jsonl \
        --pool results/heldout/pool.jsonl --base results/heldout/base.json

"The base" is the warm base (the frozen base of every stage after the warm start); `--raw-base`, the model
before it, is scored beside it, greedy (`heldout.raw_base.*`), when the warm start is on.

The pool (populora/heldout/pool.py) holds `heldout.per_type` verified code_o/code_i tasks (the
trained types among `propose.types`), each with its worked examples; `--base` gets the base model's
greedy verdicts on it (`{"metrics": ..., "verdicts": {"base": {task_id: 0|1}}, "size": ...}`), with
`heldout.samples` its pass rates, and per type the best constant answer's and the copy baseline's score on
the pool (`best_constant`; `heldout.constant.<type>.accuracy`, `heldout.copy.code_o.accuracy`,
`heldout.echo.code_i.accuracy`: every report
of pool scores prints them beside the scores). Round r
asks the base model, in the teacher's prompt, for one batch of proposals (`propose.batch_size`, split
over the types; on the 2-core CPU about 8 of 32 SmolLM2-135M proposals enter; references from the
seed tasks and the pool so far, seed derived from `heldout.seed`, not `base.seed`); rounds stop when
the pool is full or after `heldout.max_rounds` (a short pool is logged and kept). With
`--pool-file` (the DAG passes the file `heldout.pool_file` names, as an input) the pool is that file's (a
committed pool under data/), verified again, and no proposal is made. With `heldout.per_type: 0` both files are written empty and no model loads.
"""

from __future__ import annotations

import argparse
import logging

from populora.core.io import write_json, write_jsonl
from populora.core.paths import project_path
from populora.heldout.pool import pool_types, propose_pool, reuse_pool, verified_seeds
from populora.heldout.ruler import best_constant
from populora.heldout.scoring import pass_rate_metrics, pass_rates, score_members
from populora.lm.engines import load_sampler
from populora.verifier import IsolationError, sandbox_for
from stages._common import setup, stage_parser, timed


def constant_metrics(constant: dict) -> dict:
    """`heldout.constant.<type>.accuracy`, `heldout.copy.code_o.accuracy` and `heldout.echo.code_i.accuracy`: what a
    score on the pool stands beside (the best constant answer; the shown input copied as the output; the shown
    output handed back as the input)."""
    out = {}
    for task_type, row in constant.items():
        out[f"heldout.constant.{task_type}.accuracy"] = row["accuracy"]
        for kind in ("copy", "echo"):
            if f"{kind}_accuracy" in row:
                out[f"heldout.{kind}.{task_type}.accuracy"] = row[f"{kind}_accuracy"]
    return out


def check_pool_file(given: str | None, named: str | None) -> None:
    """The pool file the command passes must be the one the params name: a command rendered from other params
    (a dvc.yaml not re-rendered after `-S heldout.pool_file=...`) would otherwise score the wrong pool."""
    if (given is None) != (named is None) or (given and named and project_path(given) != project_path(named)):
        raise SystemExit(
            f"heldout_pool: the command passes --pool-file {given} but heldout.pool_file is {named}. "
            "Fix: python -m workflow.render_dvc (the DAG renders the pool file from the params), then run again."
        )


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    params, log = setup(args, "heldout_pool", chain=True)
    check_pool_file(args.pool_file, params.heldout.pool_file)
    if params.heldout.per_type == 0 or not pool_types(params.propose.types):
        write_jsonl(args.pool, [])
        write_json(args.base, {"metrics": {}, "verdicts": {}, "size": {}})
        log.info("no held-out pool (heldout.per_type: 0 or no code_o/code_i in propose.types)")
        return 0
    try:
        with sandbox_for(params.verify) as sandbox:
            seeds = verified_seeds(params, sandbox)
            tokenizer, model = load_sampler(args.base_model, {}, params)
            if args.pool_file:  # a pool made before: no proposals
                pool = reuse_pool(args.pool_file, params, sandbox, log)
            else:
                with timed(log, "building the held-out pool"):
                    pool = propose_pool(params, model, tokenizer, seeds, sandbox, log)
            metrics, table, rates = _score_base(params, model, tokenizer, pool, sandbox, log)
            with timed(log, "the best constant answer and the copy and echo baselines"):
                constant = best_constant(pool, params.verify, sandbox)
            raw = {}
            if args.raw_base and params.warm_start.enabled and pool:
                model = None  # one model at a time
                raw = _score_raw_base(args.raw_base, params, pool, sandbox, log)
    except IsolationError as error:  # a layer of verify.required_layers is missing
        log.error("%s", error)
        return 3
    write_jsonl(args.pool, pool)
    size = {t: sum(p["type"] == t for p in pool) for t in pool_types(params.propose.types)}
    write_json(
        args.base,
        {
            "metrics": metrics | constant_metrics(constant) | raw.get("metrics", {}),
            "verdicts": table,
            "pass_rates": rates,
            "size": size,
            "per_type": params.heldout.per_type,
            "best_constant": {tt: {k: v for k, v in row.items() if k != "solves"} for tt, row in constant.items()},
            "raw_base": raw.get("verdicts"),
        },
    )
    log.info("held-out pool of %d tasks %s; base accuracy %s", len(pool), size, metrics.get("heldout.base.accuracy"))
    return 0


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    for flag in ("--base-model", "--pool", "--base"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--raw-base", help="the raw base before the warm start, scored beside the base (greedy)")
    parser.add_argument(
        "--pool-file", help="a pool made before (the file heldout.pool_file names): reused, no proposals"
    )
    return parser.parse_args(argv)


def _score_base(params, model, tokenizer, pool: list[dict], sandbox, log: logging.Logger) -> tuple[dict, dict, dict]:
    """The base model's greedy metrics and verdict table on the pool, and with `heldout.samples` its pass rates
    (their metrics joined to the greedy ones; {} without samples)."""
    with timed(log, f"scoring the base model on {len(pool)} held-out tasks"):
        metrics, table = score_members(params, model, tokenizer, pool, [None], {}, sandbox)
    rates = {}
    if params.heldout.samples:
        with timed(log, f"the base model's {params.heldout.samples} answers a task"):
            rates = pass_rates(params, model, tokenizer, pool, [None], sandbox, samples=params.heldout.samples)
        metrics |= pass_rate_metrics(rates, pool, {})
    return metrics, table, rates


def _score_raw_base(raw_base: str, params, pool: list[dict], sandbox, log: logging.Logger) -> dict:
    """The raw base's (before the warm start) greedy `metrics`, named `heldout.raw_base.*`, and its `verdicts`."""
    raw_tokenizer, raw_model = load_sampler(raw_base, {}, params)
    with timed(log, f"scoring the raw base (before the warm start) on {len(pool)} held-out tasks"):
        raw_metrics, raw_table = score_members(params, raw_model, raw_tokenizer, pool, [None], {}, sandbox)
    return {
        "metrics": {k.replace("heldout.base.", "heldout.raw_base."): v for k, v in raw_metrics.items()},
        "verdicts": raw_table.get("base", {}),
    }


if __name__ == "__main__":
    raise SystemExit(main())
