"""The sampler's KV cache: a batch's cache carried across plan steps, prefixes shared when it is filled.

`CarriedCache` holds one batch's KV cache from one plan step to the next (`populora.lm.sampling`).
When it is first filled, `shared_prefill` computes every distinct context once instead of once per
row: rows with the same context and the same KV (the 8 answers a student samples for one task)
share one prefill, and a prefix that every context of the batch begins with (the instruction and
worked examples) is prefilled once per distinct KV. The rows' caches are then copies of those
(`DynamicCache.reorder_cache`), laid out as a fresh prefill would lay them out up to padding, so
decoding, `forget` and later steps work as before; the logits agree with a full prefill up to float
rounding (the same attention, other matmul shapes).

Which rows share a KV: a LoRA adapter changes the hidden states, so the keys and values of every
layer after its first adapted module; rows share only under the same adapter (`kv_key`), except that
an adapter whose B factors are all zero (PEFT's init: a member before its first update) computes
exactly the base model's numbers, so it shares with base rows.

Tests: tests/test_prefix_cache.py (python -m pytest -m "" -n 0 tests/test_prefix_cache.py -q).
"""

from __future__ import annotations

from typing import cast

import torch
from transformers.cache_utils import DynamicLayer

from populora.lm.multilora import MultiLoraModel

MIN_SHARED_PREFIX = 8  # a batch prefix shorter than this is not worth its own forward pass


def select(model, adapters: list[str | None]):
    """Context in which row i of every forward runs through `adapters[i]` (None: the base)."""
    return model.select(adapters) if isinstance(model, MultiLoraModel) else _no_adapters(adapters)


