"""The sampler-update log-prob gap in a dtype: what the update's on-policy step reports on real rollouts.

Samples `--problems` CRUXEval-O prompts x `--samples` answers (temperature 1, `--tokens` tokens) from
the base model in `--dtype` with one random q/k/v/o adapter stacked (the hf engine), then takes one
update step of that adapter (PEFT, LoRA weights float32) on them with advantages +-1, as the update
stage would (`populora.rl.update.importance_mode`: in bfloat16 the truncated importance correction is on),
and records `sampler_logprob_max_abs_diff` / `_mean_abs_diff` (0 up to rounding in float32):

    OMP_NUM_THREADS=1 python perf/sampler_gap.py --base-model results/base_model --dtype bfloat16 \
        --json perf/measured/sampler_gap_bfloat16.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", required=True)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--problems", type=int, default=4)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)

    from accelerate import Accelerator

    from populora.bench import cruxeval
    from populora.config import UpdateSection
    from populora.lm.adapters import create_adapters
    from populora.lm.dtype import runtime_record
    from populora.lm.model import attach_adapters, load_base, lora_config
    from populora.lm.multilora import attach_multilora
    from populora.lm.sampling import GenRow, run_plans
    from populora.rl.update import AdapterUpdate
    from populora.tasks.prompts import chat_wrapper

    data = Path(os.environ.get("POPULORA_BENCHMARKS", Path(__file__).resolve().parents[2] / "shared" / "benchmarks"))
    rows = cruxeval.load_rows(data)
    tasks = [cruxeval.task_row(row, "code_o") for row in rows[: args.problems]]
    pool = [cruxeval.task_row(row, "code_o") for row in rows[args.problems :]]
    tmp = Path(tempfile.mkdtemp())
    _, plain = load_base(args.base_model, dtype="float32", device="cpu")
    create_adapters(
        plain,
        ["noise"],
        tmp,
        lora_cfg=lora_config(8, 16.0, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj"]),
        seeds={"noise": 7},
        init_std=0.01,
    )
    tokenizer, base = load_base(args.base_model, dtype=args.dtype, device="cpu")
    sampler = attach_multilora(base, {"noise": tmp / "noise"})
    built = cruxeval.plans(
        tasks, pool, prompt="project", mode="scaffolded", worked_examples=1, chat=chat_wrapper(tokenizer)
    )
    gen_rows = [GenRow(plan, "noise") for plan, _ in built for _ in range(args.samples)]
    results = run_plans(
        sampler, tokenizer, gen_rows, temperature=1.0, top_p=1.0, max_new_tokens=args.tokens, batch_size=32, seed=0
    )
    rollouts = [{"segments": r.segments, "advantage": 1.0 if k % 2 else -1.0} for k, r in enumerate(results)]
    del sampler, base
    tokenizer, model = load_base(args.base_model, dtype=args.dtype, device="cpu")
    tokenizer.padding_side = "right"
    model = attach_adapters(model, {"noise": tmp / "noise"}, trainable="noise")
    config = UpdateSection(steps=1, learning_rate=1e-4, micro_batch=4, max_seq_len=1024)
    update = AdapterUpdate(Accelerator(cpu=True), model, tokenizer, "noise", config)
    stats = update.train(rollouts)
    report = {
        "runtime": runtime_record(args.dtype),
        "rollouts": len(rollouts),
        "trained_tokens": stats["trained_tokens"],
        "importance_sampling_mode": update.importance,
        "importance_sampling_cap": None if update.importance == "none" else config.importance_sampling_cap,
        "sampler_logprob_max_abs_diff": stats["sampler_logprob_max_abs_diff"],
        "sampler_logprob_mean_abs_diff": stats["sampler_logprob_mean_abs_diff"],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "runtime"}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
