"""The warm start's budget sweep: learning rates x training budgets, chosen by transfer, not fit.

One run per learning rate trains on the train split's first `max(budgets)` verified tasks; since the data
order, the worked examples and the learning-rate schedule of a run's first n examples do not depend on what
follows (`populora.warmstart.examples.build_examples`, `populora.warmstart.train.learning_rate_at`), the
adapter saved after n examples *is* the warm start with `warm_start.examples: n`. Each checkpoint and the
raw base answer the validation programs (held-out families and unseen compositions the warm start never
saw, copy- and echo-solvable tasks excluded); the budget kept is the one with the highest mean pass rate
over the two types (`best`), not the lowest training loss.

Written under `out/`: `lr<rate>/steps.jsonl` (the loss curve), `lr<rate>/n<examples>/` (PEFT adapters),
`scores/<model>.json` (per-task verdicts), `sweep.json` (the table and the choice). Every piece is kept as
it finishes and reused when the command runs again.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from populora.core.io import read_json, write_json, write_jsonl
from populora.warmstart.measure import summarize

log = logging.getLogger("warm_start.sweep")


def run_name(rate: float) -> str:
    return f"lr{rate:g}"


def checkpoint_name(rate: float, examples: int) -> str:
    return f"{run_name(rate)}-n{examples}"


def train_run(
    base_dir: Path, rows: list[dict], out: Path, *, rate: float, budgets: list[int], cfg, dtype: str, tokenizer_pad: int
) -> None:
    """Train one learning rate over `rows` (encoded examples), saving the adapter after each budget."""
    import torch

    from populora.lm.model import load_base
    from populora.warmstart.train import add_lora, train

    folder = out / run_name(rate)
    if all((folder / f"n{n}" / "adapter_config.json").is_file() for n in budgets):
        return
    _, model = load_base(base_dir, dtype=dtype, device="cpu")
    peft_model = add_lora(model, rank=cfg.rank, alpha=cfg.alpha, target_modules=list(cfg.target_modules), seed=cfg.seed)
    records: list[dict] = []
    marks = {n // cfg.batch_size - 1: n for n in budgets}  # the step after which n examples are done

    def on_step(record: dict) -> None:
        records.append(record)
        if record["step"] % 10 == 0:
            log.info(
                "%s step %d: loss %.3f, answer-token accuracy %.3f (%.1f s)",
                run_name(rate),
                record["step"],
                record["loss"],
                record["token_accuracy"],
                record["seconds"],
            )
        if record["step"] in marks:
            peft_model.save_pretrained(str(folder / f"n{marks[record['step']]}"))
            write_jsonl(folder / "steps.jsonl", records)

    torch.manual_seed(cfg.seed)
    train(
        peft_model,
        rows[: max(budgets)],
        batch_size=cfg.batch_size,
        micro_batch=cfg.micro_batch,
        learning_rate=rate,
        warmup_steps=cfg.warmup_steps,
        pad_id=tokenizer_pad,
        on_step=on_step,
    )
    write_jsonl(folder / "steps.jsonl", records)


def score_checkpoints(
    params, base_dir: Path, out: Path, names: dict[str, Path], tasks: list[dict], sandbox, *, samples: int
) -> dict[str, dict]:
    """Per model (`base` and each checkpoint), its per-task verdicts on `tasks`, one model at a time (a
    stacked pass of every checkpoint would pay for all their LoRA terms on every row)."""
    from populora.warmstart.measure import score_models
    from populora.warmstart.train import adapter_folder

    scores = {}
    for name, adapter in {"base": None, **names}.items():
        path = out / "scores" / f"{name}.json"
        if not path.is_file():
            started = time.monotonic()
            if adapter is None:
                got = score_models(params, base_dir, {}, tasks, sandbox, samples=samples)["base"]
            else:
                got = score_models(
                    params, base_dir, {name: adapter_folder(adapter)}, tasks, sandbox, samples=samples, base=False
                )[name]
            write_json(path, {"verdicts": got, "samples": samples, "seconds": round(time.monotonic() - started, 1)})
            log.info("scored %s on %d validation tasks in %.0f s", name, len(tasks), time.monotonic() - started)
        scores[name] = read_json(path)["verdicts"]
    return scores


def best(table: dict[str, dict]) -> str:
    """The checkpoint with the highest mean over types of the validation pass rate (greedy breaks ties)."""

    def key(name: str):
        row = table[name]
        return (row["mean_pass_rate"], row["mean_greedy"])

    return max((n for n in table if n != "base"), key=key)


def sweep_table(scores: dict, tasks: list[dict], *, samples: int) -> dict[str, dict]:
    """model -> per-type greedy and pass rate on the validation tasks, and their means over the types."""
    summary = summarize(scores, tasks, samples=samples)
    types = sorted({t["type"] for t in tasks})
    table = {}
    for model, groups in summary.items():
        row = {f"{tt}.{m}": groups[tt][m] for tt in types for m in ("greedy", "pass_rate")}
        row["mean_pass_rate"] = round(sum(groups[tt]["pass_rate"] for tt in types) / len(types), 4)
        row["mean_greedy"] = round(sum(groups[tt]["greedy"] for tt in types) / len(types), 4)
        table[model] = row
    return table


def describe(table: dict[str, dict], chosen: str) -> str:
    return json.dumps({"chosen": chosen, "row": table[chosen]}, sort_keys=True)