class _no_adapters:
    def __init__(self, adapters):
        if adapters and any(a is not None for a in adapters):
            raise ValueError(
                "rows name adapters but the model has none; load them with populora.lm.multilora.attach_multilora"
            )

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def contiguous_head(model) -> None:
    """Make the output head's input contiguous, once per model. A prefill keeps the logits of its last
    positions, `hidden[:, -k:]`, a strided view; torch's CPU linear then multiplies it as a batched
    matmul against the weight expanded per row, copying the whole [vocab, hidden] head once per row
    (in bfloat16 2.6 s of a 3.3 s prefill of 4 rows at SmolLM2's shape). Contiguous, it is one mm."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is None and hasattr(model, "model"):
        head = model.model.get_output_embeddings()
    if head is not None and not getattr(head, "_populora_contiguous", False):
        head.register_forward_pre_hook(lambda module, args: (args[0].contiguous(), *args[1:]))
        head._populora_contiguous = True


def kv_key(model, adapter: str | None) -> str | None:
    """Rows with equal keys and equal contexts have equal KV caches (bit for bit)."""
    if adapter is None or not isinstance(model, MultiLoraModel) or adapter in model.zero_adapters:
        return None
    return adapter


class GrowingLayer(DynamicLayer):
    """A `DynamicLayer` whose keys and values are views of a buffer with room to grow: a decode step
    writes its column in place instead of copying the whole cache (`torch.cat` was 45% of a bfloat16
    decode step at SmolLM2's solve shape). Same values, same shapes; a copy (reorder, a new batch
    size) or running out of room moves it to a new buffer, half again as long as needed."""

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        assert self.keys is not None  # initialized (reset clears keys and is_initialized together)
        length = self.get_seq_length()
        needed = length + key_states.shape[-2]
        buffer = getattr(self, "_buffer", None)
        if (
            buffer is None
            or needed > buffer[0].shape[-2]
            or buffer[0].shape[:2] != key_states.shape[:2]
            or (length and self.keys.data_ptr() != buffer[0].data_ptr())
        ):
            batch, heads, _, dim = key_states.shape
            room = needed + max(64, needed // 2)
            buffer = tuple(
                states.new_empty((batch, heads, room, states.shape[-1] if i else dim))
                for i, states in enumerate((key_states, value_states))
            )
            if length:
                buffer[0][:, :, :length] = self.keys
                buffer[1][:, :, :length] = self.values
            self._buffer = buffer
        buffer[0][:, :, length:needed] = key_states
        buffer[1][:, :, length:needed] = value_states
        self.keys, self.values = buffer[0][:, :, :needed], buffer[1][:, :, :needed]
        return self.keys, self.values


class CarriedCache:
    """One batch's KV cache carried from one plan step to the next, so that a step feeds only what
    the plan added since the last (the kept sampled tokens and the next prefill) instead of the
    whole context again: a code_f proposal is 11 steps over a ~440-token prompt.

    Row i's context token j sits in cache slot `slots[i][j]` and has position id j, as a fresh
    prefill would give it; every other slot (left padding, the pads fed to rows that stopped,
    sampled tokens a later step does not see: `forget`) is masked out, so each row attends to
    exactly its context, tokens in order."""

    def __init__(self, model, rows: int):
        from transformers import DynamicCache

        self.cache = DynamicCache(config=model.config)
        if all(type(layer) is DynamicLayer for layer in self.cache.layers):  # not subclasses: sliding
            self.cache.layers = [GrowingLayer() for _ in self.cache.layers]
        self.slots: list[list[int]] = [[] for _ in range(rows)]
        self.attention = torch.zeros((rows, 0), dtype=torch.long)
        # rows out of the batch for now (`park`): their original indices and each layer's (keys, values) then
        self._parked: list[tuple[list[int], list[tuple[torch.Tensor, torch.Tensor]]]] = []

    @property
    def width(self) -> int:
        return self.attention.shape[1]

    def can_park(self) -> bool:
        """Whether rows can leave this batch for a while (`park`): plain dynamic layers only (not sliding ones)."""
        return all(type(layer) in (DynamicLayer, GrowingLayer) for layer in self.cache.layers)

    def _states(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's (keys, values) now, of a cache that `can_park`."""
        layers = [cast(DynamicLayer, layer) for layer in self.cache.layers]
        return [(cast(torch.Tensor, layer.keys), cast(torch.Tensor, layer.values)) for layer in layers]

    def park(self, positions: list[int], rows: list[int]) -> None:
        """Keep a copy of what the cache holds for the batch rows at `positions` (the rows `rows` of the whole
        batch), which are about to leave it (a decode step's compaction, `cache.reorder_cache`): `restore` puts
        them back. Their bookkeeping stays: `append` gives them masked columns while they are out."""
        index = torch.tensor(positions)
        kept = [(keys[index], values[index]) for keys, values in self._states()]  # a copy (advanced index)
        self._parked.append((list(rows), kept))

    def restore(self, alive: list[int]) -> None:
        """The cache again holds every row of the batch in order: the rows `alive` (those the cache holds now,
        in order) and the parked ones, whose columns since they left are zeros, masked like a stopped row's."""
        if not self._parked:
            return
        for number, (layer, states) in enumerate(zip(self.cache.layers, self._states())):
            whole: list[torch.Tensor] = []
            for part, now in enumerate(states):  # keys, then values
                full = now.new_zeros((len(self.slots), *now.shape[1:]))
                full[alive] = now
                for rows, kept in self._parked:
                    parked = kept[number][part]
                    full[rows, :, : parked.shape[-2]] = parked
                whole.append(full)
            # a GrowingLayer moves them to a new buffer at its next update
            cast(DynamicLayer, layer).keys, cast(DynamicLayer, layer).values = whole
        self._parked = []

    def forget(self, row: int, length: int) -> None:
        """Row `row`'s context goes on after its first `length` tokens: later cached ones are masked."""
        dropped = self.slots[row][length:]
        del self.slots[row][length:]
        if dropped:
            self.attention[row, dropped] = 0

    def feed(self, contexts: list[list[int]], skip: list[bool], pad: int, device):
        """(input ids, attention mask, position ids) feeding each row the part of its context the
        cache does not hold yet, left-padded; the cache then holds every context whole."""
        for row, context in enumerate(contexts):
            if len(self.slots[row]) > len(context):
                raise AssertionError(f"row {row}: the cache holds more than its context")
            if not skip[row] and len(self.slots[row]) == len(context):
                self.forget(row, len(context) - 1)  # feed the last token again: its logits start the step
        chunks = [context[len(slots) :] for context, slots in zip(contexts, self.slots)]
        width = max(len(chunk) for chunk in chunks)
        ids = torch.full((len(chunks), width), pad, dtype=torch.long)
        fed = torch.zeros((len(chunks), width), dtype=torch.long)
        positions = torch.zeros((len(chunks), width), dtype=torch.long)
        for row, chunk in enumerate(chunks):
            start, first = width - len(chunk), len(self.slots[row])
            if chunk:
                ids[row, start:] = torch.tensor(chunk)
                fed[row, start:] = 1
                positions[row, start:] = torch.arange(first, first + len(chunk))
            positions[row, :start] = max(first - 1, 0)  # padding: masked out, any position will do
            self.slots[row].extend(range(self.width + start, self.width + width))
        self.attention = torch.cat([self.attention.to(device), fed.to(device)], dim=1)
        return ids.to(device), self.attention, positions.to(device)

    def append(self, stopped: list[bool], device) -> torch.Tensor:
        """One decode step fed a token per row: it joins the context of the rows still sampling."""
        for row, done in enumerate(stopped):
            if not done:
                self.slots[row].append(self.width)
        column = torch.tensor([[0 if done else 1] for done in stopped], dtype=torch.long, device=device)
        self.attention = torch.cat([self.attention.to(device), column], dim=1)
        return self.attention


