"""From rollouts to scored tokens: the sequences a rollout's token records make, micro-batches of them,
their log-probabilities as sampled, and each trained token's weight in the loss.

`rollout_sequences` lays a rollout's segments (`populora.lm.sampling`) end to end so every sampled
token is scored in the context it was sampled in; `selected_logprobs` scores them through the
sampler's own `process_logits`, with logits only at the trained positions, in chunks recomputed in
the backward pass; with `share_prompts` a prompt, or the prefix distinct prompts begin with, is
computed once per micro-batch (micro-batches planned by `populora.rl.micro_batches`). Used by the update
(`populora.rl.update`, which re-exports these names) and the benchmarks' gold log-likelihood. Tests:
tests/test_generation_update.py, tests/test_micro_batches.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch.utils.checkpoint import checkpoint

from populora.lm.model import decoder_and_head
from populora.lm.sampling import process_logits
from populora.rl.micro_batches import (  # noqa: F401  (re-exported: the update plans with them)
    batch_sharing,
    context,
    plan_common_prefix_micro_batches,
    plan_micro_batches,
    plan_shared_micro_batches,
    prompt_groups,
    shared_length,
)

LOGIT_CHUNK = 1024  # trained positions per lm-head chunk: chunk x vocab fp32 logits at a time
# A micro-batch whose logits are at most this many (positions x vocab) keeps them for the backward pass
# instead of recomputing the head there: ~4 fp32 copies of 32M logits, 0.5 GB, against the head's forward
# again (the update's micro-batch of 8 answers of 48 tokens at SmolLM2's 49,152-token vocabulary: 19M)
KEEP_LOGITS = 1 << 25


class RolloutFormatError(ValueError):
    """A rollout's segments lack the token records the update needs."""


@dataclass
class Sequence:
    """One forward pass worth of a rollout: token ids and, per trained position, how it was sampled."""

    ids: list[int]
    rollout: int  # index of the rollout it belongs to
    targets: list[int] = field(default_factory=list)  # positions t whose token ids[t] is trained (t >= 1)
    temperature: list[float] = field(default_factory=list)  # per target
    top_p: list[float] = field(default_factory=list)  # per target
    suppress: list[list[int] | None] = field(default_factory=list)  # per target: ids forbidden there
    sampler_logprobs: list[float | None] = field(default_factory=list)  # per target, when recorded


def _require_ids(segment: dict, index: int) -> list[int]:
    if "ids" not in segment:
        raise RolloutFormatError(
            f"segment {index} has no token ids (rollouts from an older propose/solve stage?). "
            "Fix: regenerate the rollouts with the current stages.propose / stages.solve."
        )
    return segment["ids"]


def _require_sampling(segment: dict, index: int) -> dict:
    """How a trained segment was sampled: without it the update cannot score it as sampled."""
    sampling = segment.get("sampling") or {}
    missing = [key for key in ("temperature", "top_p") if key not in sampling]
    if missing:
        raise RolloutFormatError(
            f"trained segment {index} does not record its sampling {missing} (rollouts from an older stage?). "
            "Fix: regenerate the rollouts with the current stages.propose / stages.solve."
        )
    return sampling


def rollout_sequences(segments: list[dict], rollout: int, max_len: int) -> tuple[list[Sequence], int]:
    """The sequences that score every sampled token of a rollout in its generation context.

    Segments are laid end to end, each contributing `ids[:keep]` to later context. A generated
    segment whose tokens all stay in the context is scored in that main sequence; one whose tail
    was cut from later context (a stop string the next prefill does not repeat) is scored in a
    branch: its context, then all its ids. Sequences longer than `max_len` lose their oldest
    tokens (targets there are dropped). Returns the sequences and how many were truncated.
    """
    prefix: list[int] = []
    main = Sequence([], rollout)
    branches: list[Sequence] = []
    for index, segment in enumerate(segments):
        ids = _require_ids(segment, index)
        keep = int(segment.get("keep", len(ids)))
        if not segment.get("train"):
            prefix.extend(ids[:keep])
            continue
        last = index == len(segments) - 1
        target = main if keep == len(ids) or last else Sequence([], rollout)
        if target is not main:
            target.ids = list(prefix)
            branches.append(target)
        sampling = _require_sampling(segment, index)
        logprobs = segment.get("logprobs") or [None] * len(ids)
        start = len(prefix)
        for offset in range(len(ids)):
            target.targets.append(start + offset)
            target.temperature.append(float(sampling["temperature"]))
            target.top_p.append(float(sampling["top_p"]))
            target.suppress.append(sampling.get("suppress_first") if offset == 0 else None)
            target.sampler_logprobs.append(logprobs[offset])
        if target is not main:
            target.ids.extend(ids)
        prefix.extend(ids if target is main else ids[:keep])
    main.ids = prefix
    sequences, truncated = [], 0
    for sequence in [main, *branches]:
        if not sequence.targets:
            continue
        cut = max(0, len(sequence.ids) - max_len)
        if cut:
            truncated += 1
            kept = [k for k, t in enumerate(sequence.targets) if t - cut >= 1]
            sequence = Sequence(
                sequence.ids[cut:],
                rollout,
                [sequence.targets[k] - cut for k in kept],
                *(
                    [getattr(sequence, name)[k] for k in kept]
                    for name in ("temperature", "top_p", "suppress", "sampler_logprobs")
                ),
            )
        if sequence.targets:
            sequences.append(sequence)
    return sequences, truncated


