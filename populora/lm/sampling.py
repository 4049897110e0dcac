"""Batched sampling of prompt plans, many LoRA adapters in one forward pass, with exact token records.

Rows of different adapters share each decode step: with a `populora.lm.multilora.MultiLoraModel`
every row runs through its own adapter (stacked factors, one forward per step); a plain model
serves rows without adapter. A plan's steps run in lockstep across rows: at step k every row that
has a k-th step appends its prefill and samples until one of its stop strings, EOS or its budget.

A row may carry a gold continuation (`GenRow.gold`, CRUXEval's gold answer): with a carried cache its
teacher-forced log-likelihood is scored in the same forward that prefills the prompt
(`score_continuations`), so the benchmark's paired likelihood measure costs no second prefill.

A batch's first prefill computes each distinct prompt once (a task's samples share it) and the
prefix every prompt of the batch begins with once per adapter (`populora.lm.prefix_cache`).

The sampler is our own decode loop (KV cache, left padding) so the policy gradient can be exactly
on-policy: `process_logits` turns raw logits into the log-probabilities the sampler draws from
(temperature, top-p, tokens suppressed at a block's first position), and the update calls the
same function on the same token ids in the same context (`populora.rl.update`).

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

import contextlib
import functools
import logging
from dataclasses import dataclass, field
from typing import TypedDict

import torch

from populora.core.progress import Progress
from populora.lm.prefix_cache import (
    CarriedCache,
    cheapest_order,
    contiguous_head,
    kv_key,
    score_continuations,
    select,
    shared_prefill,
)
from populora.tasks.plans import Plan

log = logging.getLogger(__name__)


@dataclass
class GenRow:
    plan: Plan
    adapter: str | None  # adapter name loaded on the MultiLoraModel, or None for the bare base model
    gold: str | None = None  # text whose teacher-forced log-likelihood after the first step's prefill
    # is scored in the same prefill (hf engine, carried cache): GenResult.gold


@dataclass
class GenResult:
    segments: list[dict] = field(default_factory=list)
    truncated: bool = False
    tokens_generated: int = 0
    gold: tuple[float, int] | None = None  # (summed natural-log prob of the row's gold tokens, their count)

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
    return [
        i
        for i, text in enumerate(texts)
        if i in special or text.lstrip(" \t").startswith(("`", "\n", "\r")) or not text.strip(" \t")
    ]


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


def process_logits(
    logits: torch.Tensor, temperature, top_p, *, suppress: torch.Tensor | None = None, keep: torch.Tensor | None = None
) -> torch.Tensor:
    """Log-probabilities the sampler draws from, [n, vocab], from raw logits [n, vocab].

    `temperature` and `top_p` are floats or [n] tensors; temperature 0 (greedy) scores at 1.
    `suppress` is a [n, vocab] bool mask of forbidden tokens. `keep` ([n] token ids) are never
    cut by top-p: the update passes the sampled ids so a nucleus that moved after an optimizer
    step cannot give a sampled token -inf. The sampler and the update both call this function.
    """
    logits = logits.float()
    temperature = torch.as_tensor(temperature, dtype=logits.dtype, device=logits.device)
    temperature = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    # x / 1 is x: at temperature 1 (and greedy) the division, a pass over [n, vocab] each way, is skipped
    scores = (
        logits / (temperature.unsqueeze(-1) if temperature.dim() else temperature)
        if (temperature != 1).any()
        else logits
    )
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


def stop_window(stops: tuple[str, ...]) -> int:
    """How many trailing tokens can hold a stop string: the decoded tail `sample_batch` checks."""
    return max((len(s) for s in stops), default=0) + 2  # tokens that can hold a stop string: >= 1 char each, + slack


@torch.no_grad()
def sample_batch(
    model,
    tokenizer,
    contexts: list[list[int]],
    *,
    budget: int,
    stops: tuple[str, ...],
    suppress_first: list[int] | None,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    adapters: list[str | None] | None = None,
    static_cache: bool = False,
    carried: CarriedCache | None = None,
    skip: list[bool] | None = None,
    share_prefixes: bool = True,
    compact: bool = False,
    reuse_carried: bool = True,
) -> list[Sampled]:
    """Sample continuations of `contexts` (token ids) in one batch with a KV cache.

    A row ends after the token that completes one of `stops` in its generated text, after EOS, or
    after `budget` tokens. Returns the sampled ids (the final token included) and the sampler's
    log-probability of each, computed by `process_logits`. `static_cache` preallocates the KV cache
    for context + budget (fixed shapes, what a compiled decode step on a GPU needs). `carried`
    (a `CarriedCache` of these rows) holds what an earlier call fed: only the rest of each context
    is fed now, and what this call feeds stays in it. Rows marked in `skip` sample nothing (an
    empty result): they keep their place in a carried batch. With `share_prefixes` an empty cache
    (a fresh one, or a carried one not filled yet) is filled by `populora.lm.prefix_cache.shared_prefill`:
    each distinct context once, the batch's common prefix once per adapter (same draws, the same
    scores up to float rounding); off, every row is prefilled on its own, as before.
    With `compact` the rows that stopped leave the batch (its cache, mask and adapter selection) once
    they are a quarter of it (`_worth_compacting`): the same tokens (the random draws kept per row), the
    scores up to float rounding, fewer rows a step. A `carried` cache gets them back at the end
    (`CarriedCache.park`, `restore`), for the plan's next step; with `reuse_carried` off (a plan's last
    step: the caller feeds it no more) it is left unusable instead, which saves restoring it. A static
    cache is never compacted.
    """
    if carried is not None and static_cache:
        raise ValueError("a carried cache is dynamic: static_cache applies to a fresh one only")
    device = next(model.parameters()).device
    contiguous_head(model)
    n, pad = len(contexts), tokenizer.pad_token_id
    done = list(skip) if skip else [False] * n
    adapters = adapters or [None] * n
    reuse_carried = reuse_carried and carried is not None and carried.can_park()
    if carried is None and share_prefixes and not static_cache:
        carried = CarriedCache(model, n)  # the shared prefill fills a carried cache's bookkeeping
    eos = set(_eos_ids(model, tokenizer))
    window = stop_window(stops)
    rows = [Sampled([], [], False) for _ in contexts]
    logits, cache, attention, positions = _first_logits(
        model,
        contexts,
        adapters,
        done,
        pad,
        device,
        budget=budget,
        static_cache=static_cache,
        carried=carried,
        share_prefixes=share_prefixes,
    )
    alive = list(range(n))  # the rows the cache holds, in order: all of them until the batch is compacted
    with contextlib.ExitStack() as selection:
        selection.enter_context(select(model, adapters))
        for step in range(budget):
            logits = logits[:, -1]
            mask = suppress_mask(len(alive), logits.shape[-1], suppress_first, device) if step == 0 else None
            token, scores = _draw(logits, temperature, top_p, generator, mask, alive=alive, rows=n)
            _take(
                rows,
                done,
                *_spread(token.tolist(), scores, alive, n),
                eos=eos,
                stops=stops,
                window=window,
                tokenizer=tokenizer,
            )
            if all(done) or step == budget - 1:
                break
            if compact and not static_cache and _worth_compacting(alive, done):
                if reuse_carried:
                    assert carried is not None
                    carried.park([k for k, row in enumerate(alive) if done[row]], [row for row in alive if done[row]])
                else:
                    carried = None  # its bookkeeping still counts every row: the caller does not use it again
                keep = torch.tensor([k for k, row in enumerate(alive) if not done[row]], device=device)
                alive = [alive[k] for k in keep.tolist()]
                cache.reorder_cache(keep)
                attention, positions, token = attention[keep], positions[keep], token[keep]
                selection.close()
                selection.enter_context(select(model, [adapters[row] for row in alive]))
            logits, attention, positions = _next_logits(
                model,
                token,
                done,
                alive,
                pad,
                device,
                cache=cache,
                attention=attention,
                positions=positions,
                carried=carried,
            )
    if reuse_carried and len(alive) < n:
        assert carried is not None
        carried.restore(alive)
    return rows


def _worth_compacting(alive: list[int], done: list[bool]) -> bool:
    """Drop the stopped rows from the batch once they are a quarter of it: a decode step's cost grows with
    its rows (SmolLM2 in bfloat16 on two cores: 249 ms at 32 rows, 93 ms at 8), a compaction copies the cache.

    >>> _worth_compacting([0, 1, 2, 3], [True, False, False, False])
    True
    >>> _worth_compacting(list(range(8)), [True] + [False] * 7)
    False
    """
    return sum(done[row] for row in alive) >= max(1, len(alive) // 4)


def _spread(tokens: list[int], scores: list[float], alive: list[int], rows: int) -> tuple[list[int], list[float]]:
    """A compacted batch's draws (one per row still in it) back at the rows' places among all `rows`;
    the others (stopped) get a placeholder `_take` skips."""
    if len(alive) == rows:
        return tokens, scores
    full_tokens, full_scores = [0] * rows, [0.0] * rows
    for row, token, score in zip(alive, tokens, scores):
        full_tokens[row], full_scores[row] = token, score
    return full_tokens, full_scores


def _draw(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    generator: torch.Generator,
    mask: torch.Tensor | None,
    *,
    alive: list[int] | None = None,
    rows: int | None = None,
) -> tuple[torch.Tensor, list[float]]:
    """One decode step's token per row, drawn from `process_logits` of the last position's `logits`
    (greedy at temperature 0, else `draw_categorical`), and the sampler's log-probability of each: what the
    update re-scores. In a compacted batch (`logits` of the rows `alive` of `rows`) every row draws the random
    number it would have had uncompacted: the same tokens, compacted or not."""
    logprobs = process_logits(logits, temperature, top_p, suppress=mask)
    if temperature > 0:
        token = draw_categorical(logprobs.exp(), generator, alive=alive if rows is not None else None, rows=rows)
    else:
        token = logprobs.argmax(-1)
    return token, logprobs.gather(-1, token.unsqueeze(-1)).squeeze(-1).tolist()


def draw_categorical(
    probs: torch.Tensor, generator: torch.Generator, *, alive: list[int] | None = None, rows: int | None = None
) -> torch.Tensor:
    """One index per row of `probs` ([n, vocab], each row summing to 1 up to rounding), drawn by inverse
    transform: one uniform number per row against the row's cumulative sum. A token of probability 0 (cut by
    top-p, suppressed) is never drawn. Where `probs` are the rows `alive` of a batch of `rows`, a uniform is
    drawn for every row of the batch and the alive ones kept, so each row gets the number it would have had in
    the full batch. torch.multinomial draws one sample by drawing an exponential for every entry of the
    vocabulary (`exponential_`): ~13% of a CPU decode step at SmolLM2's 49,152 tokens, ~20x this."""
    count = rows if rows is not None else probs.shape[0]
    uniform = torch.rand(count, 1, generator=generator, device=probs.device, dtype=probs.dtype)
    if alive is not None:
        uniform = uniform[torch.as_tensor(alive, device=probs.device)]
    cumulative = probs.cumsum(-1)
    # right=True: the first entry whose cumulative sum exceeds the draw, so no zero-probability entry is picked
    token = torch.searchsorted(cumulative, uniform * cumulative[:, -1:], right=True).squeeze(-1)
    return token.clamp_(max=probs.shape[-1] - 1)