def common_prefix(contexts: list[list[int]]) -> int:
    """Length of the longest token prefix that every context begins with."""
    first, length = contexts[0], min(len(c) for c in contexts)
    for context in contexts[1:]:
        mismatch = next((j for j in range(length) if context[j] != first[j]), length)
        length = min(length, mismatch)
    return length


@torch.no_grad()
def shared_prefill(
    model,
    carried: CarriedCache,
    contexts: list[list[int]],
    adapters: list[str | None],
    *,
    tails: list[int],
    pad: int,
    device,
) -> torch.Tensor | None:
    """Fill the empty `carried` with `contexts`, each distinct one computed once; returns the logits
    of the last `max(tails)` positions, [rows, max(tails), vocab], right-aligned (as a left-padded
    prefill's `logits_to_keep` would give), or None (nothing filled) when no row shares anything.

    Row i needs the logits of its last `tails[i]` positions: the prefix shared by the batch stops
    short of them, so they all come from the per-context forward. Three passes at most: the batch
    prefix once per distinct KV key, the distinct (key, rest of context) once each on a copy of its
    key's prefix cache, then every row's cache copied from its distinct context's."""
    if carried.width or any(not context for context in contexts):
        return None
    keys = [kv_key(model, adapter) for adapter in adapters]
    shared = _shared_length(contexts, tails)
    distinct: dict[tuple, int] = {}
    owner = [distinct.setdefault((key, tuple(context[shared:])), len(distinct)) for key, context in zip(keys, contexts)]
    if not shared and len(distinct) == len(contexts):
        return None
    firsts = [owner.index(u) for u in range(len(distinct))]  # a row of each distinct context
    distinct_keys, distinct_adapters = [keys[row] for row in firsts], [adapters[row] for row in firsts]
    if shared:
        _prefill_prefix(model, carried, contexts[0][:shared], distinct_keys, distinct_adapters, device)
    rests = [contexts[row][shared:] for row in firsts]
    logits, attention = _prefill_rests(
        model, carried, rests, distinct_adapters, shared=shared, keep=max(tails), pad=pad, device=device
    )
    return _copy_to_rows(carried, logits, attention, owner, [len(rest) for rest in rests], shared, device)


