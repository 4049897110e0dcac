"""Generation-0 proposer validity on the real base model: how many proposals the verifier accepts.

Builds the same proposer prompts the propose stage builds (from the seed buffer the init stage
verifies), samples them from the bare base model (a generation-0 adapter is the base model: PEFT
initialises B = 0), parses and verifies them, and prints validity per task type and reason.
A measurement tool for prompt work; the propose/verify stages are the production path.

    .venv/bin/python perf/proposer_validity.py --base-model results/base_model \
        --per-type 8 --types code_o code_i code_f --json results/perf_proposer_validity.json
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from populora.config import TASK_TYPES, load_params
from populora.core.io import write_json
from populora.lm.model import load_base
from populora.lm.sampling import GenRow, run_plans
from populora.tasks.prompts import chat_wrapper
from populora.tasks.roles import (
    proposal_rows,
    proposer_jobs,
)
from populora.tasks.tasks import buffer_entry, is_valid_task, seed_proposals
from populora.verifier import verify_rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--base-model", default="results/base_model")
    parser.add_argument("--per-type", type=int, default=8, help="proposals per task type")
    parser.add_argument("--types", nargs="+", default=list(TASK_TYPES), choices=TASK_TYPES)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--show", action="store_true", help="print every proposal and its verdict")
    parser.add_argument("--json", default=None, help="also write the figures here")
    args = parser.parse_args()

    params = load_params(args.params)
    cfg = params.propose
    buffer = [
        buffer_entry(row) for row in verify_rows(seed_proposals(params.buffer.seeds), **params.verify.model_dump())
    ]
    tokenizer, model = load_base(args.base_model, dtype=params.model.dtype, device=params.model.device)
    jobs = proposer_jobs(
        ["base"],
        buffer,
        per_type=args.per_type,
        references=cfg.references,
        n_inputs=cfg.code_f_inputs,
        mode=cfg.mode,
        chat=chat_wrapper(tokenizer),
        rng=random.Random(args.seed),
        arm="perf",
        gen=0,
    )
    jobs = [(meta, plan) for meta, plan in jobs if meta["type"] in args.types]
    start = time.perf_counter()
    results = run_plans(
        model,
        tokenizer,
        [GenRow(plan, None) for _, plan in jobs],
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        batch_size=cfg.batch_size,
        seed=args.seed,
        desc="propose",
    )
    seconds = time.perf_counter() - start
    verified = verify_rows(
        proposal_rows(jobs, results, mode=cfg.mode, n_inputs=cfg.code_f_inputs), **params.verify.model_dump()
    )

    figures: dict = {"mode": cfg.mode, "seconds_generating": round(seconds, 1), "per_type": {}}
    for task_type in args.types:
        of_type = [row for row in verified if row["type"] == task_type]
        reasons = Counter(row.get("parse_reason") or row["reason"] for row in of_type if not is_valid_task(row))
        valid = sum(is_valid_task(row) for row in of_type)
        figures["per_type"][task_type] = {"valid": valid, "proposals": len(of_type), "reasons": dict(reasons)}
        print(f"{task_type}: {valid}/{len(of_type)} valid; failures {dict(reasons)}")
    total_valid = sum(v["valid"] for v in figures["per_type"].values())
    figures["validity"] = round(total_valid / max(len(verified), 1), 3)
    print(f"overall: {total_valid}/{len(verified)} = {figures['validity']:.0%} valid; {seconds:.0f} s generating")
    if args.show:
        for row in verified:
            reason = row.get("parse_reason") or row["reason"]
            print(f"--- {row['type']} valid={is_valid_task(row)} reason={reason} {row.get('reason_detail') or ''}")
            print(row["program"])
            print("INPUTS:", row["inputs"], "MESSAGE:", row.get("message"))
    if args.json:
        write_json(args.json, figures)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
