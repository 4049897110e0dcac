"""The update's micro-batches: answers whose prompts differ only after a common instruction (each answer draws its
own worked example) compute that instruction once per micro-batch, with the unshared update's loss and gradients."""

from __future__ import annotations

import doctest
import random

import pytest

from populora.lm.model import load_base
from populora.lm.multilora import attach_multilora
from populora.lm.sampling import GenRow, run_plans
from populora.rl import micro_batches
from populora.rl.micro_batches import (
    batch_cost,
    context,
    fed_tokens,
    plan_common_prefix_micro_batches,
    plan_micro_batches,
    prompt_groups,
    shared_length,
)
from populora.rl.sequences import rollout_sequences
from populora.tasks import prompts
from tests.test_generation_update import (
    _adapters,
    _chat,
    _training_a,
    assert_shared_as_unshared,
    assert_update_shared_as_unshared,
)
from tests.test_prefix_cache import assert_rescoring_as_plain


def test_doctests():
    assert doctest.testmod(micro_batches).failed == 0


def _families(rng: random.Random, n: int) -> tuple[list[list[int]], list[int]]:
    """Contexts of three instructions (30, 45 and 5 tokens: the last too short to share), each with its own
    example of random length, and the total lengths of their sequences."""
    instructions = [list(range(1000, 1030)), list(range(2000, 2045)), list(range(3000, 3005))]
    contexts = [instructions[rng.randrange(3)] + [rng.randrange(10)] + [7] * rng.randrange(40) for _ in range(n)]
    return contexts, [len(c) + 1 + rng.randrange(20) for c in contexts]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("max_rows", "max_tokens"), [(8, None), (4, 300), (3, 120), (1, None)])
def test_common_prefix_plan_partitions_within_budget_and_never_feeds_more(seed, max_rows, max_tokens):
    rng = random.Random(seed)
    contexts, lengths = _families(rng, 40)
    batches = plan_common_prefix_micro_batches(contexts, lengths, max_rows, max_tokens)

    def cost(plan):
        return sum(batch_cost([lengths[i] for i in b], shared_length([contexts[i] for i in b])) for b in plan)

    assert sorted(i for b in batches for i in b) == list(range(len(contexts)))
    for batch in batches:
        assert len(batch) <= max_rows
        fed = batch_cost([lengths[i] for i in batch], shared_length([contexts[i] for i in batch]))
        assert len(batch) == 1 or max_tokens is None or fed <= max_tokens
    # never more than the plain length order, which shares only by chance
    assert cost(batches) <= cost(plan_micro_batches(lengths, max_rows, max_tokens))
    if max_rows == 8 and max_tokens is None:  # room to group: each batch holds one instruction, mostly shared
        assert all(len({tuple(contexts[i][:5]) for i in b}) == 1 for b in batches)
        assert cost(batches) < 0.75 * cost(plan_micro_batches(lengths, max_rows, max_tokens))


def _task_answers(rng: random.Random, tasks: int, answers: int, examples: int) -> list:
    """Rows of `tasks` tasks with `answers` answers each; each answer's prompt is a 60-token instruction, one of
    `examples` worked examples (40 tokens) and its task (30 tokens): few examples, many answers of equal prompt."""
    from types import SimpleNamespace

    instruction, rows = list(range(1000, 1060)), []
    for task in range(tasks):
        for _ in range(answers):
            prompt = instruction + [2000 + rng.randrange(examples)] * 40 + [3000 + task] * 30
            rows.append(SimpleNamespace(ids=prompt + [5] * (1 + rng.randrange(12)), targets=[len(prompt) + 1]))
    return rows


def _plan_cost(rows, plan) -> int:
    return sum(micro_batches.PASS_TOKENS + fed_tokens(rows, b, True) for b in plan)


@pytest.mark.parametrize("seed", range(4))
def test_the_plan_is_the_cheaper_of_prompt_groups_apart_and_everything_pooled(seed):
    """`plan_shared_micro_batches` keeps a task's equal prompts apart where they are many (one example: every
    answer of a task the same prompt) and pools everything by its instruction where equal prompts come in twos
    (many examples): either way every sequence once, within the rows, and never more fed than either plan."""
    rng = random.Random(seed)
    for examples, grouped in ((1, True), (30, False)):
        rows = _task_answers(rng, 4, 8, examples)
        plan = micro_batches.plan_shared_micro_batches(rows, 8, None)
        assert sorted(i for b in plan for i in b) == list(range(len(rows)))
        assert all(len(b) <= 8 for b in plan)
        sharing = [micro_batches.batch_sharing([rows[i] for i in b]) for b in plan]
        assert any(groups for groups, _ in sharing) is grouped, (examples, plan)

        pooled = plan_common_prefix_micro_batches([context(r) for r in rows], [len(r.ids) for r in rows], 8, None)
        costs = [_plan_cost(rows, p) for p in (plan, pooled, micro_batches._grouped_plan(rows, 8, None))]
        assert costs[0] <= min(costs[1:])


