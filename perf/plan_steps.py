"""Multi-step plans with and without the carried KV cache: a real propose stage's generation, timed.

`populora.lm.sampling.run_plans` carries a batch's KV cache from one plan step to the next
(`CarriedCache`), so a step feeds only what the plan added since the last instead of prefilling
the whole context again. This script builds the proposals a `propose` stage of a finished run
would generate (the run's params, the arm's state and buffer of that generation, the same seed:
`stages.propose`'s own calls) and generates them both ways, interleaved per repeat:

  carried   run_plans(..., carry_cache=True)   (what the stages do)
  fresh     run_plans(..., carry_cache=False)  (every step prefills its whole context)

It reports the median wall time of each, their ratio, the tokens fed to the model (prompt +
prefill + decode, rows x width of every forward call) and whether both gave the same tokens.

    .venv/bin/python perf/plan_steps.py RUN_DIR [--arm population] [--gen 0] \
        [--threads 1] [--repeats 2] [--types code_o code_i code_f] [--json OUT.json]

RUN_DIR is a checkout whose `results/` holds a finished run (e.g. a fresh clone after
`bash scripts/run_pipeline.sh`); --threads 1 is what a model stage gets with `model.device: cpu`.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from populora.config import load_params
from populora.core.io import write_json
from populora.core.seeds import derive_seed
from populora.core.state import adapter_dirs, load_buffer, load_state
from populora.lm.engines import load_sampler
from populora.lm.sampling import GenRow, run_plans
from populora.tasks.prompts import chat_wrapper
from populora.tasks.roles import proposer_jobs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--arm", default="population")
    parser.add_argument("--gen", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--types", nargs="+", default=None, help="task types to propose (default: the run's)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    params = load_params(args.run_dir / "params.yaml")
    results = args.run_dir / "results" / args.arm
    state_dir = results / ("init" if args.gen == 0 else f"gen{args.gen - 1:03d}/checkpoint")
    state = load_state(state_dir)
    tokenizer, model = load_sampler(
        args.run_dir / "results" / "base_model", adapter_dirs(state_dir, state.teachers), params
    )
    cfg = params.propose
    seed = derive_seed(params.base.seed, "propose", args.arm, args.gen)
    jobs = proposer_jobs(
        state.teachers,
        load_buffer(state_dir),
        per_type=cfg.per_type,
        references=cfg.references,
        n_inputs=cfg.code_f_inputs,
        mode=cfg.mode,
        chat=chat_wrapper(tokenizer),
        rng=random.Random(seed),
        arm=args.arm,
        gen=args.gen,
        types=tuple(args.types or cfg.types),
    )
    rows = [GenRow(plan, meta["teacher"]) for meta, plan in jobs]

    fed: list[int] = []
    forward = model.forward

    def counting(*a, **kw):
        fed.append(kw["input_ids"].numel())
        return forward(*a, **kw)

    model.forward = counting
    times: dict[str, list[float]] = {"carried": [], "fresh": []}
    tokens: dict[str, int] = {}
    outputs: dict[str, list] = {}
    for repeat in range(args.repeats):
        for name in ("carried", "fresh") if repeat % 2 == 0 else ("fresh", "carried"):
            fed.clear()
            start = time.perf_counter()
            out = run_plans(
                model,
                tokenizer,
                rows,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                max_new_tokens=cfg.max_new_tokens,
                batch_size=cfg.batch_size,
                seed=seed,
                desc=name,
                carry_cache=name == "carried",
            )
            times[name].append(time.perf_counter() - start)
            tokens[name] = sum(fed)
            outputs[name] = [[s["ids"] for s in r.segments] for r in out]
            print(f"repeat {repeat} {name}: {times[name][-1]:.1f} s, {tokens[name]} tokens fed", flush=True)
    median = {name: statistics.median(values) for name, values in times.items()}
    report = {
        "run_dir": str(args.run_dir),
        "arm": args.arm,
        "gen": args.gen,
        "threads": args.threads,
        "rows": len(rows),
        "types": sorted({meta["type"] for meta, _ in jobs}),
        "steps": sum(len(r.plan.steps) for r in rows),
        "times_s": times,
        "median_s": median,
        "ratio_carried_over_fresh": round(median["carried"] / median["fresh"], 3),
        "tokens_fed": tokens,
        "same_tokens": outputs["carried"] == outputs["fresh"],
        "same_rows": sum(a == b for a, b in zip(outputs["carried"], outputs["fresh"])),
    }
    print(
        f"{len(rows)} proposals ({', '.join(report['types'])}), {args.threads} thread(s): carried "
        f"{median['carried']:.1f} s, fresh {median['fresh']:.1f} s (ratio {report['ratio_carried_over_fresh']}); "
        f"tokens fed {tokens['carried']} vs {tokens['fresh']}; same tokens in {report['same_rows']}/{len(rows)} rows"
    )
    if args.json:
        write_json(args.json, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
