"""Decode compaction (populora.lm.sampling): rows that stopped leave the batch, and every row still samples
exactly what it sampled in the full batch, greedy or at temperature > 0, adapters mixed: in a plan's last
step after a carried cache, in a step before the last (the rows come back for the next) and in a fresh batch.

    python -m pytest -m "" -n 0 tests/test_compaction.py -q
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from populora.lm.sampling import GenRow, draw_categorical, run_plans, sample_batch
from populora.tasks.plans import Plan
from tests.test_prefix_cache import INSTRUCTION, _model, _rows

STOPS = ("e", "a", "o", "i", "t", " ")


@pytest.mark.parametrize("seed", range(5))
def test_a_compacted_draw_hands_each_row_its_uncompacted_number(seed):
    """What a compacted batch's draw relies on: a row's sample depends on its own distribution and its place in
    the full batch only, so the rows still running draw what they drew with every row there."""
    probs = torch.softmax(torch.randn(6, 300, generator=torch.Generator().manual_seed(100 + seed)) * 3, -1)
    full = draw_categorical(probs, torch.Generator().manual_seed(seed))
    alive = [0, 2, 3, 5]
    drawn = draw_categorical(probs[alive], torch.Generator().manual_seed(seed), alive=alive, rows=6)
    assert drawn.tolist() == full[alive].tolist()


def test_the_draw_follows_the_distribution_and_never_picks_a_token_of_probability_zero():
    """Inverse transform against the cumulative sum: each index as often as its probability says (10,000 a row,
    within 5 standard errors), none of probability 0 (cut by top-p or suppressed), at either end of the row."""
    probs = torch.tensor([[0.0, 0.1, 0.0, 0.6, 0.3, 0.0], [0.5, 0.0, 0.0, 0.0, 0.0, 0.5]])
    counts = torch.zeros_like(probs)
    generator = torch.Generator().manual_seed(0)
    for _ in range(20):
        drawn = draw_categorical(probs.repeat(500, 1), generator).view(500, 2)
        for row in range(2):
            counts[row] += torch.bincount(drawn[:, row], minlength=6)
    share = counts / counts.sum(-1, keepdim=True)
    assert bool((counts[probs == 0] == 0).all())
    error = (probs * (1 - probs) / 10_000).sqrt()
    assert bool(((share - probs).abs() <= 5 * error + 1e-9).all()), share


def _decode_rows(model) -> list[int]:
    """Wrap `model.forward` to record the rows of each decode step (one token a row)."""
    rows: list[int] = []
    forward = model.forward

    def counting(*args, **kwargs):
        if kwargs["input_ids"].shape[1] == 1:
            rows.append(kwargs["input_ids"].shape[0])
        return forward(*args, **kwargs)

    model.forward = counting
    return rows


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_compacted_plan_run_samples_what_the_full_batches_sample(tiny_model_dir, tmp_path, temperature):
    tokenizer, model = _model(tiny_model_dir, tmp_path)
    # the last step stops on any of a few common letters: rows end at different steps of it
    rows = [
        GenRow(Plan(row.plan.prompt, (*row.plan.steps[:-1], replace(row.plan.steps[-1], stop=STOPS))), row.adapter)
        for row in _rows(tokenizer)
    ]
    assert_compacted_as_full(model, tokenizer, rows, temperature=temperature, seed=3)


def assert_compacted_as_full(model, tokenizer, rows: list[GenRow], *, temperature: float, seed: int) -> None:
    """`run_plans` with compaction samples every row's tokens as without it, scores up to float rounding, and
    decodes fewer rows."""
    kwargs = dict(temperature=temperature, top_p=0.9, max_new_tokens=8, batch_size=12, seed=seed)
    results, decoded = {}, {}
    for compact in (True, False):
        decoded[compact] = _decode_rows(model)
        results[compact] = run_plans(model, tokenizer, rows, compact=compact, **kwargs)
        model.forward = type(model).forward.__get__(model)
    for compacted, full in zip(results[True], results[False]):
        assert [s["ids"] for s in compacted.segments] == [s["ids"] for s in full.segments]
        assert compacted.truncated == full.truncated
        for a, b in zip(compacted.segments, full.segments):
            assert a.get("logprobs", []) == pytest.approx(b.get("logprobs", []), abs=1e-5)
    assert sum(decoded[True]) < sum(decoded[False]), (decoded[True], decoded[False])


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_rows_that_left_a_plan_step_come_back_for_the_next(tiny_model_dir, tmp_path, temperature, monkeypatch):
    """Compaction in a plan step that is not the last: the rows that stopped are parked out of the batch and
    restored into its carried cache (`CarriedCache.park`, `restore`), then the next step feeds every row again.
    Every step's tokens are those of the uncompacted run (a restore that put a row's keys and values in the
    wrong place or at the wrong width would change what the next step samples), scores up to float rounding."""
    from populora.lm.prefix_cache import CarriedCache

    tokenizer, model = _model(tiny_model_dir, tmp_path)
    rows = []
    for row in _rows(tokenizer):
        # rows stop at different tokens of step one, and every row goes on to step two
        first = replace(row.plan.steps[0], stop=STOPS, max_tokens=8, must_stop=False)
        then = replace(row.plan.steps[0], prefill="\nSo:\n", stop=STOPS, max_tokens=6, must_stop=False)
        rows.append(GenRow(Plan(row.plan.prompt, (first, then)), row.adapter))
    restores = []
    restore = CarriedCache.restore
    monkeypatch.setattr(
        CarriedCache, "restore", lambda self, alive: (restores.append(len(alive)), restore(self, alive))
    )
    assert_compacted_as_full(model, tokenizer, rows, temperature=temperature, seed=5)
    assert restores, "no step before the last compacted its batch: the test lost its point"


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_a_fresh_compacted_batch_keeps_each_row_s_tokens(tiny_model_dir, tmp_path, temperature):
    """sample_batch on its own (no carried cache, no shared prefill either), adapters mixed, half the rows
    skipped (done from the start: the first compaction drops them) and the others stopping on a few
    common letters: the same tokens and scores, fewer rows decoded."""
    tokenizer, model = _model(tiny_model_dir, tmp_path)
    prefix = tokenizer(INSTRUCTION, add_special_tokens=False)["input_ids"]
    tails = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in ("x = 1", "def f(a):", "s = 'ab'")]
    contexts = [prefix + tails[k % 3] for k in range(8)]
    adapters = ["a", "b", None, "z", "a", "b", "a", None]
    out, decoded = {}, {}
    for compact in (True, False):
        decoded[compact] = _decode_rows(model)
        out[compact] = sample_batch(
            model,
            tokenizer,
            contexts,
            budget=12,
            stops=STOPS,
            suppress_first=None,
            temperature=temperature,
            top_p=1.0,
            generator=torch.Generator().manual_seed(1),
            adapters=adapters,
            share_prefixes=False,
            compact=compact,
            skip=[k % 2 == 1 for k in range(8)],
        )
        model.forward = type(model).forward.__get__(model)
    for a, b in zip(out[True], out[False]):
        assert a.ids == b.ids and a.hit_eos == b.hit_eos
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
    assert all(not row.ids for row in out[True][1::2])  # skipped rows sample nothing
    assert sum(decoded[True]) < sum(decoded[False])
