"""Shared-prefix prefill (populora.lm.prefix_cache) on the tiny random model: the same tokens and scores
as prefilling every row on its own, and far fewer tokens fed.

    python -m pytest -m "" -n 0 tests/test_prefix_cache.py -q
"""

from __future__ import annotations

import pytest
import torch

from populora.lm.adapters import create_adapters
from populora.lm.model import load_base, lora_config
from populora.lm.multilora import attach_multilora
from populora.lm.prefix_cache import CarriedCache, common_prefix, kv_key, shared_prefill
from populora.lm.sampling import GenRow, run_plans, sample_batch
from populora.tasks import prompts
from tests.test_generation_update import _adapters, _chat, _count_fed_tokens

INSTRUCTION = (
    "You are given a Python function and an input. Predict the output exactly. Worked example:\n"
    "```python\ndef f(a, b):\n    return a + b\n```\n```input\n1, 2\n```\n```output\n3\n```\nNow:\n"
)


def _model(tiny_model_dir, tmp_path):
    adapters = _adapters(tiny_model_dir, tmp_path, names=("a", "b"))
    _, model = load_base(tiny_model_dir)
    zero = tmp_path / "zero"
    create_adapters(
        model, ["z"], zero, lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"]), seeds={"z": 9}, init_std=0.0
    )  # PEFT's init, B = 0: the base model's numbers exactly
    tokenizer, model = load_base(tiny_model_dir)
    return tokenizer, attach_multilora(model, {**adapters, "z": zero / "z"})


def _rows(tokenizer, samples: int = 3) -> list[GenRow]:
    """Solve-like rows: prompts sharing an instruction, several samples of each, adapters mixed
    (a zero adapter among them), two- and one-step plans."""
    chat = _chat(tokenizer)
    tasks = [
        "def f(x):\n    return x * 2\n```input\n4",
        "def f(s):\n    return s.upper()\n```input\n'ab'",
        "def f(n):\n    return [i for i in range(n)]\n```input\n3 and a longer tail to pad the others",
    ]
    two_steps = (
        prompts.Step("```output\n", stop="```", max_tokens=6),
        prompts.Step("\nWhy:\n", stop=("e", "a"), max_tokens=5, must_stop=False),
    )
    rows = []
    for adapter in ("a", "b", None, "z"):
        for k, task in enumerate(tasks):
            steps = two_steps if k < 2 else two_steps[:1]
            rows += [GenRow(prompts.Plan(chat(INSTRUCTION + task), steps), adapter)] * samples
    return rows


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_shared_prefill_samples_what_separate_prefills_sample(tiny_model_dir, tmp_path, temperature):
    tokenizer, model = _model(tiny_model_dir, tmp_path)
    rows = _rows(tokenizer)
    kwargs = dict(temperature=temperature, top_p=0.9, max_new_tokens=8, batch_size=12, seed=3)
    results, fed = {}, {}
    for share in (True, False):
        fed[share] = _count_fed_tokens(model)
        results[share] = run_plans(model, tokenizer, rows, share_prefixes=share, **kwargs)
        model.forward = type(model).forward.__get__(model)
    for shared, alone in zip(results[True], results[False]):
        assert [s["ids"] for s in shared.segments] == [s["ids"] for s in alone.segments]
        assert shared.truncated == alone.truncated
        for a, b in zip(shared.segments, alone.segments):
            assert a.get("logprobs", []) == pytest.approx(b.get("logprobs", []), abs=1e-5)
    if temperature > 0:  # the samples of one prompt differ: the copies of its cache are independent
        assert len({tuple(r.segments[2]["ids"]) for r in results[True][:3]}) > 1
    assert sum(fed[True]) < 0.5 * sum(fed[False]), (sum(fed[True]), sum(fed[False]))


def test_gold_scores_and_answers_unchanged_by_sharing(tiny_model_dir, tmp_path):
    tokenizer, model = _model(tiny_model_dir, tmp_path)
    golds = ["8\n```", "'AB'\n```", "[0, 1, 2]\n```"]
    rows = [GenRow(row.plan, row.adapter, golds[k % 3]) for k, row in enumerate(_rows(tokenizer, samples=1))]
    kwargs = dict(temperature=0.0, top_p=1.0, max_new_tokens=8, batch_size=6, seed=0)
    shared = run_plans(model, tokenizer, rows, **kwargs)
    alone = run_plans(model, tokenizer, rows, share_prefixes=False, **kwargs)
    for a, b in zip(shared, alone):
        assert [s["ids"] for s in a.segments] == [s["ids"] for s in b.segments]
        assert a.gold[1] == b.gold[1] and a.gold[0] == pytest.approx(b.gold[0], abs=1e-5)


def test_fresh_sample_batch_shares_and_matches(tiny_model_dir, tmp_path):
    """sample_batch without a carried cache (perf/generation.py's call) shares too, with the same draws."""
    tokenizer, model = _model(tiny_model_dir, tmp_path)
    prefix = tokenizer(INSTRUCTION, add_special_tokens=False)["input_ids"]
    tails = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("x = 1", "def f(a):\n    return a")]
    contexts = [prefix + tails[k % 2] for k in range(8)]
    adapters = ["a", "a", "b", "b", None, "z", "a", "b"]
    out = {}
    for share in (True, False):
        out[share] = sample_batch(
            model,
            tokenizer,
            contexts,
            budget=10,
            stops=(),
            suppress_first=None,
            temperature=0.9,
            top_p=1.0,
            generator=torch.Generator().manual_seed(1),
            adapters=adapters,
            share_prefixes=share,
        )
    for a, b in zip(out[True], out[False]):
        assert a.ids == b.ids and a.logprobs == pytest.approx(b.logprobs, abs=1e-5)


