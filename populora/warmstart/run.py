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
from populora.core.paths import WARM_START_ADAPTER

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
    from populora.lm.dtype import resolve_dtype
    from populora.lm.model import load_base
    from populora.verifier.families import type_counts
    from populora.warmstart.train import add_lora

    counts: Counter = Counter()
    verifying = time.monotonic()  # after the imports above (torch's among them): verify_s is the sandbox's time
    tasks, seeds = verified_inputs(params, sandbox, counts)
    verify_s = time.monotonic() - verifying
    _log_verified(log, tasks, counts, verify_s)
    if not tasks:
        raise ValueError(no_tasks_message(counts))
    dtype, reason = resolve_dtype(cfg.dtype, params.model.device)  # for the record; load_base logs its choice
    tokenizer, model = load_base(base_dir, dtype=cfg.dtype, device=params.model.device)
    budget = _checked_answer_budget(params, tasks, tokenizer)
    rows = _training_rows(params, tasks, seeds, tokenizer)
    peft_model = add_lora(model, rank=cfg.rank, alpha=cfg.alpha, target_modules=list(cfg.target_modules), seed=cfg.seed)
    steps, train_s = _fine_tune(cfg, peft_model, rows, tokenizer.pad_token_id, log)
    merge_s = _save_and_merge(peft_model, base_dir, out_dir)
    write_jsonl(out_dir / TASKS_FILE, tasks)
    return {
        "enabled": True,
        "examples": len(rows),
        "tasks": type_counts(tasks),
        "dropped": dict(sorted(counts.items())),
        "families": dict(sorted(Counter(t["family"] for t in tasks).items())),
        "dtype": dtype,
        "dtype_reason": reason,
        "answer_budget_tokens": budget,
        **_training_summary(steps, train_s),
        "wall_s": round(time.monotonic() - started, 1),
        "verify_s": round(verify_s, 1),
        "merge_s": round(merge_s, 1),
        "settings": cfg.model_dump(mode="json"),
    }


def no_tasks_message(counts: Counter) -> str:
    """Why the warm start cannot train (no generated task passed verification), with the fix."""
    dropped = {k: v for k, v in counts.items() if k not in ("candidates", "kept")}
    return (
        f"warm start: none of the {counts.get('candidates', 0)} generated tasks passed verification (dropped: "
        f"{dropped}), so there is nothing to fine-tune on. Fix: raise warm_start.examples, give warm_start.types "
        f"more types, or set warm_start.enabled: false"
    )


def _log_verified(log: logging.Logger, tasks: list[dict], counts: Counter, seconds: float) -> None:
    from populora.verifier.families import type_counts

    log.info(
        "%d verified training tasks %s in %.1f s (candidates dropped: %s)",
        len(tasks),
        type_counts(tasks),
        seconds,
        {k: v for k, v in counts.items() if k not in ("candidates", "kept")},
    )


def _checked_answer_budget(params, tasks: list[dict], tokenizer) -> int:
    """The tokens the longest gold answer takes with its closing fence; refused when `solve.max_new_tokens` is
    shorter (the solver could not write out the answers it is taught: a right answer cut off is graded wrong)."""
    from populora.warmstart.examples import answer_budget

    budget = answer_budget(tasks, tokenizer)
    if budget > params.solve.max_new_tokens:
        raise ValueError(
            f"solve.max_new_tokens = {params.solve.max_new_tokens} cannot hold the longest warm-start "
            f"answer ({budget} tokens with its closing fence). Fix: raise solve.max_new_tokens to "
            f"{budget} or more."
        )
    return budget


def _training_rows(params, tasks: list[dict], seeds: list[dict], tokenizer) -> list[dict]:
    """The tasks as token rows in the solver's exact prompt format (its chat wrapper, worked examples and mode)."""
    from populora.tasks.prompts import chat_wrapper
    from populora.warmstart.examples import build_examples, encode_example

    examples = build_examples(
        tasks,
        seeds,
        chat=chat_wrapper(tokenizer),
        worked_examples=params.solve.worked_examples,
        seed=params.warm_start.seed,
        mode=params.solve.mode,
    )
    return [encode_example(e, tokenizer) for e in examples]


def _fine_tune(cfg, peft_model, rows: list[dict], pad_id: int, log: logging.Logger) -> tuple[list[dict], float]:
    """Train the LoRA adapter on `rows` (`cfg`: params.warm_start); returns the per-step records and the
    seconds the training took."""
    import torch

    from populora.warmstart.train import train

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
    started = time.monotonic()
    steps = train(
        peft_model,
        rows,
        batch_size=cfg.batch_size,
        micro_batch=cfg.micro_batch,
        learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        pad_id=pad_id,
        on_step=on_step,
    )
    return steps, time.monotonic() - started


def _save_and_merge(peft_model, base_dir: Path, out_dir: Path) -> float:
    """Fold the trained adapter into the base's weights in `out_dir`, the adapter kept beside them; returns
    the seconds the merge took."""
    from populora.lm.adapters import normalize_config
    from populora.warmstart.train import adapter_folder, merge_into_base

    adapter = out_dir / "_adapter"
    peft_model.save_pretrained(str(adapter))
    normalize_config(adapter_folder(adapter))  # target_modules in a stable order (byte-identical reruns)
    started = time.monotonic()
    merge_into_base(base_dir, adapter_folder(adapter), out_dir)
    merge_s = time.monotonic() - started
    _move_adapter(adapter, out_dir / WARM_START_ADAPTER)
    return merge_s


def _training_summary(steps: list[dict], train_s: float) -> dict:
    """The fine-tune's part of the record: every step, the tokens trained on, the mean loss and accuracies of
    the last (up to) five steps, and the throughput."""
    tokens = sum(s["tokens"] for s in steps)
    last = steps[-min(5, len(steps)) :]
    return {
        "steps": steps,
        "tokens": tokens,
        "answer_tokens": sum(s["answer_tokens"] for s in steps),
        "final": {k: round(sum(s[k] for s in last) / len(last), 5) for k in ("loss", "token_accuracy", "exact")},
        "train_s": round(train_s, 1),
        "tokens_per_s": round(tokens / train_s, 1) if train_s else None,
    }


def _move_adapter(saved: Path, dst: Path) -> None:
    """Keep the adapter beside the merged weights (its own record of the fine-tune), as a plain PEFT folder."""
    import shutil

    from populora.warmstart.train import adapter_folder

    shutil.move(str(adapter_folder(saved)), str(dst))
    shutil.rmtree(saved, ignore_errors=True)
