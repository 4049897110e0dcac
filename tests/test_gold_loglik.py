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
    items = [GoldItem("```python\ndef f(a, b):\n    return a + b\n```\n```output\n", "3\n```"),
             GoldItem("short", "'Hello world'"), GoldItem("x", "")]
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