def _shared_length(contexts: list[list[int]], tails: list[int]) -> int:
    """How much of the batch's common prefix to prefill once: all of it, but short of the last `tails[i]`
    positions of each context (their logits come from the per-context forward), and none of it when
    that is below MIN_SHARED_PREFIX tokens.

    >>> _shared_length([list(range(20)), list(range(12)) + [0, 0]], [1, 1])
    12
    >>> _shared_length([list(range(20)), list(range(12)) + [0, 0]], [1, 7])
    0
    """
    shared = common_prefix(contexts)
    shared = min(shared, *(len(c) - tail for c, tail in zip(contexts, tails)))
    return shared if shared >= MIN_SHARED_PREFIX else 0


def prefill_cost(contexts: list[list[int]], keys: list) -> int:
    """Tokens `shared_prefill` feeds to fill one batch: the batch's common prefix once per distinct KV key,
    then each distinct (key, rest of context) left-padded to the longest rest.

    >>> prefill_cost([list(range(20)) + [1], list(range(20)) + [2, 3]], [None, None])
    24
    >>> prefill_cost([list(range(20)) + [1], list(range(20)) + [1]], [None, "a"])
    42
    """
    shared = _shared_length(contexts, [1] * len(contexts))
    distinct = {(key, tuple(context[shared:])) for key, context in zip(keys, contexts)}
    return shared * len(set(keys)) + len(distinct) * max(len(rest) for _, rest in distinct)


PREFIX_KEYS = (0, 16, 32, 64, 128)  # the prompt tokens a candidate order groups rows by before their length


def cheapest_order(contexts: list[list[int]], keys: list, groups: list, batches) -> list[int]:
    """The order of rows (indices into `contexts`; `keys`: each row's KV key, `groups`: what a batch's rows
    must share, sorted first) whose batches a shared prefill fills with the fewest tokens (`prefill_cost`).
    `batches(order)` cuts an order into batches (lists of indices) as the caller will. The candidates sort
    by group, the first k prompt tokens, then length, for k in `PREFIX_KEYS`: k = 0 is the plain length
    order (the first candidate, kept on a tie);
    a larger k puts prompts with the same instruction together, so a batch shares it (held-out prompts
    of two task types, ordered by length alone, share 26 tokens a batch; grouped by their first 32
    tokens, 81: 22% fewer tokens fed)."""
    best, best_cost = None, None
    for k in PREFIX_KEYS:
        order = sorted(range(len(contexts)), key=lambda i: (groups[i], contexts[i][:k], len(contexts[i])))
        cost = sum(prefill_cost([contexts[i] for i in batch], [keys[i] for i in batch]) for batch in batches(order))
        if best_cost is None or cost < best_cost:
            best, best_cost = order, cost
    return best if best is not None else []


def _prefill_prefix(
    model, carried: CarriedCache, prefix: list[int], keys: list[str | None], adapters: list[str | None], device
) -> None:
    """Prefill `prefix` into the empty `carried` once per distinct KV key, then lay the cache out with one
    row per distinct context (`keys[u]`, `adapters[u]`: those of distinct context u), each a copy of its
    key's prefix."""
    key_rows: dict[str | None, int] = {}  # each key's first distinct context, whose adapter computes it
    for u, key in enumerate(keys):
        key_rows.setdefault(key, u)
    prefix_ids = torch.tensor([prefix] * len(key_rows), device=device)
    with select(model, [adapters[u] for u in key_rows.values()]):
        model(
            input_ids=prefix_ids,
            attention_mask=torch.ones_like(prefix_ids),
            position_ids=torch.arange(len(prefix), device=device).expand_as(prefix_ids),
            past_key_values=carried.cache,
            use_cache=True,
            logits_to_keep=1,
        )
    order = list(key_rows)
    reorder = torch.tensor([order.index(key) for key in keys], device=device)
    carried.cache.reorder_cache(reorder)  # type: ignore[arg-type]  # transformers annotates torch.LongTensor


