"""Batched sampling of prompt plans, many LoRA adapters in one forward pass, with exact token records.

Rows of different adapters share each decode step: with a `populora.lm.multilora.MultiLoraModel`
every row runs through its own adapter (stacked factors, one forward per step); a plain model
serves rows without adapter. A plan's steps run in lockstep across rows: at step k every row that
has a k-th step appends its prefill and samples until one of its stop strings, EOS or its budget.

The sampler is our own decode loop (KV cache, left padding) so the policy gradient can be exactly
on-policy: `process_logits` turns raw logits into the log-probabilities the sampler draws from
(temperature, top-p, tokens suppressed at a block's first position), and the update calls the
same function on the same token ids in the same context (`populora.selfplay.update`).

Every result keeps `segments`, self-describing JSON the update trains on:

    {"text": prompt,  "train": false, "ids": [...]}                  # tokens put into the context
    {"text": prefill, "train": false, "ids": [...]}
    {"text": piece,   "train": true,  "ids": [...], "keep": n, "logprobs": [...],
     "sampling": {"temperature": t, "top_p": p, "suppress_first": [...] | null}}

A generated segment's `ids` are every token the policy sampled, the one that completed the stop
string (or EOS) included, so stopping is trained too; `logprobs` are the sampler's own scores of
them. Its `text` is cut before the stop (what parsing sees). Later segments see only its first
`keep` ids (all of them when the next prefill continues the sampled text, e.g. a closing fence
the prefill repeats); the ids of the next segment then encode the rest of the text. The context of
any segment is therefore the concatenation of `ids[:keep]` of the segments before it.
"""

from __future__ import annotations

import functools
import logging
from dataclasses import dataclass, field

import torch
from tqdm import tqdm

from populora.lm.multilora import MultiLoraModel
from populora.lm.plans import Plan

log = logging.getLogger(__name__)


@dataclass
class GenRow:
    plan: Plan
    adapter: str | None  # adapter name loaded on the MultiLoraModel, or None for the bare base model


@dataclass
class GenResult:
    segments: list[dict] = field(default_factory=list)
    truncated: bool = False
    tokens_generated: int = 0

    @property
    def completion(self) -> str:
        """The assistant text: prefills and generated pieces, without the prompt."""
        return "".join(s["text"] for s in self.segments[1:])


def _cut(text: str, stops: tuple[str, ...]) -> tuple[str, bool]:
    """Text up to the earliest stop string, excluding it; second value True when none was reached.

    A stop that starts with a line break keeps that break in the text (it ends the line before it),
    so the next step's prefill starts on a fresh line.
    """
    found = [(index + stop.startswith("\n"), index) for stop in stops if (index := text.find(stop)) != -1]
    return (text[: min(found, key=lambda f: f[1])[0]], False) if found else (text, bool(stops))


@functools.lru_cache(maxsize=4)
def block_enders(tokenizer) -> list[int]:
    """Token ids that would leave a fenced block empty as its first token: backticks, line breaks,
    blank tokens and special tokens (EOS). A `non_empty` step suppresses them at its first position."""
    texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])
    special = set(tokenizer.all_special_ids)
    return [i for i, text in enumerate(texts)
            if i in special or text.lstrip(" \t").startswith(("`", "\n", "\r")) or not text.strip(" \t")]


def _batches(items: list[int], size: int, key) -> list[tuple[int, list[int]]]:
    """Consecutive chunks of at most `size` items that share `key` (a step's token budget and stop
    strings): a batch decodes until its longest budget, so mixing budgets would waste decode steps."""
    chunks: list[tuple[int, list[int]]] = []
    for position, item in enumerate(items):
        if chunks and len(chunks[-1][1]) < size and key(chunks[-1][1][0]) == key(item):
            chunks[-1][1].append(item)
        else:
            chunks.append((position, [item]))
    return chunks


def process_logits(logits: torch.Tensor, temperature, top_p, *, suppress: torch.Tensor | None = None,
                   keep: torch.Tensor | None = None) -> torch.Tensor:
    """Log-probabilities the sampler draws from, [n, vocab], from raw logits [n, vocab].

    `temperature` and `top_p` are floats or [n] tensors; temperature 0 (greedy) scores at 1.
    `suppress` is a [n, vocab] bool mask of forbidden tokens. `keep` ([n] token ids) are never
    cut by top-p: the update passes the sampled ids so a nucleus that moved after an optimizer
    step cannot give a sampled token -inf. The sampler and the update both call this function.
    """
    logits = logits.float()
    temperature = torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device)
    temperature = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    scores = logits / (temperature.unsqueeze(-1) if temperature.dim() else temperature)
    if suppress is not None:
        scores = scores.masked_fill(suppress, float("-inf"))
    top_p = torch.as_tensor(top_p, dtype=logits.dtype, device=logits.device)
    if bool((top_p < 1).any()):
        top_p = top_p.unsqueeze(-1) if top_p.dim() else top_p
        probs = torch.softmax(scores.detach(), dim=-1)
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        # a token is cut when the more likely ones already hold top_p of the mass (the first never is)
        cut_sorted = (sorted_probs.cumsum(-1) - sorted_probs) >= top_p
        cut = torch.zeros_like(cut_sorted).scatter(-1, order, cut_sorted)
        if keep is not None:
            cut[torch.arange(cut.shape[0], device=cut.device), keep] = False
        scores = scores.masked_fill(cut, float("-inf"))
    return torch.log_softmax(scores, dim=-1)