def _pad(sequences: list[Sequence], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(s.ids) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, sequence in enumerate(sequences):
        ids[row, : len(sequence.ids)] = torch.tensor(sequence.ids)
        attention[row, : len(sequence.ids)] = 1
    return ids.to(device), attention.to(device)


def selected_logprobs(
    model,
    sequences: list[Sequence],
    pad_id: int,
    device,
    *,
    chunk: int = LOGIT_CHUNK,
    full_logits: bool = False,
    entropy: bool = False,
    share_prompts: bool = False,
):
    """Log-probabilities of every target token of `sequences` (concatenated, in order), as sampled.

    Only the target positions get logits, `chunk` rows at a time; with gradients on, each chunk's
    logits are recomputed in the backward pass instead of being kept. `full_logits=True` runs the
    model's own forward (all logits), e.g. for a distributed wrapper. `entropy=True` returns
    `(logprobs, entropies)`: also the entropy of the distribution each target was sampled from
    (after temperature and top-p; no gradient), a diagnostic of how sure the policy is.
    `share_prompts=True`: sequences with the same context before their first target (a task's
    answers share their prompt) compute it once, its keys and values attended to by each of them,
    gradients included (`_shared_features`); the same values up to float rounding.
    """
    ids, attention = _pad(sequences, pad_id, device)
    rows = torch.tensor([r for r, s in enumerate(sequences) for _ in s.targets], device=device)
    positions = torch.tensor([t for s in sequences for t in s.targets], device=device)
    targets = ids[rows, positions]
    parts = None if full_logits else decoder_and_head(model)
    if parts is None:
        features = model(input_ids=ids, attention_mask=attention, use_cache=False).logits[rows, positions - 1]
        head = None
    else:
        decoder, head = parts
        shared = _shared_features(decoder, sequences, pad_id, device) if share_prompts else None
        if shared is not None:
            features = shared
        else:
            hidden = decoder(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
            features = hidden[rows, positions - 1]
    return _score_targets(head, features, targets, sequences, device, chunk=chunk, entropy=entropy)


def _shared_features(decoder, sequences: list[Sequence], pad_id: int, device) -> torch.Tensor | None:
    """The hidden states that predict each target (as `hidden[rows, positions - 1]`), each shared prefix run once.

    A group of sequences with one prompt (`prompt_groups`, at least MIN_SHARED_PREFIX tokens): the prompt's
    forward once, with use_cache, then its keys and values expanded (a view: no copy) to the group's rows, which
    run only their own tokens (right-padded, positions after the prompt) attending to them. Gradients flow back
    through the expanded cache into the one prompt computation, summed over the rows, as the unshared forward's
    would be. The sequences alone with their prompt share the prefix their prompts begin with (`shared_length`:
    the instruction before each answer's own worked example) the same way, or run as usual where it is too
    short. None when nothing is shared."""
    if getattr(decoder, "gradient_checkpointing", False) and decoder.training:
        return None  # Transformers turns the cache off under gradient checkpointing: nothing to attend to
    groups, alone = batch_sharing(sequences)
    common = shared_length([context(sequences[k]) for k in alone])
    if len(alone) == len(sequences) and not common:
        return None
    per_sequence: list[torch.Tensor | None] = [None] * len(sequences)
    for prefix, members in groups.items():
        group = [sequences[k] for k in members]
        for k, features in zip(members, _prompt_group_features(decoder, prefix, group, pad_id, device)):
            per_sequence[k] = features
    if alone:
        lone = [sequences[k] for k in alone]
        computed = (
            _prompt_group_features(decoder, tuple(lone[0].ids[:common]), lone, pad_id, device)
            if common
            else _unshared_features(decoder, lone, pad_id, device)
        )
        for k, features in zip(alone, computed):
            per_sequence[k] = features
    return torch.cat(_every_one(per_sequence))


def _prompt_group_features(
    decoder, prefix: tuple[int, ...], group: list[Sequence], pad_id: int, device
) -> list[torch.Tensor]:
    """Per sequence of `group` (all beginning with `prefix`), the hidden states that predict its targets: the
    prompt's forward once (`_expanded_prompt_cache`), then each sequence's own tokens (right-padded,
    positions after the prompt) attending to it."""
    shared = len(prefix)
    cache = _expanded_prompt_cache(decoder, prefix, len(group), device)
    rests = [sequence.ids[shared:] for sequence in group]
    width = max(len(rest) for rest in rests)
    ids = torch.full((len(rests), width), pad_id, dtype=torch.long)
    fed = torch.zeros((len(rests), width), dtype=torch.long)
    for row, rest in enumerate(rests):
        ids[row, : len(rest)] = torch.tensor(rest)
        fed[row, : len(rest)] = 1
    attention = torch.cat([torch.ones((len(rests), shared), dtype=torch.long), fed], dim=1).to(device)
    positions = torch.arange(shared, shared + width, device=device).expand(len(rests), -1)
    hidden = decoder(
        input_ids=ids.to(device),
        attention_mask=attention,
        position_ids=positions,
        past_key_values=cache,
        use_cache=True,
    ).last_hidden_state
    return [
        hidden[row, torch.tensor([t - 1 - shared for t in sequence.targets], device=device)]
        for row, sequence in enumerate(group)
    ]


def _expanded_prompt_cache(decoder, prefix: tuple[int, ...], rows: int, device):
    """A `DynamicCache` of the prompt's keys and values from one forward, expanded to `rows` rows: a view,
    so gradients from every row flow back into the one prompt computation, summed."""
    from transformers import DynamicCache
    from transformers.cache_utils import CacheLayerMixin

    cache = DynamicCache(config=getattr(decoder, "config", None))
    prompt = torch.tensor([list(prefix)], device=device)
    decoder(input_ids=prompt, attention_mask=torch.ones_like(prompt), past_key_values=cache, use_cache=True)
    for layer in cache.layers:
        # filled by the prompt's forward; a layer with no keys and values (linear attention, a layer
        # reading another's cache) has no prompt to share
        if not isinstance(layer, CacheLayerMixin) or layer.keys is None or layer.values is None:
            raise ValueError(f"sharing a prompt needs key/value cache layers, not {type(layer).__name__}")
        layer.keys = layer.keys.expand(rows, -1, -1, -1)
        layer.values = layer.values.expand(rows, -1, -1, -1)
    return cache


def _unshared_features(decoder, lone: list[Sequence], pad_id: int, device) -> list[torch.Tensor]:
    """Per sequence of `lone`, the hidden states that predict its targets, from one ordinary padded forward."""
    ids, attention = _pad(lone, pad_id, device)
    hidden = decoder(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
    return [hidden[row, torch.tensor(sequence.targets, device=device) - 1] for row, sequence in enumerate(lone)]


def _every_one(parts: list[torch.Tensor | None]) -> list[torch.Tensor]:
    """`parts` with every sequence's part computed (each sequence is in one shared group or alone)."""
    done = [part for part in parts if part is not None]
    if len(done) != len(parts):
        raise RuntimeError(f"{len(parts) - len(done)} of {len(parts)} sequences were left unscored")
    return done


def _score_targets(
    head, features: torch.Tensor, targets: torch.Tensor, sequences: list[Sequence], device, *, chunk: int, entropy: bool
):
    """The target tokens' log-probs (and entropies) from their features: hidden states through `head`, or logits
    (`head` None), `chunk` positions at a time, each chunk's logits recomputed in the backward pass unless they
    are few (`KEEP_LOGITS`): the same numbers either way."""
    temperature = torch.tensor([x for s in sequences for x in s.temperature], device=device)
    top_p = torch.tensor([x for s in sequences for x in s.top_p], device=device)
    suppress = [x for s in sequences for x in s.suppress]

    def score(feature, target, temp, nucleus, suppressed):
        logits = head(feature) if head is not None else feature
        distribution = process_logits(logits, temp, nucleus, suppress=suppressed, keep=target)
        chosen = distribution.gather(-1, target.unsqueeze(-1)).squeeze(-1)
        if not entropy:
            return chosen
        with torch.no_grad():  # -sum p log p, with 0 log 0 = 0 for the tokens top-p or suppression cut
            spread = -torch.where(torch.isinf(distribution), 0.0, distribution.exp() * distribution).sum(-1)
        return chosen, spread

    recompute = len(targets) * _vocab(head, features) > KEEP_LOGITS
    out, spreads = [], []
    for start in range(0, len(targets), chunk):
        sl = slice(start, start + chunk)
        mask = None
        if any(x for x in suppress[sl]):
            mask = torch.zeros((len(suppress[sl]), _vocab(head, features)), dtype=torch.bool, device=device)
            for k, forbidden in enumerate(suppress[sl]):
                if forbidden:
                    mask[k, torch.tensor(forbidden, device=device)] = True
        args = (features[sl], targets[sl], temperature[sl], top_p[sl], mask)
        scored = (
            checkpoint(score, *args, use_reentrant=False)
            if torch.is_grad_enabled() and head is not None and recompute
            else score(*args)
        )
        if entropy:
            out.append(scored[0])
            spreads.append(scored[1])
        else:
            out.append(scored)
    logprobs = torch.cat(out) if out else torch.zeros(0, device=device)
    if entropy:
        return logprobs, torch.cat(spreads) if spreads else torch.zeros(0, device=device)
    return logprobs


def _vocab(head, features) -> int:
    return head.weight.shape[0] if head is not None else features.shape[-1]


LOSS_TYPES = ("sequence", "token", "constant")  # update.loss_type


def token_weights(
    sequences: list[Sequence], advantages: list[float], loss_type: str = "sequence", constant: int | None = None
) -> list[float]:
    """Per target token, the weight of its log-prob in the objective (the loss is minus their sum).

    `sequence` (GRPO's per-sequence mean, the design's per-sequence statistics): `A_i / (N n_i)`, so
    the objective is mean_i(A_i * mean_token_logprob_i) over the N rollouts: every answer weighs the
    same whatever its length. `token` (DAPO's token-level mean): `A_i / T` with T the trained tokens of
    all N rollouts, so every token weighs the same and long answers weigh more. `constant` (Dr. GRPO):
    `A_i / (N L)` with L a fixed length (`constant`, the update's `max_seq_len`), so a token's weight
    depends neither on its answer's length nor on the batch's. Either way the weights do not depend on
    how tokens are batched."""
    counts: dict[int, int] = {}
    for s in sequences:
        counts[s.rollout] = counts.get(s.rollout, 0) + len(s.targets)
    if loss_type == "token":
        total = sum(counts.values())
        return [advantages[s.rollout] / total for s in sequences for _ in s.targets]
    n = len(advantages)
    if loss_type == "constant":
        if not constant or constant < 1:
            raise ValueError(f"loss_type 'constant' needs a length of 1 or more, got {constant!r}")
        return [advantages[s.rollout] / (n * constant) for s in sequences for _ in s.targets]
    if loss_type != "sequence":
        raise ValueError(f"loss_type must be one of {LOSS_TYPES}, got {loss_type!r}")
    return [advantages[s.rollout] / (n * counts[s.rollout]) for s in sequences for _ in s.targets]


@torch.no_grad()
def shared_prefix_logprobs(
    model, sequences: list[Sequence], pad_id: int, device, *, group_rows: int = 16
) -> torch.Tensor:
    """`selected_logprobs` without gradients, in micro-batches of at most `group_rows` sequences planned as the
    update plans them (`plan_shared_micro_batches`, no token budget: nothing is kept for a backward pass), each
    computing its shared prompts and prefix once (`selected_logprobs(share_prompts=True)`). The update's
    after-step diagnostics use it; the values equal `selected_logprobs`' up to float rounding."""
    from populora.lm.prefix_cache import contiguous_head

    contiguous_head(model)
    out: list[torch.Tensor | None] = [None] * len(sequences)
    for batch in plan_shared_micro_batches(sequences, group_rows, None):
        scored = selected_logprobs(model, [sequences[k] for k in batch], pad_id, device, share_prompts=True)
        offset = 0
        for k in batch:
            n = len(sequences[k].targets)
            out[k], offset = scored[offset : offset + n], offset + n
    return torch.cat(_every_one(out)) if out else torch.zeros(0, device=device)
