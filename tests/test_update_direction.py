"""The update moves the policy the way the advantages say: one step raises the log-prob of answers
with A > 0 and lowers that of answers with A < 0 (tiny random model). With the sign of the loss
flipped the same check reverses, so the direction test can fail."""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

import populora.rl.update as update_module
from populora.config import UpdateSection
from populora.lm.model import attach_adapters, load_base
from populora.rl.update import AdapterUpdate, rollout_sequences, selected_logprobs
from tests.test_generation_update import _adapters, _sampled_rollouts


def _mean_logprobs(model, tokenizer, rollouts) -> list[float]:
    """Per rollout, the mean log-prob of its trained tokens under the model as it is now."""
    out = []
    with torch.no_grad():
        for index, rollout in enumerate(rollouts):
            sequences, _ = rollout_sequences(rollout["segments"], index, 4096)
            out.append(float(selected_logprobs(model, sequences, tokenizer.pad_token_id, "cpu").mean()))
    return out


def _one_step(tiny_model_dir, tmp_path, without_signal: int = 0, **knobs) -> tuple[dict, list[float], list[float]]:
    """One step on the adapter's sampled rollouts (advantages +1, -1, ...), plus `without_signal` copies of the
    first with advantage 0."""
    adapters = _adapters(tiny_model_dir, tmp_path)
    rows, results = _sampled_rollouts(tiny_model_dir, adapters)
    mine = [r for row, r in zip(rows, results) if row.adapter == "a"]
    rollouts = [{"segments": r.segments, "advantage": 1.0 if k % 2 == 0 else -1.0} for k, r in enumerate(mine)]
    rollouts += [{"segments": mine[0].segments, "advantage": 0.0} for _ in range(without_signal)]
    tokenizer, model = load_base(tiny_model_dir)
    tokenizer.padding_side = "right"
    model = attach_adapters(model, adapters, trainable="a")
    model.set_adapter("a")
    before = _mean_logprobs(model, tokenizer, rollouts)
    update = AdapterUpdate(
        Accelerator(cpu=True),
        model,
        tokenizer,
        "a",
        UpdateSection(steps=1, learning_rate=1e-3, micro_batch=2, max_seq_len=4096, **knobs),
    )
    stats = update.train(rollouts)
    after = _mean_logprobs(model, tokenizer, rollouts)
    change = [b - a for a, b in zip(before, after)]
    positive = [c for c, r in zip(change, rollouts) if r["advantage"] > 0]
    negative = [c for c, r in zip(change, rollouts) if r["advantage"] < 0]
    return stats, positive, negative


def test_one_step_raises_answers_with_positive_advantage_and_lowers_the_others(tiny_model_dir, tmp_path):
    stats, positive, negative = _one_step(tiny_model_dir, tmp_path)
    assert sum(positive) / len(positive) > 0 > sum(negative) / len(negative), (positive, negative)
    # the update's own diagnostic says the same, measured on the same tokens
    step = stats["steps"][0]
    assert step["logprob_change_positive"] == pytest.approx(sum(positive) / len(positive), rel=1e-3, abs=1e-6)
    assert step["logprob_change_negative"] == pytest.approx(sum(negative) / len(negative), rel=1e-3, abs=1e-6)
    assert step["on_policy"] and step["sampler_gap_mean"] < 1e-4
    assert step["grad_norm"] > 0 and step["entropy"] > 0


@pytest.mark.parametrize(
    "knobs",
    [
        {"loss_type": "token"},
        {"loss_type": "constant"},
        {"importance_sampling_mode": "sequence_mask"},
        {"importance_sampling_mode": "token_truncate", "importance_sampling_cap": 1.0},
    ],
)
def test_every_loss_type_and_importance_correction_moves_the_right_way(tiny_model_dir, tmp_path, knobs):
    """The update's knobs (issue 49: TRL's loss_type, its importance sampling modes) change the weights, not
    the direction: on-policy in float32 every importance ratio is 1 up to rounding."""
    _, positive, negative = _one_step(tiny_model_dir, tmp_path, **knobs)
    assert sum(positive) / len(positive) > 0 > sum(negative) / len(negative), (positive, negative)


def test_batch_normalisation_averages_over_every_rollout(tiny_model_dir, tmp_path):
    """update.normalize: batch counts the rollouts without signal in the mean (GRPO's group mean), so the same
    rollouts with signal beside as many without take half the step's loss; signal ignores them."""
    for arm in ("signal", "batch"):
        (tmp_path / arm).mkdir()
    signal, _, _ = _one_step(tiny_model_dir, tmp_path / "signal", without_signal=4)
    batch, positive, negative = _one_step(tiny_model_dir, tmp_path / "batch", without_signal=4, normalize="batch")
    with_signal = signal["rollouts_with_signal"]
    assert batch["rollouts"] == with_signal + 4 and batch["rollouts_with_signal"] == with_signal
    share = with_signal / (with_signal + 4)
    assert batch["steps"][0]["loss"] == pytest.approx(signal["steps"][0]["loss"] * share, rel=1e-5)
    assert sum(positive) / len(positive) > 0 > sum(negative) / len(negative), (positive, negative)


def test_the_direction_check_fails_when_the_sign_is_flipped(tiny_model_dir, tmp_path, monkeypatch):
    """An update whose loss had the wrong sign (gradient ascent on -A) would be caught."""
    right = update_module.token_weights
    monkeypatch.setattr(update_module, "token_weights", lambda *a, **k: [-w for w in right(*a, **k)])
    _, positive, negative = _one_step(tiny_model_dir, tmp_path)
    assert sum(positive) / len(positive) < 0 < sum(negative) / len(negative), (positive, negative)


def test_chained_diagnostics_equal_a_rescoring_after_every_step(tiny_model_dir, tmp_path, monkeypatch):
    """With one loss and several steps, step k's "after" scores are step k + 1's forward: the same
    figures as scoring again after every step, with one re-scoring pass instead of one per step."""
    adapters = _adapters(tiny_model_dir, tmp_path)
    rows, results = _sampled_rollouts(tiny_model_dir, adapters)
    mine = [r for row, r in zip(rows, results) if row.adapter == "a"]
    rollouts = [{"segments": r.segments, "advantage": 1.0 if k % 2 == 0 else -1.0} for k, r in enumerate(mine)]
    runs, rescores = {}, {}
    for chained in (True, False):
        monkeypatch.setattr(AdapterUpdate, "CHAIN_DIAGNOSTICS", chained)
        tokenizer, model = load_base(tiny_model_dir)
        tokenizer.padding_side = "right"
        model = attach_adapters(model, adapters, trainable="a")
        update = AdapterUpdate(
            Accelerator(cpu=True),
            model,
            tokenizer,
            "a",
            UpdateSection(steps=3, learning_rate=1e-3, micro_batch=2, max_seq_len=4096),
        )
        runs[chained] = update.train(rollouts)
        rescores[chained] = sum(t["rescore_s"] > 0 for t in update.timings)
    assert rescores == {True: 1, False: 3}
    for a, b in zip(runs[True]["steps"], runs[False]["steps"]):
        for key in ("loss", "grad_norm"):
            assert a[key] == pytest.approx(b[key], rel=1e-6, abs=1e-9), key
        for key in ("logprob_change_positive", "logprob_change_negative"):  # the re-scoring shares prompts: rounding
            assert a[key] == pytest.approx(b[key], rel=1e-3, abs=1e-6), key
