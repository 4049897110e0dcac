"""The warm start's supervised fine-tune: one LoRA adapter trained on encoded examples, then merged into the base.

The loss is the mean cross-entropy over the answer tokens of a batch (the prompt and prefill are context
only); logits are computed at those positions alone (`populora.lm.model.decoder_and_head`). Each optimizer
step takes `batch_size` fresh examples, split into micro-batches of similar length; the learning rate
warms up linearly over the first `warmup_steps` steps and then stays constant (`learning_rate_at`). Every step
records its loss, its answer-token accuracy (argmax equals the gold token) and its exact-match rate (every
answer token right: the greedy answer would be the gold one), its tokens and seconds.

    peft_model = add_lora(model, rank=16, alpha=32, target_modules=[...], seed=0)
    steps = train(peft_model, rows, batch_size=16, micro_batch=8, learning_rate=1e-3, warmup_steps=10)
    merge_into_base(peft_model, "results/warm_base", tokenizer)
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

from populora.lm.model import decoder_and_head

log = logging.getLogger(__name__)
ADAPTER = "warm_start"


def add_lora(model, *, rank: int, alpha: float, target_modules: list[str], seed: int):
    """`model` wrapped with one fresh trainable LoRA adapter (PEFT's initialisation: B = 0, A seeded)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    config = LoraConfig(
        r=rank,
        lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates int; a float alpha works (scaling alpha / r)
        lora_dropout=0.0,
        target_modules=list(target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config, adapter_name=ADAPTER)
    for name, parameter in peft_model.named_parameters():
        parameter.requires_grad_("lora_" in name)
    return peft_model


def learning_rate_at(step: int, peak: float, warmup_steps: int) -> float:
    """Linear warm-up over the first `warmup_steps` optimizer steps, then constant: a run's first n steps do not
    depend on how many follow, so a shorter budget is a checkpoint of a longer run (the budget sweep).

    >>> [learning_rate_at(s, 1.0, 4) for s in (0, 1, 3, 9)]
    [0.25, 0.5, 1.0, 1.0]
    """
    return peak * min(1.0, (step + 1) / warmup_steps) if warmup_steps > 0 else peak


def micro_batches(rows: list[dict], size: int) -> list[list[dict]]:
    """Rows grouped `size` at a time by length (less padding), longest first."""
    ordered = sorted(rows, key=lambda r: -(len(r["context"]) + len(r["target"])))
    return [ordered[i : i + size] for i in range(0, len(ordered), size)]


def answer_scores(model, rows: list[dict], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, list[int]]:
    """(summed cross-entropy of the answer tokens, whether each answer token is the argmax, tokens per row)."""
    lengths = [len(r["context"]) + len(r["target"]) for r in rows]
    width = max(lengths)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    positions: list[int] = []
    row_index: list[int] = []
    targets: list[int] = []
    for k, row in enumerate(rows):
        sequence = row["context"] + row["target"]
        ids[k, : len(sequence)] = torch.tensor(sequence)
        attention[k, : len(sequence)] = 1
        start = len(row["context"])
        positions += range(start - 1, start - 1 + len(row["target"]))  # the logit at t - 1 predicts token t
        row_index += [k] * len(row["target"])
        targets += row["target"]
    ids, attention = ids.to(device), attention.to(device)
    rows_t, positions_t = torch.tensor(row_index, device=device), torch.tensor(positions, device=device)
    target_t = torch.tensor(targets, device=device)
    parts = decoder_and_head(model)
    if parts is None:
        logits = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[rows_t, positions_t]
    else:
        decoder, head = parts
        hidden = decoder(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
        logits = head(hidden[rows_t, positions_t])
    logits = logits.float()
    loss = F.cross_entropy(logits, target_t, reduction="sum")
    return loss, (logits.argmax(-1) == target_t).detach(), [len(r["target"]) for r in rows]


def train(
    model,
    rows: list[dict],
    *,
    batch_size: int,
    micro_batch: int,
    learning_rate: float,
    warmup_steps: int,
    max_grad_norm: float = 1.0,
    pad_id: int = 0,
    on_step: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Fine-tune the trainable (LoRA) weights of `model` on `rows` (`context`, `target` ids) in order, one
    optimizer step per `batch_size` rows (a last partial batch included). Returns one record per step."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable weights (add_lora first)")
    optimizer = torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)
    device = params[0].device
    steps = math.ceil(len(rows) / batch_size)
    records = []
    model.train()
    for step in range(steps):
        started = time.monotonic()
        batch = rows[step * batch_size : (step + 1) * batch_size]
        answer_tokens = sum(len(r["target"]) for r in batch)
        lr = learning_rate_at(step, learning_rate, warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        loss_sum, right, exact = 0.0, 0, 0
        for part in micro_batches(batch, micro_batch):
            loss, hits, lengths = answer_scores(model, part, pad_id, device)
            (loss / answer_tokens).backward()
            loss_sum += float(loss.detach())
            right += int(hits.sum())
            offsets = [0, *torch.tensor(lengths).cumsum(0).tolist()]
            exact += sum(bool(hits[a:b].all()) for a, b in zip(offsets, offsets[1:]))
        grad_norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
        optimizer.step()
        record = {
            "step": step,
            "examples": len(batch),
            "loss": round(loss_sum / answer_tokens, 5),
            "token_accuracy": round(right / answer_tokens, 5),
            "exact": round(exact / len(batch), 5),
            "learning_rate": lr,
            "grad_norm": round(grad_norm, 5),
            "answer_tokens": answer_tokens,
            "tokens": sum(len(r["context"]) + len(r["target"]) for r in batch),
            "seconds": round(time.monotonic() - started, 3),
        }
        records.append(record)
        if on_step:
            on_step(record)
    model.eval()
    return records


def merge_into_base(base_dir: str | Path, adapter_dir: str | Path, out_dir: str | Path) -> None:
    """The base model of `base_dir` in its own dtype, with the adapter of `adapter_dir` folded into its weights
    (W + scale * B A, in the base's precision, whatever dtype the adapter trained in), saved as a plain HF
    folder loadable with `AutoModelForCausalLM.from_pretrained(out_dir)`."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype="auto")
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    out_dir = Path(out_dir)
    merged.save_pretrained(out_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(base_dir).save_pretrained(out_dir)


def adapter_folder(folder: str | Path) -> Path:
    """The folder holding an adapter's `adapter_config.json`: `folder`, or the one subfolder PEFT saves a named
    adapter in (`save_pretrained` of an adapter called `warm_start` writes `folder/warm_start/`)."""
    folder = Path(folder)
    if (folder / "adapter_config.json").is_file():
        return folder
    inner = [p for p in folder.iterdir() if (p / "adapter_config.json").is_file()] if folder.is_dir() else []
    if len(inner) != 1:
        raise FileNotFoundError(f"no adapter_config.json in {folder} or in one subfolder of it")
    return inner[0]