def suppress_mask(rows: int, vocab: int, ids: list[int] | None, device) -> torch.Tensor | None:
    if not ids:
        return None
    mask = torch.zeros((rows, vocab), dtype=torch.bool, device=device)
    mask[:, torch.tensor(ids, device=device)] = True
    return mask


@dataclass
class Sampled:
    ids: list[int]
    logprobs: list[float]
    hit_eos: bool


def _stop_window(stops: tuple[str, ...]) -> int:
    return max((len(s) for s in stops), default=0) + 2  # tokens that can hold a stop string: >= 1 char each, + slack


@torch.no_grad()
def sample_batch(model, tokenizer, contexts: list[list[int]], *, budget: int, stops: tuple[str, ...],
                 suppress_first: list[int] | None, temperature: float, top_p: float,
                 generator: torch.Generator, adapters: list[str | None] | None = None,
                 static_cache: bool = False) -> list[Sampled]:
    """Sample continuations of `contexts` (token ids) in one batch with a KV cache.

    A row ends after the token that completes one of `stops` in its generated text, after EOS, or
    after `budget` tokens. Returns the sampled ids (the final token included) and the sampler's
    log-probability of each, computed by `process_logits`. `static_cache` preallocates the KV cache
    for context + budget (fixed shapes, what a compiled decode step on a GPU needs).
    """
    from transformers import DynamicCache, StaticCache

    device = next(model.parameters()).device
    n, width = len(contexts), max(len(c) for c in contexts)
    pad = tokenizer.pad_token_id
    ids = torch.full((n, width), pad, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    for row, context in enumerate(contexts):
        ids[row, width - len(context):] = torch.tensor(context)
        attention[row, width - len(context):] = 1
    ids, attention = ids.to(device), attention.to(device)
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    eos = set(_eos_ids(model, tokenizer))
    window = _stop_window(stops)
    rows = [Sampled([], [], False) for _ in contexts]
    done = [False] * n
    cache = StaticCache(config=model.config, max_cache_len=width + budget) if static_cache \
        else DynamicCache(config=model.config)
    adapters = adapters or [None] * n
    selection = model.select(adapters) if isinstance(model, MultiLoraModel) else _no_adapters(adapters)
    with selection:
        out = model(input_ids=ids, attention_mask=attention, position_ids=positions, past_key_values=cache,
                    use_cache=True, logits_to_keep=1)
        for step in range(budget):
            logits = out.logits[:, -1]
            mask = suppress_mask(n, logits.shape[-1], suppress_first, device) if step == 0 else None
            logprobs = process_logits(logits, temperature, top_p, suppress=mask)
            if temperature > 0:
                token = torch.multinomial(logprobs.exp(), 1, generator=generator).squeeze(-1)
            else:
                token = logprobs.argmax(-1)
            scores = logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1).tolist()
            for row, (t, score) in enumerate(zip(token.tolist(), scores)):
                if done[row]:
                    continue
                sampled = rows[row]
                sampled.ids.append(t)
                sampled.logprobs.append(score)
                if t in eos:
                    sampled.hit_eos = done[row] = True
                elif stops:
                    tail = tokenizer.decode(sampled.ids[-window:], skip_special_tokens=True,
                                            clean_up_tokenization_spaces=False)
                    done[row] = any(stop in tail for stop in stops)
            if all(done) or step == budget - 1:
                break
            token = torch.where(torch.tensor(done, device=device), torch.full_like(token, pad), token)
            attention = torch.cat([attention, torch.ones((n, 1), dtype=attention.dtype, device=device)], dim=1)
            positions = positions[:, -1:] + 1
            out = model(input_ids=token.unsqueeze(-1), attention_mask=attention, position_ids=positions,
                        past_key_values=cache, use_cache=True)
    return rows


def _eos_ids(model, tokenizer) -> list[int]:
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if configured is None and hasattr(model, "model"):
        configured = getattr(getattr(model.model, "generation_config", None), "eos_token_id", None)
    configured = configured if isinstance(configured, list) else [configured]
    return sorted({i for i in [tokenizer.eos_token_id, *configured] if i is not None})