def test_prefix_bookkeeping(tiny_model_dir, tmp_path):
    tokenizer, model = _model(tiny_model_dir, tmp_path)
    assert common_prefix([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2 and common_prefix([[1], [2]]) == 0
    assert model.zero_adapters == {"z"} and kv_key(model, "z") is None and kv_key(model, "a") == "a"
    contexts = [list(range(3, 23)) + [30, 31], list(range(3, 23)) + [32], list(range(3, 23)) + [30, 31]]
    carried = CarriedCache(model, 3)
    logits = shared_prefill(model, carried, contexts, ["a", "a", "a"], tails=[1, 1, 1], pad=0, device="cpu")
    # the prefix once, then rows 0 and 2 (equal) share one slot layout: 20 shared + 2 padded columns
    assert carried.width == 22 and carried.slots[0] == carried.slots[2] == list(range(22))
    assert carried.slots[1] == [*range(20), 21] and carried.attention[1].tolist() == [1] * 20 + [0, 1]
    torch.testing.assert_close(logits[0], logits[2], rtol=0, atol=0)
    nothing = CarriedCache(model, 2)  # no prefix, no duplicate: left to the ordinary prefill
    assert shared_prefill(model, nothing, [[5, 6], [7, 8]], ["a", "b"], tails=[1, 1], pad=0, device="cpu") is None
    assert nothing.width == 0


def test_update_rescoring_with_shared_prompts_equals_the_plain_scoring(tiny_model_dir, tmp_path):
    """The update's after-step scores (`shared_prefix_logprobs`: a prompt once for its samples) equal
    `selected_logprobs`' to float rounding, multi-step plans (branches) and suppression included."""
    from populora.rl.sequences import rollout_sequences
    from tests.test_generation_update import _sampled_rollouts

    adapters = _adapters(tiny_model_dir, tmp_path)
    rows, results = _sampled_rollouts(tiny_model_dir, adapters)
    sequences = [s for k, r in enumerate(results) for s in rollout_sequences(r.segments, k, 4096)[0]]
    fed = assert_rescoring_as_plain(tiny_model_dir, adapters, sequences, group_rows=3)
    assert sum(fed) < sum(len(s.ids) for s in sequences), "the shared prompts were fed once"


def assert_rescoring_as_plain(tiny_model_dir, adapters, sequences, *, group_rows: int) -> list[int]:
    """`shared_prefix_logprobs` under adapter `a` equals `selected_logprobs`' to float rounding; returns the tokens
    each of its forwards embedded (rows x width)."""
    from populora.lm.model import attach_adapters
    from populora.rl.sequences import selected_logprobs, shared_prefix_logprobs

    tokenizer, base = load_base(tiny_model_dir)
    peft = attach_adapters(base, adapters)
    peft.set_adapter("a")
    with torch.no_grad():
        plain = selected_logprobs(peft, sequences, tokenizer.pad_token_id, "cpu")
    fed: list[int] = []
    hook = peft.get_input_embeddings().register_forward_hook(lambda module, args, out: fed.append(args[0].numel()))
    shared = shared_prefix_logprobs(peft, sequences, tokenizer.pad_token_id, "cpu", group_rows=group_rows)
    hook.remove()
    torch.testing.assert_close(shared, plain, atol=1e-5, rtol=0)
    return fed


def test_greedy_batches_group_prompts_by_their_instruction():
    """cheapest_order: prompts of two instructions whose lengths interleave. Ordered by length, a batch
    holds both and shares nothing; grouped by their first tokens, each batch shares its instruction."""
    from populora.lm.prefix_cache import cheapest_order, prefill_cost

    first, second = list(range(100, 140)), list(range(200, 240))  # two 40-token instructions
    contexts = [(first if k % 2 else second) + [7] * (3 + k) for k in range(8)]
    keys, groups = [None] * 8, [0] * 8

    def batches(order):
        return [order[:4], order[4:]]

    def cost(order):
        return sum(prefill_cost([contexts[i] for i in b], [keys[i] for i in b]) for b in batches(order))

    by_length = sorted(range(8), key=lambda i: len(contexts[i]))
    chosen = cheapest_order(contexts, keys, groups, batches)
    assert sorted(chosen) == list(range(8))
    assert {i % 2 for i in chosen[:4]} == {1} and {i % 2 for i in chosen[4:]} == {0}  # an instruction a batch
    assert cost(chosen) < cost(by_length)
    # groups come first: a row never joins a batch of another group
    split = cheapest_order(contexts, keys, [i % 2 == 0 for i in range(8)], batches)
    assert [i % 2 for i in split] == [1] * 4 + [0] * 4
    same = [list(range(100, 140)) + [7] * k for k in range(1, 9)]  # one instruction: the length order stands
    assert cheapest_order(same, keys, groups, batches) == list(range(8))
