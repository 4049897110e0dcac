"""The update's per-step diagnostics reach each generation's metrics (populora.rl.generation_metrics)."""

from __future__ import annotations

from populora.rl.generation_metrics import STEP_DIAGNOSTICS, compute_metrics


def test_generation_metrics_carry_the_updates_diagnostics_per_step():
    step = {
        "on_policy": True,
        "loss": -0.2,
        "grad_norm": 1.5,
        "entropy": 2.0,
        "sampler_gap_mean": 1e-7,
        "sampler_gap_max": 2e-7,
        "logprob_change_positive": 0.04,
        "logprob_change_negative": -0.1,
    }
    update_stats = {
        "student0": {
            "optimizer_steps": 2,
            "trained_tokens": 100,
            "rollouts_with_signal": 8,
            "zero_advantage_share": 0.25,
            "tasks_without_spread": 1,
            "tasks_sampled_more_than_once": 4,
            "steps": [step, {**step, "on_policy": False, "logprob_change_negative": None}],
        }
    }
    metrics = compute_metrics({"tokens": {}, "rollouts": {}}, update_stats)
    for name in STEP_DIAGNOSTICS:
        assert f"update.student0.step0.{name}" in metrics
    assert metrics["update.student0.step1.logprob_change_positive"] == 0.04
    assert "update.student0.step1.logprob_change_negative" not in metrics  # no A < 0 answer: nothing to report
    assert metrics["update.student0.zero_advantage_share"] == 0.25
    assert metrics["update.student0.tasks_without_spread_share"] == 0.25
    # an adapter without signal (no optimizer step) reports no per-step figure
    quiet = compute_metrics(
        {"tokens": {}, "rollouts": {}},
        {"teacher0": {"optimizer_steps": 0, "trained_tokens": 0, "rollouts_with_signal": 0, "steps": []}},
    )
    assert not any(key.startswith("update.teacher0.step") for key in quiet)