class _no_adapters:
    def __init__(self, adapters):
        if adapters and any(a is not None for a in adapters):
            raise ValueError("rows name adapters but the model has none; load them with "
                             "populora.lm.multilora.attach_multilora")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _kept(tokenizer, ids: list[int], piece: str) -> int:
    """How many leading sampled ids decode to a prefix of the cut piece (the rest is the stop)."""
    for n in range(len(ids), -1, -1):
        if piece.startswith(tokenizer.decode(ids[:n], clean_up_tokenization_spaces=False)):
            return n
    return 0


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def run_plans(
    model,
    tokenizer,
    rows: list[GenRow],
    *,
    temperature: float,
    top_p: float,
    max_new_tokens: int,
    batch_size: int,
    seed: int,
    desc: str = "generate",
) -> list[GenResult]:
    """Execute every row's plan; returns one GenResult per row, in order.

    `model` is a transformers model (a `MultiLoraModel` when rows name adapters: the `hf` engine) or
    an engine with `sample_contexts` (`populora.lm.vllm_engine.VllmEngine`), which schedules its own
    batches: every row of a plan step then goes in at once (rows still grouped by budget and stops).
    """
    engine = model if hasattr(model, "sample_contexts") else None
    device = None if engine else next(model.parameters()).device
    batch_size = (len(rows) or 1) if engine else batch_size
    results = []
    # Per row: the token ids fed so far, the text they encode, and the text the plan has written
    # (segment texts). The ids text is always a prefix of the plan text.
    contexts, ids_texts, texts = [], [], []
    for row in rows:
        prompt_ids = _encode(tokenizer, row.plan.prompt)
        results.append(GenResult(segments=[{"text": row.plan.prompt, "train": False, "ids": prompt_ids}]))
        contexts.append(list(prompt_ids))
        ids_texts.append(row.plan.prompt)
        texts.append(row.plan.prompt)
    n_steps = max((len(row.plan.steps) for row in rows), default=0)
    progress = tqdm(total=sum(len(row.plan.steps) for row in rows), desc=desc, unit="step", leave=False)
    for step_index in range(n_steps):
        active = [i for i, row in enumerate(rows) if len(row.plan.steps) > step_index and not results[i].truncated]
        # Same token budget and similar lengths together: less padding and fewer wasted decode steps.
        # Rows share a batch only when they share stop strings too (a row must not see another's stops).
        def batch_key(i: int, step_index: int = step_index) -> tuple:
            step = rows[i].plan.steps[step_index]
            return step.max_tokens or max_new_tokens, step.stops, step.non_empty

        active.sort(key=lambda i: (*batch_key(i), len(contexts[i])))
        for start, batch in _batches(active, batch_size, key=batch_key):
            steps = [rows[i].plan.steps[step_index] for i in batch]
            for i, step in zip(batch, steps):
                wanted = texts[i] + step.prefill
                if not wanted.startswith(ids_texts[i]):
                    raise AssertionError(f"context drifted from the plan text in row {i}")
                prefill_ids = _encode(tokenizer, wanted[len(ids_texts[i]):])
                results[i].segments.append({"text": step.prefill, "train": False, "ids": prefill_ids})
                contexts[i].extend(prefill_ids)
                ids_texts[i] = texts[i] = wanted
            suppress = block_enders(tokenizer) if steps[0].non_empty else None
            batch_seed = seed * 1_000_003 + step_index * 7919 + start
            budget = max(step.max_tokens or max_new_tokens for step in steps)
            sampling = {"budget": budget, "stops": steps[0].stops, "suppress_first": suppress,
                        "temperature": temperature, "top_p": top_p, "adapters": [rows[i].adapter for i in batch]}
            if engine:
                sampled = engine.sample_contexts([contexts[i] for i in batch], seed=batch_seed, **sampling)
            else:
                generator = torch.Generator(device=device).manual_seed(batch_seed)
                sampled = sample_batch(model, tokenizer, [contexts[i] for i in batch], generator=generator, **sampling)
            for i, step, sample in zip(batch, steps, sampled):
                text = tokenizer.decode(sample.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
                full = tokenizer.decode(sample.ids, clean_up_tokenization_spaces=False)
                piece, missed_stop = _cut(text, step.stops)
                later = rows[i].plan.steps[step_index + 1 :]
                following = later[0].prefill if later else None
                # Later steps see every sampled token when the plan's text goes on with them (the
                # next prefill repeats the stop, e.g. a closing fence), else the piece's tokens only.
                keep = len(sample.ids) if following is None or (piece + following).startswith(full) \
                    else _kept(tokenizer, sample.ids, piece)
                kept_text = full if keep == len(sample.ids) else tokenizer.decode(sample.ids[:keep],
                                                                                  clean_up_tokenization_spaces=False)
                result = results[i]
                result.tokens_generated += len(sample.ids)
                result.segments.append({
                    "text": piece, "train": True, "ids": sample.ids, "keep": keep,
                    "logprobs": [round(x, 6) for x in sample.logprobs],
                    "sampling": {"temperature": temperature, "top_p": top_p, "suppress_first": suppress},
                })
                contexts[i].extend(sample.ids[:keep])
                ids_texts[i] += kept_text
                texts[i] += piece
                if not step.stops:
                    result.truncated = not sample.hit_eos and len(sample.ids) >= budget
                elif missed_stop and step.must_stop:
                    result.truncated = True
            progress.update(len(batch))
    progress.close()
    return results
