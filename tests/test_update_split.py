"""`update.step_rollouts: split`: the rollouts dealt out by task into `steps` disjoint shares, one optimizer step
each, so every rollout is trained on once (a pair at a population's total budget then spends what the population's
members do: `all`, the default, trains on every rollout `steps` times). On the tiny model: a split update equals
one-step updates on each share in turn, with the same AdamW, to float rounding."""

from __future__ import annotations

import doctest
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator

import populora.rl.step_schedule as schedule_module
import populora.rl.update as update_module
from populora.config import UpdateSection
from populora.lm.model import attach_adapters, load_base
from populora.rl.step_schedule import step_schedule, step_shares
from populora.rl.update import AdapterUpdate
from tests.test_generation_update import _adapters, _sampled_rollouts


@pytest.mark.parametrize("module", [schedule_module, update_module])
def test_the_modules_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


def test_shares_keep_each_tasks_rollouts_together_and_deal_tasks_in_turn():
    rows = [{"task_id": t, "k": k} for k, t in enumerate("aabcbdde")]
    shares = step_shares(rows, 3)
    assert [[r["task_id"] for r in share] for share in shares] == [["a", "a", "d", "d"], ["b", "b", "e"], ["c"]]
    assert sorted(r["k"] for share in shares for r in share) == list(range(8))  # every rollout once
    assert step_shares(rows, 1) == [[rows[k] for k in (0, 1, 2, 4, 3, 5, 6, 7)]]  # one share: all, by task
    assert len(step_shares(rows[:2], 4)) == 1  # one task: one share, however many steps
    assert [len(s) for s in step_shares([{}, {}, {}], 2)] == [2, 1]  # no task: each rollout its own


def test_the_schedule_steps_over_each_loss_as_the_mode_says():
    config = SimpleNamespace(steps=2, step_rollouts="all")
    propose = [{"task_id": "p", "advantage": 1.0}, {"task_id": "q", "advantage": 0.0}]
    solve = [{"task_id": t, "advantage": a} for t, a in (("x", 1.0), ("x", -1.0), ("y", 0.0), ("y", 0.0))]
    losses, rounds = step_schedule([propose, solve], config)
    assert rounds == [[0, 1], [0, 1]] and [counted for _, counted in losses] == [2, 4]
    assert [len(rows) for rows, _ in losses] == [1, 2]  # the rollouts with signal
    losses, rounds = step_schedule([propose, solve], SimpleNamespace(steps=2, step_rollouts="split"))
    assert rounds == [[0, 2], [1, 3]]  # round k: the k-th share of each role
    assert [[r["task_id"] for r in rows] for rows, _ in losses] == [["p"], [], ["x", "x"], []]
    assert [counted for _, counted in losses] == [1, 1, 2, 2]  # normalize batch: each share's own rollouts
    with pytest.raises(Exception, match="step_rollouts"):
        UpdateSection(step_rollouts="halves")


def _update(tiny_model_dir, adapters, **knobs):
    tokenizer, model = load_base(tiny_model_dir)
    tokenizer.padding_side = "right"
    model = attach_adapters(model, adapters, trainable="a")
    model.set_adapter("a")
    config = UpdateSection(learning_rate=1e-3, micro_batch=2, max_seq_len=4096, **knobs)
    return model, AdapterUpdate(Accelerator(cpu=True), model, tokenizer, "a", config)


def _lora(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n and ".a." in f".{n}."}


def test_a_split_update_is_one_step_on_each_share_in_turn(tiny_model_dir, tmp_path):
    adapters = _adapters(tiny_model_dir, tmp_path)
    rows, results = _sampled_rollouts(tiny_model_dir, adapters)
    mine = [r for row, r in zip(rows, results) if row.adapter == "a"]
    assert len(mine) == 4
    # four tasks of one answer, advantages of both signs in each share, and a fifth task without signal
    rollouts = [
        {"segments": r.segments, "task_id": f"t{k}", "advantage": advantage}
        for k, (r, advantage) in enumerate(zip(mine, (1.0, -1.0, -0.5, 0.5)))
    ]
    rollouts.append({"segments": mine[0].segments, "task_id": "t4", "advantage": 0.0})
    split_model, split = _update(tiny_model_dir, adapters, steps=2, step_rollouts="split")
    stats = split.train(rollouts)
    assert stats["optimizer_steps"] == 2 and [row["on_policy"] for row in stats["steps"]] == [True, False]
    assert all(row["logprob_change_positive"] is not None for row in stats["steps"])  # each step re-scored its share

    shares = step_shares(rollouts, 2)
    turn_model, turn = _update(tiny_model_dir, adapters, steps=1)
    for share in shares:
        turn.train(share)
    split_weights, turn_weights = _lora(split_model), _lora(turn_model)
    assert split_weights and split_weights.keys() == turn_weights.keys()
    for name, weight in split_weights.items():
        torch.testing.assert_close(weight, turn_weights[name], rtol=1e-5, atol=1e-7, msg=name)

    # every rollout trained on once: the tokens are those of one epoch, where `all` at two steps trains on each twice
    all_model, epochs = _update(tiny_model_dir, adapters, steps=2)
    both = epochs.train(rollouts)
    assert stats["trained_tokens"] == both["trained_tokens"] and both["optimizer_steps"] == 2
    assert sum(t["tokens"] for t in split.timings) * 2 == sum(t["tokens"] for t in epochs.timings)
    moved = [(all_model.get_parameter(n) - w).abs().max() for n, w in split_weights.items()]
    assert max(float(m) for m in moved) > 1e-6  # a different update: the test can tell the modes apart
