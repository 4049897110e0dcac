"""The real model's greedy CRUXEval answers with shared-prefix prefill against without (issue 48).

Loads the base model (`--base-model`, e.g. the base_model stage's folder) in `--dtype`, builds the
benchmark's own plans (project prompt, one worked example, scaffolded) for CRUXEval-O problems
`--start` .. `--start + --problems`, and runs them greedily through `populora.lm.sampling.run_plans`
with each row's gold answer (scored in the prefill, as the bench stage does), rows of the bare base and
of one random LoRA adapter (q/k/v/o, B ~ N(0, 0.01)) mixed, twice: `share_prefixes` on and off.
Reports whether every answer's token ids are equal, the largest difference of a recorded log-prob and
of a gold log-likelihood, both wall times, and a digest of the shared run's ids and scores (equal
digests across reruns: byte-identical results on this machine kind):

    python perf/shared_prefix_check.py --base-model results/base_model --dtype float32 \
        --json perf/measured/shared_prefix_check_float32.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--problems", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--only-shared", action="store_true", help="one run, shared (the rerun digest)")
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)

    from populora.bench import cruxeval
    from populora.lm.adapters import create_adapters
    from populora.lm.dtype import runtime_record
    from populora.lm.model import load_base, lora_config
    from populora.lm.multilora import attach_multilora
    from populora.lm.sampling import GenRow, run_plans
    from populora.tasks.prompts import chat_wrapper

    data = Path(os.environ.get("POPULORA_BENCHMARKS", Path(__file__).resolve().parents[2] / "shared" / "benchmarks"))
    rows = cruxeval.load_rows(data)
    scored = rows[args.start : args.start + args.problems]
    pool = rows[: args.start] + rows[args.start + args.problems :]
    tasks = [cruxeval.task_row(row, "code_o") for row in scored]
    pool_tasks = [cruxeval.task_row(row, "code_o") for row in pool]
    with tempfile.TemporaryDirectory() as tmp:
        _, plain = load_base(args.base_model, dtype="float32", device="cpu")
        create_adapters(
            plain,
            ["noise"],
            Path(tmp),
            lora_cfg=lora_config(8, 16.0, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj"]),
            seeds={"noise": 7},
            init_std=0.01,
        )
        tokenizer, model = load_base(args.base_model, dtype=args.dtype, device="cpu")
        model = attach_multilora(model, {"noise": Path(tmp) / "noise"})
    built = cruxeval.plans(
        tasks, pool_tasks, prompt="project", mode="scaffolded", worked_examples=1, chat=chat_wrapper(tokenizer)
    )
    gen_rows = []
    for adapter in (None, "noise"):
        for task, (plan, _) in zip(tasks, built):
            item = cruxeval.gold_item(task, plan, adapter, "project")
            gen_rows.append(GenRow(plan, adapter, item.gold))
    kwargs = dict(temperature=0.0, top_p=1.0, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size, seed=0)
    results, seconds = {}, {}
    for share in (True,) if args.only_shared else (True, False):
        start = time.perf_counter()
        results[share] = run_plans(model, tokenizer, gen_rows, share_prefixes=share, **kwargs)
        seconds[share] = round(time.perf_counter() - start, 2)
    shared = results[True]
    digest = hashlib.sha256(json.dumps([[r.segments, r.gold] for r in shared]).encode()).hexdigest()
    report = {
        "base_model": Path(args.base_model).name,
        "runtime": runtime_record(args.dtype),
        "problems": args.problems,
        "start": args.start,
        "rows": len(gen_rows),
        "batch_size": args.batch_size,
        "digest_shared": digest,
        "seconds_shared": seconds[True],
    }
    if not args.only_shared:
        alone = results[False]
        same = [[s["ids"] for s in a.segments] == [s["ids"] for s in b.segments] for a, b in zip(shared, alone)]
        gaps = [
            abs(x - y)
            for a, b in zip(shared, alone)
            for sa, sb in zip(a.segments, b.segments)
            for x, y in zip(sa.get("logprobs", []), sb.get("logprobs", []))
        ]
        gold_gaps = [abs(a.gold[0] - b.gold[0]) for a, b in zip(shared, alone) if a.gold and b.gold]
        report |= {
            "answers_equal": sum(same),
            "answers": len(same),
            "completions_equal": sum(a.completion == b.completion for a, b in zip(shared, alone)),
            "max_logprob_diff": max(gaps, default=0.0),
            "max_gold_loglik_diff": max(gold_gaps, default=0.0),
            "seconds_separate": seconds[False],
            "speedup": round(seconds[False] / seconds[True], 2),
        }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runtime"}, indent=1))
    return 0 if args.only_shared or report["answers_equal"] == report["answers"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