def _next_logits(
    model,
    token: torch.Tensor,
    done: list[bool],
    alive: list[int],
    pad: int,
    device,
    *,
    cache,
    attention: torch.Tensor,
    positions: torch.Tensor,
    carried: CarriedCache | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Feed each row the cache holds (`alive`, of the whole batch's `done`) the token it just sampled, one
    position on: the next step's logits, with the grown attention mask and the positions fed. A row that
    stopped is fed a pad it never attends to (its context ends where it stopped), so the batch keeps its shape.
    A carried cache's mask grows for every row of the batch, those out of it (parked) included."""
    stopped = torch.tensor([done[row] for row in alive], device=device)
    token = torch.where(stopped, torch.full_like(token, pad), token)
    if carried is None:
        attention = torch.cat([attention, (~stopped).long().unsqueeze(-1)], dim=1)
    else:
        attention = carried.append(done, device)
        if len(alive) < len(done):
            attention = attention[torch.tensor(alive, device=attention.device)]
    positions = positions[:, -1:] + 1
    logits = model(
        input_ids=token.unsqueeze(-1),
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    ).logits
    return logits, attention, positions


def _first_logits(
    model,
    contexts: list[list[int]],
    adapters: list[str | None],
    done: list[bool],
    pad: int,
    device,
    *,
    budget: int,
    static_cache: bool,
    carried: CarriedCache | None,
    share_prefixes: bool,
):
    """The first forward of `sample_batch`, each row under its adapter: the logits of each context's last
    position, the KV cache, the attention mask and the positions to decode from. Three ways: the shared
    prefill into a carried cache (each distinct context once), a fresh left-padded batch (dynamic or static
    cache), or the rest of each context fed into a carried cache that holds the earlier part."""
    from transformers import Cache, DynamicCache, StaticCache

    cache: Cache
    if carried is not None and share_prefixes and not any(done):
        logits = shared_prefill(model, carried, contexts, adapters, tails=[1] * len(contexts), pad=pad, device=device)
        if logits is not None:
            positions = torch.tensor([[len(context) - 1] for context in contexts], device=device)
            return logits, carried.cache, carried.attention, positions
    if carried is None:
        width = max(len(c) for c in contexts)
        ids = torch.full((len(contexts), width), pad, dtype=torch.long)
        attention = torch.zeros((len(contexts), width), dtype=torch.long)
        for row, context in enumerate(contexts):
            ids[row, width - len(context) :] = torch.tensor(context)
            attention[row, width - len(context) :] = 1
        ids, attention = ids.to(device), attention.to(device)
        positions = (attention.cumsum(-1) - 1).clamp(min=0)
        cache = (
            StaticCache(config=model.config, max_cache_len=width + budget)
            if static_cache
            else DynamicCache(config=model.config)
        )
    else:
        ids, attention, positions = carried.feed(contexts, done, pad, device)
        cache = carried.cache
    with select(model, adapters):  # (the shared prefill selects its own: one adapter per distinct context)
        logits = model(
            input_ids=ids,
            attention_mask=attention,
            position_ids=positions,
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        ).logits
    return logits, cache, attention, positions


def _take(
    rows: list[Sampled],
    done: list[bool],
    tokens: list[int],
    scores: list[float],
    *,
    eos: set[int],
    stops: tuple[str, ...],
    window: int,
    tokenizer,
) -> None:
    """Append one decoding step's token and score to each row still going; a row is done after EOS or once
    its decoded tail (the last `window` tokens) holds a stop string."""
    for row, (t, score) in enumerate(zip(tokens, scores)):
        if done[row]:
            continue
        sampled = rows[row]
        sampled.ids.append(t)
        sampled.logprobs.append(score)
        if t in eos:
            sampled.hit_eos = done[row] = True
        elif stops:
            tail = tokenizer.decode(sampled.ids[-window:], skip_special_tokens=True, clean_up_tokenization_spaces=False)
            done[row] = any(stop in tail for stop in stops)


def _eos_ids(model, tokenizer) -> list[int]:
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if configured is None and hasattr(model, "model"):
        configured = getattr(getattr(model.model, "generation_config", None), "eos_token_id", None)
    configured = configured if isinstance(configured, list) else [configured]
    return sorted({i for i in [tokenizer.eos_token_id, *configured] if i is not None})


def _kept(tokenizer, ids: list[int], piece: str) -> int:
    """How many leading sampled ids decode to a prefix of the cut piece (the rest is the stop)."""
    for n in range(len(ids), -1, -1):
        if piece.startswith(tokenizer.decode(ids[:n], clean_up_tokenization_spaces=False)):
            return n
    return 0


def _encode(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


class _Sampling(TypedDict):
    """One plan step's sampling settings: sample_batch's (or an engine's sample_contexts') keywords."""

    budget: int
    stops: tuple[str, ...]
    temperature: float
    top_p: float
    suppress_first: list[int] | None
    adapters: list[str | None]


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
    carry_cache: bool = True,
    share_prefixes: bool = True,
    compact: bool = True,
    progress: Progress | None = None,
) -> list[GenResult]:
    """Execute every row's plan; returns one GenResult per row, in order.

    `model` is a transformers model (a `MultiLoraModel` when rows name adapters: the `hf` engine) or
    an engine with `sample_contexts` (`populora.lm.vllm_engine.VllmEngine`), which schedules its own
    batches: every row of a plan step then goes in at once (rows still grouped by budget and stops).
    With a transformers model, rows of the same plan shape (each step's budget and stops) and
    similar prompt length form a batch once and run all their steps together; with `carry_cache`
    the batch's KV cache goes from step to step (`CarriedCache`), else each step prefills the whole
    context again (the same batches and random draws: the results agree up to float rounding).
    With `share_prefixes` a batch's first prefill computes each distinct context once and the batch's
    common prefix once per adapter (`populora.lm.prefix_cache`): the same draws, scores equal up to
    float rounding. With `compact` the rows that stopped leave a batch in every plan step, the carried cache
    getting them back for the next (`sample_batch`'s `compact`): the same tokens, scores up to float rounding.

    Progress (`populora.core.progress`: a bar on a terminal, else a log line every 30 s) counts plan
    steps done, as `desc`; a caller that runs several passes of one job passes its own `progress`
    (counting the steps of all of them), which is updated and left open.
    """
    run = _PlanRun(model, tokenizer, rows, temperature, top_p, max_new_tokens, seed, share_prefixes, compact)
    own = progress is None
    run.progress = (
        progress
        if progress is not None
        else Progress(sum(len(r.plan.steps) for r in rows), desc, unit="steps", log=log)
    )
    try:
        if run.engine:  # the engine batches as it likes: one call per plan step and step kind
            for step_index in range(max((len(row.plan.steps) for row in rows), default=0)):
                active = [i for i in range(len(rows)) if run.plans.active(i, step_index)]
                active.sort(key=lambda i: (*run.step_key(i, step_index), len(run.plans.contexts[i])))
                for start, batch in _batches(active, len(active) or 1, key=lambda i: run.step_key(i, step_index)):
                    run.step(batch, step_index, start)
        else:
            order = sorted(range(len(rows)), key=lambda i: (run.shape(i), len(run.plans.contexts[i])))
            if temperature == 0 and share_prefixes:  # greedy: where a row sits draws nothing, so batch the cheapest way
                order = cheapest_order(
                    run.plans.contexts,
                    [kv_key(model, row.adapter) for row in rows],
                    [run.shape(i) for i in range(len(rows))],
                    lambda order: [batch for _, batch in _batches(order, batch_size, key=run.shape)],
                )
            for start, batch in _batches(order, batch_size, key=run.shape):
                carried = CarriedCache(model, len(batch)) if carry_cache else None
                for step_index in range(len(rows[batch[0]].plan.steps)):
                    run.step(batch, step_index, start, carried)
    except BaseException:
        if own:
            run.progress.close(failed=True)
        raise
    if own:
        run.progress.close()
    return run.plans.results


class _PlanRun:
    """One `run_plans` call: its settings, the rows' state (`_PlanState`) and one batch's plan step at a time."""

    progress: Progress

    def __init__(self, model, tokenizer, rows, temperature, top_p, max_new_tokens, seed, share_prefixes, compact):
        self.model, self.tokenizer, self.rows = model, tokenizer, rows
        self.temperature, self.top_p, self.max_new_tokens = temperature, top_p, max_new_tokens
        self.seed, self.share_prefixes, self.compact = seed, share_prefixes, compact
        self.engine = model if hasattr(model, "sample_contexts") else None
        self.device = None if self.engine else next(model.parameters()).device
        self.plans = _PlanState(tokenizer, rows)

    def step_key(self, i: int, step_index: int) -> tuple:
        step = self.rows[i].plan.steps[step_index]
        return step.max_tokens or self.max_new_tokens, step.stops, step.non_empty

    def shape(self, i: int) -> tuple:
        """Every step's key of row i: rows of one shape can run all their steps in one batch."""
        return tuple(self.step_key(i, k) for k in range(len(self.rows[i].plan.steps)))

    def step(self, batch: list[int], step_index: int, start: int, carried: CarriedCache | None = None) -> None:
        """Plan step `step_index` of the rows in `batch` (those still active): prefill, score the golds on the
        first step of a carried batch, sample, record; `start` (the batch's place) seeds its draws."""
        rows, plans = self.rows, self.plans
        skip = [not plans.active(i, step_index) for i in batch]
        if all(skip):
            return
        steps = [rows[i].plan.steps[step_index] for i, skipped in zip(batch, skip) if not skipped]
        for i, skipped in zip(batch, skip):
            if not skipped:
                plans.add_prefill(i, rows[i].plan.steps[step_index])
        budget = max(step.max_tokens or self.max_new_tokens for step in steps)
        sampling: _Sampling = {
            "budget": budget,
            "stops": steps[0].stops,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "suppress_first": block_enders(self.tokenizer) if steps[0].non_empty else None,
            "adapters": [rows[i].adapter for i in batch],
        }
        contexts = [plans.contexts[i] for i in batch]
        if carried is not None and step_index == 0 and any(rows[i].gold for i in batch):
            self._score_golds(batch, skip, contexts, carried, sampling["adapters"])
        # the batch's last plan step: its carried cache is not fed again, so it need not get its stopped rows back
        last = step_index == max(len(rows[i].plan.steps) for i in batch) - 1
        seed = self.seed * 1_000_003 + step_index * 7919 + start
        sampled = self._sample(contexts, seed, sampling, carried, skip, reuse_carried=not last)
        dropped = 0  # later steps of rows that stopped here (truncated): they count as done
        for position, (i, skipped, sample) in enumerate(zip(batch, skip, sampled)):
            if skipped:
                continue
            plans.record(i, step_index, sample, budget=budget, sampling=sampling)
            if plans.results[i].truncated:
                dropped += len(rows[i].plan.steps) - step_index - 1
            if carried is not None:
                carried.forget(position, len(plans.contexts[i]))
        self.progress.update(len(steps) + dropped)

    def _score_golds(self, batch, skip, contexts, carried: CarriedCache, adapters) -> None:
        """The gold continuation's log-likelihood of each row that has one, into its result."""
        golds = [
            _encode(self.tokenizer, gold) if gold and not skipped else None
            for gold, skipped in zip([self.rows[i].gold for i in batch], skip)
        ]
        scored = score_continuations(
            self.model,
            carried,
            contexts,
            golds,
            adapters,
            self.tokenizer.pad_token_id,
            self.device,
            share_prefixes=self.share_prefixes,
        )
        for i, score in zip(batch, scored):
            self.plans.results[i].gold = score

    def _sample(self, contexts, batch_seed: int, sampling: _Sampling, carried, skip, reuse_carried) -> list[Sampled]:
        if self.engine:
            return self.engine.sample_contexts(contexts, seed=batch_seed, **sampling)
        generator = torch.Generator(device=self.device).manual_seed(batch_seed)
        return sample_batch(
            self.model,
            self.tokenizer,
            contexts,
            generator=generator,
            carried=carried,
            skip=skip,
            share_prefixes=self.share_prefixes,
            compact=self.compact,
            reuse_carried=reuse_carried,
            **sampling,
        )


class _PlanState:
    """Per row: the token ids fed so far (`contexts`), the text they encode and the text the plan
    has written (segment texts); the ids text is always a prefix of the plan text."""

    def __init__(self, tokenizer, rows: list[GenRow]):
        self.tokenizer, self.rows = tokenizer, rows
        self.results, self.contexts, self.ids_texts, self.texts = [], [], [], []
        for row in rows:
            prompt_ids = _encode(tokenizer, row.plan.prompt)
            self.results.append(GenResult(segments=[{"text": row.plan.prompt, "train": False, "ids": prompt_ids}]))
            self.contexts.append(list(prompt_ids))
            self.ids_texts.append(row.plan.prompt)
            self.texts.append(row.plan.prompt)

    def active(self, i: int, step_index: int) -> bool:
        return len(self.rows[i].plan.steps) > step_index and not self.results[i].truncated

    def add_prefill(self, i: int, step) -> None:
        wanted = self.texts[i] + step.prefill
        if not wanted.startswith(self.ids_texts[i]):
            raise AssertionError(f"context drifted from the plan text in row {i}")
        prefill_ids = _encode(self.tokenizer, wanted[len(self.ids_texts[i]) :])
        self.results[i].segments.append({"text": step.prefill, "train": False, "ids": prefill_ids})
        self.contexts[i].extend(prefill_ids)
        self.ids_texts[i] = self.texts[i] = wanted

    def record(self, i: int, step_index: int, sample: Sampled, *, budget: int, sampling: _Sampling) -> None:
        tokenizer, step = self.tokenizer, self.rows[i].plan.steps[step_index]
        text = tokenizer.decode(sample.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        full = tokenizer.decode(sample.ids, clean_up_tokenization_spaces=False)
        piece, missed_stop = _cut(text, step.stops)
        later = self.rows[i].plan.steps[step_index + 1 :]
        following = later[0].prefill if later else None
        # Later steps see every sampled token when the plan's text goes on with them (the next
        # prefill repeats the stop, e.g. a closing fence), else the piece's tokens only.
        keep = (
            len(sample.ids)
            if following is None or (piece + following).startswith(full)
            else _kept(tokenizer, sample.ids, piece)
        )
        kept_text = (
            full if keep == len(sample.ids) else tokenizer.decode(sample.ids[:keep], clean_up_tokenization_spaces=False)
        )
        result = self.results[i]
        result.tokens_generated += len(sample.ids)
        result.segments.append(
            {
                "text": piece,
                "train": True,
                "ids": sample.ids,
                "keep": keep,
                "logprobs": [round(x, 6) for x in sample.logprobs],
                "sampling": {
                    "temperature": sampling["temperature"],
                    "top_p": sampling["top_p"],
                    "suppress_first": sampling["suppress_first"],
                },
            }
        )
        self.contexts[i].extend(sample.ids[:keep])
        self.ids_texts[i] += kept_text
        self.texts[i] += piece
        if not step.stops:
            result.truncated = not sample.hit_eos and len(sample.ids) >= budget
        elif missed_stop and step.must_stop:
            result.truncated = True
