"""How the update cuts its sequences into micro-batches, and what a micro-batch costs to compute.

A sequence's *context* is everything before the logits of its first trained token: for a student's answer its
prompt (instruction, worked example, task). Two kinds of sharing make a micro-batch cheaper
(`populora.rl.sequences.selected_logprobs(share_prompts=True)`):

- a task's answers with the same prompt (`prompt_groups`) compute the prompt once (`plan_shared_micro_batches`
  keeps them together where that is the cheaper plan; `batch_sharing` decides it for each micro-batch);
- sequences whose prompts differ but begin alike (every answer draws its own worked example, so a task's
  answers share only the instruction before it: ~83 tokens of a ~240-token solver prompt, ~330 of a ~510-token
  proposer prompt) compute that common prefix once per micro-batch (`plan_common_prefix_micro_batches` puts
  sequences that begin alike together, as the sampler's `populora.lm.prefix_cache.cheapest_order` does).

These are pure functions of token ids and lengths. Tests: tests/test_micro_batches.py and
tests/test_generation_update.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from populora.lm.prefix_cache import MIN_SHARED_PREFIX, PREFIX_KEYS, common_prefix

# A micro-batch's fixed cost (a forward and backward through every layer, the loss) counted as this many tokens, so
# that a plan does not cut its sequences into single rows to share a few more tokens (grouped by their first 128
# tokens, a student's 24 answers of distinct prompts went into 20 micro-batches to feed 5% fewer tokens than 4)
PASS_TOKENS = 32


class _Scored(Protocol):
    """What planning reads of a `populora.rl.sequences.Sequence`."""

    ids: list[int]
    targets: list[int]


def context(sequence: _Scored) -> list[int]:
    """The tokens before the logits of the sequence's first trained token (its prompt)."""
    return sequence.ids[: min(sequence.targets) - 1]


def shared_length(contexts: list[list[int]]) -> int:
    """The prefix a micro-batch of these contexts computes once: their common prefix, when two of them or more
    share at least MIN_SHARED_PREFIX tokens, else 0.

    >>> shared_length([list(range(20)), list(range(12)) + [0]]), shared_length([list(range(20))] * 2)
    (12, 20)
    >>> shared_length([list(range(20))]), shared_length([[0] * 7 + [1], [0] * 7 + [2]])
    (0, 0)
    """
    if len(contexts) < 2:
        return 0
    shared = common_prefix(contexts)
    return shared if shared >= MIN_SHARED_PREFIX else 0


def batch_cost(lengths: list[int], shared: int) -> int:
    """Tokens a micro-batch feeds: the shared prefix once, then every row padded to the longest rest.

    >>> batch_cost([100, 90, 120], 0), batch_cost([100, 90, 120], 80)
    (360, 200)
    """
    return shared + len(lengths) * max(length - shared for length in lengths)


