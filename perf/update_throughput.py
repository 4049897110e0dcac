"""The update's forward+backward tokens per second, its padding, and what the diagnostics' re-scoring costs.

Loads the base model (`--base-model`) in `--dtype`, one fresh adapter (q/k/v/o, rank 8, trainable,
float32), and trains it with `populora.rl.update.AdapterUpdate` on synthetic rollouts of the
solve shape: `--tasks` prompts of ~`--prompt-tokens` tokens (+-25%), `--samples` answers of
`--answer-tokens` each, advantages +-1. Micro-batches as params.yaml's update section (4 sequences,
4,096 padded tokens, longest first). Three runs: one step; `--steps` steps with each step's
diagnostics taken from the next step's forward (what the update does); the same steps re-scoring
after every step (before issue 48). Reports forward+backward tokens/s, padding, the re-scoring's
share of the steps' time, and the achieved GFLOP/s of the forward+backward (`model_flops`: 4 x the decoder's
linear weights per computed token, a prompt once per task where prompts are shared, plus the output head on the
trained tokens; attention's products left out, so a lower bound) to set beside perf/matmul_peak.py:

    python perf/update_throughput.py --base-model results/base_model --dtype float32 \
        --json perf/measured/update_throughput_float32.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def rollouts(args, vocab: int) -> list[dict]:
    import torch

    g = torch.Generator().manual_seed(0)
    out = []
    for task in range(args.tasks):
        low, high = int(args.prompt_tokens * 0.75), int(args.prompt_tokens * 1.25)
        prompt = torch.randint(3, vocab, (int(torch.randint(low, high + 1, (1,), generator=g)),), generator=g).tolist()
        for sample in range(args.samples):
            answer = torch.randint(3, vocab, (args.answer_tokens,), generator=g).tolist()
            out.append(
                {
                    "advantage": 1.0 if (task + sample) % 2 else -1.0,
                    "segments": [
                        {"text": "", "train": False, "ids": prompt},
                        {
                            "text": "",
                            "train": True,
                            "ids": answer,
                            "keep": len(answer),
                            "logprobs": None,
                            "sampling": {"temperature": 1.0, "top_p": 1.0, "suppress_first": None},
                        },
                    ],
                }
            )
    return out


def computed_tokens(data: list[dict], *, share: bool) -> int:
    """Tokens one step's forward computes: with shared prompts each task's prompt once (its rollouts hold one
    prompt list), else once per answer; every answer's tokens."""
    prompts = {id(row["segments"][0]["ids"]): len(row["segments"][0]["ids"]) for row in data}
    answers = sum(len(row["segments"][1]["ids"]) for row in data)
    per_answer = sum(len(row["segments"][0]["ids"]) for row in data)
    return (sum(prompts.values()) if share else per_answer) + answers


def model_flops(model, tokens: int, trained_tokens: int) -> float:
    """Forward+backward FLOPs over frozen weights: 2 (forward) + 2 (input gradient) per weight of the decoder's
    linear maps and computed token, and the same for the output head on the trained tokens only."""
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    linear = sum(
        m.weight.numel()
        for name, m in base.named_modules()
        if isinstance(m, torch.nn.Linear) and ".layers." in name and "lora_" not in name
    )
    head = base.get_output_embeddings().weight.numel()
    return 4.0 * linear * tokens + 4.0 * head * trained_tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", required=True)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--answer-tokens", type=int, default=48)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--json", type=Path, required=True)
    parser.add_argument(
        "--share-prompts",
        choices=["on", "off"],
        default="on",
        help="update.share_prompts: a task's prompt computed once for its answers (issue 56)",
    )
    parser.add_argument("--micro-batch", type=int, default=4, help="update.micro_batch (answers per micro-batch)")
    parser.add_argument(
        "--runs",
        nargs="+",
        default=["one_step", "chained", "rescore_every_step"],
        choices=["one_step", "chained", "rescore_every_step"],
    )
    args = parser.parse_args(argv)

    import torch
    from accelerate import Accelerator

    from populora.config import UpdateSection
    from populora.lm.adapters import create_adapters
    from populora.lm.dtype import runtime_record
    from populora.lm.model import attach_adapters, load_base, lora_config
    from populora.rl.update import AdapterUpdate

    tokenizer, model = load_base(args.base_model, dtype=args.dtype, device="cpu")
    tokenizer.padding_side = "right"
    tmp = Path(tempfile.mkdtemp())
    create_adapters(
        model,
        ["a"],
        tmp,
        lora_cfg=lora_config(8, 16.0, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj"]),
        seeds={"a": 0},
        init_std=0.0,
    )
    model = attach_adapters(model, {"a": tmp / "a"}, trainable="a")
    data = rollouts(args, model.config.vocab_size)
    report = {
        "runtime": runtime_record(args.dtype),
        "threads": torch.get_num_threads(),
        "rollouts": len(data),
        "share_prompts": args.share_prompts == "on",
        "micro_batch": args.micro_batch,
        "prompt_tokens": args.prompt_tokens,
        "answer_tokens": args.answer_tokens,
        "runs": {},
    }
    for name, steps, chained in (
        ("one_step", 1, True),
        ("chained", args.steps, True),
        ("rescore_every_step", args.steps, False),
    ):
        if name not in args.runs:
            continue
        AdapterUpdate.CHAIN_DIAGNOSTICS = chained
        update = AdapterUpdate(
            Accelerator(cpu=True),
            model,
            tokenizer,
            "a",
            UpdateSection(
                steps=steps,
                learning_rate=1e-4,
                micro_batch=args.micro_batch,
                max_seq_len=1024,
                max_tokens_per_micro_batch=4096,
                share_prompts=args.share_prompts == "on",
            ),
        )
        started = time.perf_counter()
        stats = update.train(data)
        wall = time.perf_counter() - started
        timings = update.timings
        tokens = sum(t["tokens"] for t in timings)
        padded = sum(t["padded_tokens"] for t in timings)
        train_s = sum(t["forward_backward_s"] for t in timings)
        rescore_s = sum(t["rescore_s"] for t in timings)
        computed = steps * computed_tokens(data, share=args.share_prompts == "on")
        flops = model_flops(model, computed, steps * len(data) * args.answer_tokens)
        report["runs"][name] = {
            "computed_tokens_per_step": computed // steps,
            "gflops_per_s": round(flops / train_s / 1e9, 2),
            "steps": steps,
            "micro_batches_per_step": stats["micro_batches"],
            "tokens_per_step": tokens // steps,
            "forward_backward_tokens_per_s": round(tokens / train_s, 1),
            "padding_share": round(1 - tokens / padded, 4),
            "forward_backward_s": round(train_s, 2),
            "rescore_s": round(rescore_s, 2),
            "rescore_share_of_steps": round(rescore_s / (train_s + rescore_s), 3),
            "rescore_over_one_forward_backward": round(rescore_s / (train_s / steps), 3),
            "wall_s": round(wall, 2),
            "logprob_change_positive": [row.get("logprob_change_positive") for row in stats["steps"]],
        }
        print(name, json.dumps(report["runs"][name]), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
