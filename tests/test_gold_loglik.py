"""Teacher-forced gold-answer log-likelihood (populora.bench.gold_loglik) on the tiny random model."""

from __future__ import annotations

import pytest
import torch

from populora.bench.gold_loglik import GoldItem, gold_logprobs
from populora.lm.model import load_base
from populora.lm.multilora import attach_multilora
from tests.test_generation_update import _adapters


def _manual(model, tokenizer, context: str, gold: str) -> float:
    c = tokenizer(context, add_special_tokens=False)["input_ids"]
    g = tokenizer(gold, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([c + g])).logits[0]
    scores = torch.log_softmax(logits.float(), -1)
    return float(sum(scores[len(c) + k - 1, t] for k, t in enumerate(g)))


def test_gold_logprobs_equal_a_plain_forward_and_follow_the_adapter(tiny_model_dir, tmp_path):
    tokenizer, model = load_base(tiny_model_dir)
    items = [
        GoldItem("```python\ndef f(a, b):\n    return a + b\n```\n```output\n", "3\n```"),
        GoldItem("short", "'Hello world'"),
        GoldItem("x", ""),
    ]
    scored = gold_logprobs(model, tokenizer, items, batch_size=2)
    for item, (value, n) in zip(items[:2], scored[:2]):
        assert n == len(tokenizer(item.gold, add_special_tokens=False)["input_ids"])
        assert value == pytest.approx(_manual(model, tokenizer, item.context, item.gold), abs=1e-4)
    assert scored[2] == (0.0, 0)  # nothing to score
    adapters = _adapters(tiny_model_dir, tmp_path)
    _, plain = load_base(tiny_model_dir)
    stacked = attach_multilora(plain, adapters)
    mixed = gold_logprobs(stacked, tokenizer, [GoldItem(items[0].context, items[0].gold, a) for a in (None, "a", "b")])
    assert mixed[0][0] == pytest.approx(scored[0][0], abs=1e-4)  # no adapter: the base
    assert len({round(v, 4) for v, _ in mixed}) == 3  # each adapter scores the gold its own way


def test_items_naming_adapters_need_a_multi_lora_model(tiny_model_dir):
    tokenizer, model = load_base(tiny_model_dir)
    with pytest.raises(ValueError, match="attach_multilora"):
        gold_logprobs(model, tokenizer, [GoldItem("a", "b", "student0")])


def test_gold_scored_in_the_generation_prefill_equals_its_own_pass(tiny_model_dir, tmp_path):
    """A row's gold, scored in the prefill its generation starts from (hf engine, carried cache), gives
    the same log-likelihood as `gold_logprobs`' pass of its own, and the greedy answers are those of
    a generation without golds; without a carried cache nothing is scored."""
    from populora.lm.sampling import GenRow, run_plans
    from populora.tasks import prompts

    tokenizer, plain = load_base(tiny_model_dir)
    model = attach_multilora(plain, _adapters(tiny_model_dir, tmp_path))

    def chat(p):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": p}],
            tokenize=False,
            add_generation_prompt=True,
        )

    plans = [
        prompts.Plan(prompt=chat(text), steps=(prompts.Step("```output\n", stop="```"),))
        for text in ("def f(x): return x + 1\nf(2)?", "What does f('ab') give for a much longer prompt here?")
    ]
    golds = ["3\n```", "'abab'\n```", "[1, 2, 3, 4, 5, 6, 7, 8]\n```"]
    rows = [GenRow(plan, adapter, gold) for adapter in ("a", "b", None) for plan in plans for gold in golds]
    kwargs = dict(temperature=0, top_p=1.0, max_new_tokens=6, batch_size=4, seed=0)
    scored = run_plans(model, tokenizer, rows, **kwargs)
    plain_rows = [GenRow(row.plan, row.adapter) for row in rows]
    assert [r.completion for r in scored] == [r.completion for r in run_plans(model, tokenizer, plain_rows, **kwargs)]
    alone = gold_logprobs(
        model, tokenizer, [GoldItem(r.plan.prompt + r.plan.steps[0].prefill, r.gold, r.adapter) for r in rows]
    )
    for result, (value, n) in zip(scored, alone):
        assert result.gold[1] == n
        assert result.gold[0] == pytest.approx(value, abs=1e-4)
    assert all(r.gold is None for r in run_plans(model, tokenizer, rows, carry_cache=False, **kwargs))