def _prefill_rests(
    model,
    carried: CarriedCache,
    rests: list[list[int]],
    adapters: list[str | None],
    *,
    shared: int,
    keep: int,
    pad: int,
    device,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Feed each distinct context's rest after the `shared` prefix the cache holds (left-padded, positions
    going on from the prefix), each under its adapter: the logits of the last `keep` positions and the
    attention mask over prefix and rests."""
    width = max(len(rest) for rest in rests)
    ids = torch.full((len(rests), width), pad, dtype=torch.long)
    fed = torch.zeros((len(rests), width), dtype=torch.long)
    positions = torch.full((len(rests), width), max(shared - 1, 0), dtype=torch.long)
    for u, rest in enumerate(rests):
        ids[u, width - len(rest) :] = torch.tensor(rest)
        fed[u, width - len(rest) :] = 1
        positions[u, width - len(rest) :] = torch.arange(shared, shared + len(rest))
    attention = torch.cat([torch.ones((len(rests), shared), dtype=torch.long), fed], dim=1).to(device)
    with select(model, adapters):
        logits = model(
            input_ids=ids.to(device),
            attention_mask=attention,
            position_ids=positions.to(device),
            past_key_values=carried.cache,
            use_cache=True,
            logits_to_keep=keep,
        ).logits
    return logits, attention


def _copy_to_rows(
    carried: CarriedCache,
    logits: torch.Tensor,
    attention: torch.Tensor,
    owner: list[int],
    lengths: list[int],
    shared: int,
    device,
) -> torch.Tensor:
    """Give every row its distinct context's (`owner[row]`) cache, attention mask and slots, as a prefill of
    the whole batch would lay them out up to padding; returns each row's logits. `lengths`: each distinct
    context's rest after the `shared` prefix."""
    index = torch.tensor(owner, device=device)
    carried.cache.reorder_cache(index)  # type: ignore[arg-type]  # transformers annotates torch.LongTensor
    carried.attention = attention.index_select(0, index)
    width = max(lengths)
    for row, u in enumerate(owner):
        carried.slots[row] = [*range(shared), *range(shared + width - lengths[u], shared + width)]
    return logits.index_select(0, index)


@torch.no_grad()
def score_continuations(
    model,
    carried: CarriedCache,
    contexts: list[list[int]],
    golds: list[list[int] | None],
    adapters: list[str | None],
    pad: int,
    device,
    *,
    share_prefixes: bool = True,
) -> list[tuple[float, int] | None]:
    """Teacher-forced log-likelihood (temperature 1) of `golds[i]` right after `contexts[i]`, in one
    forward that also fills the batch's carried cache with the contexts: the sampling that follows
    feeds only each context's last token again, so a gold answer costs its own tokens, not a second
    prefill of the prompt. The gold tokens are then masked out of the cache (`forget`); the contexts
    sample as they would have. Returns (summed log-prob, token count) per row, None without a gold."""
    contiguous_head(model)
    fed = [[*context, *(gold or [])] for context, gold in zip(contexts, golds)]
    keep = max((len(gold) for gold in golds if gold), default=0) + 1
    logits = (
        shared_prefill(
            model, carried, fed, adapters, tails=[len(gold or []) + 1 for gold in golds], pad=pad, device=device
        )
        if share_prefixes
        else None
    )
    if logits is None:
        ids, attention, positions = carried.feed(fed, [False] * len(fed), pad, device)
        with select(model, adapters):
            logits = model(
                input_ids=ids,
                attention_mask=attention,
                position_ids=positions,
                past_key_values=carried.cache,
                use_cache=True,
                logits_to_keep=keep,
            ).logits
    scores: list[tuple[float, int] | None] = []
    for row, (context, gold) in enumerate(zip(contexts, golds)):
        if gold:  # rows end in the same column: gold token j is predicted by column keep - 1 - len(gold) + j
            predicting = logits[row, keep - 1 - len(gold) : keep - 1].float()
            chosen = torch.log_softmax(predicting, -1).gather(-1, torch.tensor(gold, device=device).unsqueeze(-1))
            scores.append((float(chosen.double().sum()), len(gold)))
        else:
            scores.append(None)
        carried.forget(row, len(context))
    return scores