def test_shared_length_needs_two_rows_and_the_minimum_prefix():
    assert shared_length([list(range(40))]) == 0  # one row has nothing to share
    assert shared_length([list(range(40)), list(range(40))]) == 40
    assert shared_length([list(range(40)), [*range(7), 99]]) == 0  # 7 tokens: below MIN_SHARED_PREFIX


def _own_example_rollouts(tiny_model_dir, adapters, *, seed=2):
    """Sampled answers of adapter `a` to two code_o tasks, each answer's prompt with its own worked example (as
    the solve stage draws them): every prompt distinct, all beginning with the task type's instruction."""
    tokenizer, model = load_base(tiny_model_dir)
    model = attach_multilora(model, adapters)
    examples = [
        {"program": "def f(x):\n    return x + 1", "inputs": ["1"], "outputs": ["2"]},
        {"program": "def f(s):\n    return s[::-1]", "inputs": ["'ab'"], "outputs": ["'ba'"]},
        {"program": "def f(a, b):\n    return a * b", "inputs": ["2, 3"], "outputs": ["6"]},
    ]
    tasks = [
        {"type": "code_o", "program": "def f(n):\n    return n * 2", "inputs": ["4"]},
        {"type": "code_o", "program": "def f(t):\n    return len(t)", "inputs": ["[1, 2]"]},
    ]
    chat = _chat(tokenizer)
    plans = [
        prompts.scaffolded_plan(prompts.solver_prompt(task, [example]), prompts.solver_steps("code_o"), chat)
        for task in tasks
        for example in examples
    ]
    results = run_plans(
        model,
        tokenizer,
        [GenRow(plan, "a") for plan in plans],
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=12,
        batch_size=8,
        seed=seed,
    )
    return tokenizer, results


def test_answers_with_their_own_worked_example_share_the_instruction_with_the_unshared_gradients(
    tiny_model_dir, tmp_path
):
    """No two prompts are equal, so only the instruction they begin with can be shared: computed once, with
    gradients, the log-probs, entropies, loss and every LoRA gradient equal the unshared computation's within
    1e-5 relative, and fewer tokens are fed."""
    adapters = _adapters(tiny_model_dir, tmp_path)
    tokenizer, results = _own_example_rollouts(tiny_model_dir, adapters)
    sequences = [s for i, r in enumerate(results) for s in rollout_sequences(r.segments, i, 4096)[0]]
    assert all(len(members) == 1 for members in prompt_groups(sequences).values()), "every prompt its own"
    common = shared_length([context(s) for s in sequences])
    assert common >= 20, "the chat template and the instruction"
    _, model, params = _training_a(tiny_model_dir, adapters)
    fed = assert_shared_as_unshared(tokenizer, model, params, sequences, [1.0, -0.5, 0.25, -1.0, 0.5, -0.25])
    assert sum(fed) == common + sum(len(s.ids) - common for s in sequences) + sum(
        max(len(s.ids) for s in sequences) - len(s.ids) for s in sequences
    ), "the instruction once, then every row's rest right-padded"
    assert sum(fed) == fed_tokens(sequences, list(range(len(sequences))), True)  # the update's log counts what ran


def test_rescoring_answers_with_their_own_worked_example_shares_the_instruction(tiny_model_dir, tmp_path):
    """The after-step diagnostics' scores (`shared_prefix_logprobs`) of answers that share only their
    instruction: the plain scores to float rounding, the instruction fed once a piece."""
    adapters = _adapters(tiny_model_dir, tmp_path)
    _, results = _own_example_rollouts(tiny_model_dir, adapters)
    sequences = [s for i, r in enumerate(results) for s in rollout_sequences(r.segments, i, 4096)[0]]
    fed = assert_rescoring_as_plain(tiny_model_dir, adapters, sequences, group_rows=3)
    common = shared_length([context(s) for s in sequences])
    # two pieces of 3 answers: each its instruction once (common tokens), then its rows' rests
    assert len(fed) == 4 and fed[0] == fed[2] == common
    assert sum(fed) < sum(len(s.ids) for s in sequences) - 2 * common


def test_the_update_trains_answers_with_their_own_worked_example_as_the_unshared_one(tiny_model_dir, tmp_path):
    """Through `reinforce_steps` (two steps, Adam's moments carried, micro-batches of 4): the adapter's weights
    and the diagnostics equal the unshared update's up to float rounding."""
    adapters = _adapters(tiny_model_dir, tmp_path)
    _, results = _own_example_rollouts(tiny_model_dir, adapters)
    rollouts = [
        {"segments": r.segments, "advantage": adv} for r, adv in zip(results, [1.0, -1.0, 0.5, -0.5, 0.25, 1.0])
    ]
    stats = assert_update_shared_as_unshared(tiny_model_dir, adapters, rollouts)
    assert stats["micro_batches"] == 2  # the instruction's six answers in two micro-batches of at most 4