def plan_micro_batches(lengths: list[int], max_rows: int, max_tokens: int | None) -> list[list[int]]:
    """Group sequence indices, longest first, into micro-batches of at most `max_rows` sequences and
    `max_tokens` padded tokens (rows x longest); a sequence longer than the budget goes alone."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    for i in order:
        if batches:
            current = batches[-1]
            width = max(lengths[current[0]], lengths[i])
            if len(current) < max_rows and (max_tokens is None or width * (len(current) + 1) <= max_tokens):
                current.append(i)
                continue
        batches.append([i])
    return batches


def plan_common_prefix_micro_batches(
    contexts: list[list[int]], lengths: list[int], max_rows: int, max_tokens: int | None
) -> list[list[int]]:
    """Micro-batches (indices) of sequences with these `contexts` and total `lengths`, each computing the common
    prefix of its contexts once (`shared_length`): at most `max_rows` sequences and `max_tokens` tokens fed
    (`batch_cost`), a sequence over the budget alone. Candidates, for k in PREFIX_KEYS: the sequences grouped by
    their first k context tokens, each group longest first, cut greedily (k = 0: one group, the plain length
    order); the plan that feeds the fewest tokens, each micro-batch counted `PASS_TOKENS` more, the first on a tie.
    Groups are cut apart, so no micro-batch straddles two instructions and shares nothing.

    >>> instruction_a, instruction_b = list(range(100, 120)), list(range(200, 220))
    >>> contexts = [instruction_a + [1] * 5, instruction_b + [2] * 6, instruction_a + [3] * 7, instruction_b + [4]]
    >>> plan_common_prefix_micro_batches(contexts, [len(c) + 3 for c in contexts], 2, None)
    [[2, 0], [1, 3]]
    """
    best: list[list[int]] = []
    best_cost = None
    for k in PREFIX_KEYS:
        groups: dict[tuple[int, ...], list[int]] = {}
        for i in sorted(range(len(contexts)), key=lambda i: (contexts[i][:k], -lengths[i], i)):
            groups.setdefault(tuple(contexts[i][:k]), []).append(i)
        batches = [batch for group in groups.values() for batch in _cut(group, contexts, lengths, max_rows, max_tokens)]
        cost = sum(
            PASS_TOKENS + batch_cost([lengths[i] for i in b], shared_length([contexts[i] for i in b])) for b in batches
        )
        if best_cost is None or cost < best_cost:
            best, best_cost = batches, cost
    return best


def _cut(
    order: list[int], contexts: list[list[int]], lengths: list[int], max_rows: int, max_tokens: int | None
) -> list[list[int]]:
    """`order` cut greedily into micro-batches within `max_rows` and `max_tokens` (`batch_cost`)."""
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < max_rows:
            candidate = [*batches[-1], i]
            shared = shared_length([contexts[j] for j in candidate])
            if max_tokens is None or batch_cost([lengths[j] for j in candidate], shared) <= max_tokens:
                batches[-1] = candidate
                continue
        batches.append([i])
    return batches


def prompt_groups(sequences: Sequence[_Scored]) -> dict[tuple[int, ...], list[int]]:
    """Sequence indices by their context (a task's answers with one prompt)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    for k, sequence in enumerate(sequences):
        groups.setdefault(tuple(context(sequence)), []).append(k)
    return groups


def shared_prompt_groups(sequences: Sequence[_Scored]) -> tuple[dict[tuple[int, ...], list[int]], list[int]]:
    """The prompt groups (`prompt_groups`) worth computing their prompt once, two sequences or more with a prompt
    of at least MIN_SHARED_PREFIX tokens, and the indices of the other sequences (alone with their prompt) group by
    group as `prompt_groups` lists them. The one rule the update, its re-scoring and `fed_tokens` share.

    >>> from types import SimpleNamespace as S
    >>> long, short = list(range(20)), [0] * 7
    >>> rows = [S(ids=long + [1], targets=[20]), S(ids=long + [2], targets=[20]), S(ids=short + [3], targets=[7])]
    >>> shared, alone = shared_prompt_groups(rows + [S(ids=short + [4], targets=[7]), S(ids=[5] * 21, targets=[20])])
    >>> [members for members in shared.values()], alone
    ([[0, 1]], [2, 3, 4])
    """
    shared: dict[tuple[int, ...], list[int]] = {}
    alone: list[int] = []
    for prefix, members in prompt_groups(sequences).items():
        if len(members) >= 2 and len(prefix) >= MIN_SHARED_PREFIX:
            shared[prefix] = members
        else:
            alone += members
    return shared, alone


def batch_sharing(sequences: Sequence[_Scored]) -> tuple[dict[tuple[int, ...], list[int]], list[int]]:
    """How one micro-batch computes its contexts (`selected_logprobs(share_prompts=True)`): its prompt groups
    (`shared_prompt_groups`) each computing their prompt once and the other sequences their common prefix once, or,
    where that feeds more tokens, every sequence together sharing the common prefix of all (no groups). Each
    separate forward counted `PASS_TOKENS` more. A task's repeated prompt is ~180 tokens and its instruction ~83:
    two answers of one prompt in a micro-batch of eight feed less pooled than computed apart.

    >>> from types import SimpleNamespace as S
    >>> same = [S(ids=list(range(30)) + [k], targets=[30]) for k in (1, 2)]
    >>> [list(groups.values()) for groups, _ in (batch_sharing(same), batch_sharing([*same, S(ids=[0] * 20, targets=[19])]))]
    [[[0, 1]], [[0, 1]]]
    >>> batch_sharing([*same, S(ids=list(range(20)), targets=[19])])  # the instruction (18 tokens) shared by all
    ({}, [0, 1, 2])
    """
    groups, alone = shared_prompt_groups(sequences)
    if not groups:
        return groups, alone
    everyone = list(range(len(sequences)))
    if _grouped_cost(sequences, groups, alone) <= PASS_TOKENS + _pooled_cost(sequences, everyone):
        return groups, alone
    return {}, everyone


def _grouped_cost(sequences: Sequence[_Scored], groups: dict[tuple[int, ...], list[int]], alone: list[int]) -> int:
    """Tokens fed computing each prompt group apart (its prompt once) and the rest pooled, a pass counted per forward."""
    cost = sum(PASS_TOKENS + _group_cost(sequences, prefix, members) for prefix, members in groups.items())
    return cost + (PASS_TOKENS + _pooled_cost(sequences, alone) if alone else 0)


def _group_cost(sequences: Sequence[_Scored], prefix: tuple[int, ...], members: list[int]) -> int:
    """Tokens fed by one prompt group: its prompt once and each member's rest padded to the longest."""
    return len(prefix) + len(members) * max(len(sequences[k].ids) - len(prefix) for k in members)


def _pooled_cost(sequences: Sequence[_Scored], members: list[int]) -> int:
    """Tokens fed by one forward of `members` sharing their contexts' common prefix (`shared_length`)."""
    return batch_cost([len(sequences[k].ids) for k in members], shared_length([context(sequences[k]) for k in members]))


def plan_shared_micro_batches(sequences: Sequence[_Scored], max_rows: int, max_tokens: int | None) -> list[list[int]]:
    """Micro-batches for `selected_logprobs(share_prompts=True)`, the cheaper of two plans (fed tokens,
    `fed_tokens`, and `PASS_TOKENS` a micro-batch): every sequence planned by the prefix its context begins with
    (`plan_common_prefix_micro_batches`), or each prompt group (`shared_prompt_groups`) in pieces of at most
    `max_rows` of its sequences, longest first, costing the prompt once plus rows x the longest rest within
    `max_tokens`, and the other sequences planned by prefix. A student's 56 answers in a study generation: 16
    groups of 2-4 in 20 micro-batches fed 6,735 tokens; pooled, 14 micro-batches fed 5,717."""
    pooled = plan_common_prefix_micro_batches(
        [context(s) for s in sequences], [len(s.ids) for s in sequences], max_rows, max_tokens
    )
    grouped = _grouped_plan(sequences, max_rows, max_tokens)
    pooled_cost, grouped_cost = (
        sum(PASS_TOKENS + fed_tokens(sequences, batch, True) for batch in plan) for plan in (pooled, grouped)
    )
    return grouped if grouped_cost < pooled_cost else pooled


def _grouped_plan(sequences: Sequence[_Scored], max_rows: int, max_tokens: int | None) -> list[list[int]]:
    """Each prompt group in pieces of its own, the other sequences planned by prefix (`plan_shared_micro_batches`)."""
    batches: list[list[int]] = []
    shared, alone = shared_prompt_groups(sequences)
    for prefix, members in shared.items():
        piece: list[int] = []
        longest = 0
        for k in sorted(members, key=lambda k: (-len(sequences[k].ids), k)):
            rest = len(sequences[k].ids) - len(prefix)
            width = max(longest, rest)
            if piece and (
                len(piece) >= max_rows or (max_tokens and len(prefix) + width * (len(piece) + 1) > max_tokens)
            ):
                batches.append(piece)
                piece, width = [], rest
            piece.append(k)
            longest = width
        batches.append(piece)
    planned = plan_common_prefix_micro_batches(
        [context(sequences[k]) for k in alone], [len(sequences[k].ids) for k in alone], max_rows, max_tokens
    )
    return batches + [[alone[i] for i in batch] for batch in planned]


def fed_tokens(sequences: Sequence[_Scored], batch: list[int], shares: bool) -> int:
    """Tokens one micro-batch feeds the decoder (what `selected_logprobs` computes, padding included): as
    `batch_sharing` computes it (`shares`), or every row padded to the longest (not `shares`).

    >>> from types import SimpleNamespace as S
    >>> same, other = [S(ids=list(range(30)) + [k], targets=[30]) for k in (1, 2)], S(ids=[0] * 20, targets=[19])
    >>> fed_tokens([*same, other], [0, 1, 2], True), fed_tokens([*same, other], [0, 1, 2], False)
    (53, 93)
    """
    if not shares:
        return len(batch) * max(len(sequences[i].ids) for i in batch)
    rows = [sequences[i] for i in batch]
    groups, alone = batch_sharing(rows)
    fed = sum(_group_cost(rows, prefix, members) for prefix, members in groups.items())
    return fed + (_pooled_cost(rows, alone) if alone else 0)
