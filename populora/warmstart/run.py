"""The warm start from start to end: verified tasks, the fine-tune, the merged model and its record.

    record = make_warm_base(params, "results/base_model", staging, sandbox, log)

With `warm_start.enabled`, the train split's first `warm_start.examples` verified tasks of `warm_start.types`
(`populora.verifier.families`) become examples in the solver's exact format (`populora.warmstart.examples`),
one LoRA adapter is fine-tuned on them (`populora.warmstart.train`) and folded into the base, and the folder
written is a complete model (`AutoModelForCausalLM.from_pretrained`). Disabled (paper scale), the folder holds
the base's own files, hard-linked. Either way the record says what was done: per-step loss and answer
accuracy, tasks and what was dropped, wall time, tokens and tokens per second.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

from populora.core.io import link_or_copy, write_jsonl

TASKS_FILE = "warm_start_tasks.jsonl"  # beside the merged weights: what the model was trained on


def link_base(base_dir: Path, out_dir: Path) -> None:
    """`out_dir` holding `base_dir`'s files, hard-linked (no second copy of the weights on the same disk)."""
    for path in sorted(base_dir.iterdir()):
        if path.is_file():
            link_or_copy(path, out_dir / path.name)


def verified_inputs(params, sandbox, counts: Counter | None = None) -> tuple[list[dict], list[dict]]:
    """The verified training tasks (the train split's first `warm_start.examples` of `warm_start.types`) and the
    seed tasks their prompts' worked examples are drawn from: every verified seed, as the pool's prompts show
    them, whatever `propose.reject_copyable` says (a proposal filter must not change the frozen base)."""
    from populora.heldout.pool import worked_example_seeds
    from populora.verifier.families import verified_tasks

    cfg = params.warm_start
    tasks = verified_tasks(
        "train", cfg.examples, seed=cfg.seed, config=params.verify, sandbox=sandbox, types=cfg.types, counts=counts
    )
    return tasks, worked_example_seeds(params, sandbox)


def make_warm_base(params, base_dir: str | Path, out_dir: str | Path, sandbox, log: logging.Logger) -> dict:
    """Fill `out_dir` (an empty staging folder) with the warm base; returns the stage's record."""
    base_dir, out_dir = Path(base_dir), Path(out_dir)
    cfg = params.warm_start
    if not cfg.enabled:
        link_base(base_dir, out_dir)
        log.info("warm_start.enabled is false: the warm base is the base itself (%s, hard-linked)", base_dir)
        return {"enabled": False}
    started = time.monotonic()
    import torch

    from populora.lm.adapters import normalize_config
    from populora.lm.dtype import resolve_dtype
    from populora.lm.model import load_base
    from populora.tasks.prompts import chat_wrapper
    from populora.verifier.families import type_counts
    from populora.warmstart.examples import answer_budget, build_examples, encode_example
    from populora.warmstart.train import adapter_folder, add_lora, merge_into_base, train

    counts: Counter = Counter()
    tasks, seeds = verified_inputs(params, sandbox, counts)
    verified_s = time.monotonic() - started
    log.info(
        "%d verified training tasks %s in %.1f s (candidates dropped: %s)",
        len(tasks),
        type_counts(tasks),
        verified_s,
        {k: v for k, v in counts.items() if k not in ("candidates", "kept")},
    )
    dtype, reason = resolve_dtype(cfg.dtype, params.model.device)  # for the record; load_base logs its choice
    tokenizer, model = load_base(base_dir, dtype=cfg.dtype, device=params.model.device)
    budget = answer_budget(tasks, tokenizer)
    if budget > params.solve.max_new_tokens:
        raise ValueError(
            f"solve.max_new_tokens = {params.solve.max_new_tokens} cannot hold the longest warm-start "
            f"answer ({budget} tokens with its closing fence). Fix: raise solve.max_new_tokens to "
            f"{budget} or more."
        )
    examples = build_examples(
        tasks,
        seeds,
        chat=chat_wrapper(tokenizer),
        worked_examples=params.solve.worked_examples,
        seed=cfg.seed,
        mode=params.solve.mode,
    )
    rows = [encode_example(e, tokenizer) for e in examples]
    peft_model = add_lora(model, rank=cfg.rank, alpha=cfg.alpha, target_modules=list(cfg.target_modules), seed=cfg.seed)

    def on_step(record: dict) -> None:
        if record["step"] % 10 == 0:
            log.info(
                "step %d: loss %.3f, answer-token accuracy %.3f, exact %.3f (%.1f s)",
                record["step"],
                record["loss"],
                record["token_accuracy"],
                record["exact"],
                record["seconds"],
            )

    torch.manual_seed(cfg.seed)
    trained_at = time.monotonic()
    steps = train(
        peft_model,
        rows,
        batch_size=cfg.batch_size,
        micro_batch=cfg.micro_batch,
        learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        pad_id=tokenizer.pad_token_id,
        on_step=on_step,
    )
    train_s = time.monotonic() - trained_at
    adapter = out_dir / "_adapter"
    peft_model.save_pretrained(str(adapter))
    normalize_config(adapter_folder(adapter))  # target_modules in a stable order (byte-identical reruns)
    merged_at = time.monotonic()
    merge_into_base(base_dir, adapter_folder(adapter), out_dir)
    merge_s = time.monotonic() - merged_at
    _move_adapter(adapter, out_dir / "warm_start_adapter")
    write_jsonl(out_dir / TASKS_FILE, tasks)
    tokens = sum(s["tokens"] for s in steps)
    last = steps[-min(5, len(steps)) :]
    return {
        "enabled": True,
        "examples": len(rows),
        "tasks": type_counts(tasks),
        "dropped": dict(sorted(counts.items())),
        "families": dict(sorted(Counter(t["family"] for t in tasks).items())),
        "dtype": dtype,
        "dtype_reason": reason,
        "answer_budget_tokens": budget,
        "steps": steps,
        "tokens": tokens,
        "answer_tokens": sum(s["answer_tokens"] for s in steps),
        "final": {k: round(sum(s[k] for s in last) / len(last), 5) for k in ("loss", "token_accuracy", "exact")},
        "wall_s": round(time.monotonic() - started, 1),
        "train_s": round(train_s, 1),
        "verify_s": round(verified_s, 1),
        "merge_s": round(merge_s, 1),
        "tokens_per_s": round(tokens / train_s, 1) if train_s else None,
        "settings": cfg.model_dump(mode="json"),
    }


def _move_adapter(saved: Path, dst: Path) -> None:
    """Keep the adapter beside the merged weights (its own record of the fine-tune), as a plain PEFT folder."""
    import shutil

    from populora.warmstart.train import adapter_folder

    shutil.move(str(adapter_folder(saved)), str(dst))
    shutil.rmtree(saved, ignore_errors=True)
