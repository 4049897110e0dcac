"""Teacher-forced log-likelihood of a gold answer: a paired, continuous benchmark measure.

pass@1 at 135M moves by whole problems (on 200 CRUXEval problems a model and the base disagree on
about a dozen), so small effects hide in its noise. The log-probability the model gives the gold
answer, scored in the prompt the model is benchmarked with, moves for every problem: one forward
pass each, no sampling. `gold_logprobs` scores many (context, gold, adapter) items in batches, with
a `populora.lm.multilora.MultiLoraModel` (rows of different adapters in one batch, None = the base)
or a plain causal LM; the context and the gold text are tokenized apart, so the gold tokens are
exactly the ones scored. The result per item is the summed log-probability of the gold tokens
(natural log) and their count.

    >>> split_ids([[1, 2], [3]], [[4], [5, 6]])
    ([[1, 2, 4], [3, 5, 6]], [(2, 3), (1, 3)])
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from populora.core.progress import Progress

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class GoldItem:
    context: str  # the prompt as the model sees it, prefills included
    gold: str  # the continuation whose likelihood is scored
    adapter: str | None = None  # adapter of a MultiLoraModel; None = the bare base


def split_ids(contexts: list[list[int]], golds: list[list[int]]) -> tuple[list[list[int]], list[tuple[int, int]]]:
    """Each context's ids followed by its gold's, and the (start, end) of the gold in them."""
    rows, spans = [], []
    for context, gold in zip(contexts, golds):
        rows.append([*context, *gold])
        spans.append((len(context), len(context) + len(gold)))
    return rows, spans


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


@torch.no_grad()
def gold_logprobs(model, tokenizer, items: list[GoldItem], *, batch_size: int = 8) -> list[tuple[float, int]]:
    """(summed log-prob of the gold tokens, number of gold tokens) per item, in order. Only the gold
    positions get logits (`populora.rl.update.selected_logprobs`, at temperature 1)."""
    contexts = [_encode(tokenizer, item.context) for item in items]
    golds = [_encode(tokenizer, item.gold) for item in items]
    rows, spans = split_ids(contexts, golds)
    device = next(model.parameters()).device
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    out: list[tuple[float, int]] = [(0.0, 0)] * len(items)
    scored = [i for i in range(len(items)) if spans[i][0] > 0 and spans[i][1] > spans[i][0]]
    order = sorted(scored, key=lambda i: len(rows[i]))  # similar lengths share a batch
    with Progress(len(order), "gold answers' log-likelihood", unit="items", log=log) as progress:
        _score_batches(model, rows, spans, items, order, out, pad, device, batch_size, progress)
    return out


def _score_batches(model, rows, spans, items, order, out, pad, device, batch_size, progress) -> None:
    from populora.lm.multilora import MultiLoraModel
    from populora.rl.update import Sequence, selected_logprobs

    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        sequences = []
        for i in batch:
            first, end = spans[i]
            n = end - first
            sequences.append(
                Sequence(rows[i], i, list(range(first, end)), [1.0] * n, [1.0] * n, [None] * n, [None] * n)
            )
        adapters = [items[i].adapter for i in batch]
        if isinstance(model, MultiLoraModel):
            with model.select(adapters):
                logprobs = selected_logprobs(model.model, sequences, pad, device)
        else:
            if any(a is not None for a in adapters):
                raise ValueError("items name adapters but the model has none (use attach_multilora)")
            logprobs = selected_logprobs(model, sequences, pad, device)
        offset = 0
        for i, sequence in zip(batch, sequences):
            n = len(sequence.targets)
            out[i] = (float(logprobs[offset : offset + n].double().sum()), n)
            offset += n
        progress.update(len(batch))
