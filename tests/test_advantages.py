import doctest
import math
import statistics

import pytest
import torch

from populora.rl import advantages
from populora.rl.advantages import (
    group_key,
    group_stats,
    reinforce_loss,
    sequence_logprobs,
    whiten_advantages,
)


def test_whitening_is_per_group():
    rewards = [1.0, -0.5, -0.5, -0.5, 0.75, 0.0, 0.25]
    groups = ["solve/code_o"] * 4 + ["propose/code_o"] * 3
    adv = whiten_advantages(rewards, groups)
    for key in set(groups):
        idx = [i for i, g in enumerate(groups) if g == key]
        values = [adv[i] for i in idx]
        assert math.isclose(statistics.fmean(values), 0.0, abs_tol=1e-9)
        assert math.isclose(statistics.pstdev(values), 1.0, rel_tol=1e-4)
    # check one value by hand: solve group mean -0.125, pstd 0.6495...
    mean = statistics.fmean(rewards[:4])
    std = statistics.pstdev(rewards[:4])
    assert adv[0] == pytest.approx((1.0 - mean) / (std + advantages.EPS))


def test_other_groups_do_not_change_statistics():
    base = whiten_advantages([1.0, 0.0, -1.0], ["a", "a", "a"])
    mixed = whiten_advantages([1.0, 100.0, 0.0, -100.0, -1.0], ["a", "b", "a", "b", "a"])
    assert [mixed[0], mixed[2], mixed[4]] == base


@pytest.mark.parametrize(
    ("rewards", "groups"),
    [
        ([0.5], ["solo"]),  # single member
        ([-0.5, -0.5, -0.5], ["g", "g", "g"]),  # zero variance
        ([], []),
    ],
)
def test_degenerate_groups_give_zero(rewards, groups):
    assert whiten_advantages(rewards, groups) == [0.0] * len(rewards)


def test_none_rewards_are_excluded():
    adv = whiten_advantages([1.0, None, 0.0], ["g", "g", "g"])
    assert adv[1] is None
    assert adv[0] == pytest.approx(1.0, rel=1e-4)
    assert adv[2] == pytest.approx(-1.0, rel=1e-4)
    assert group_stats([1.0, None, 0.0], ["g"] * 3)["g"]["n"] == 2


def test_per_sequence_not_length_weighted():
    # Statistics depend only on the reward list: no lengths are involved at all.
    adv = whiten_advantages([1.0, 0.0, 0.0, 0.0], ["g"] * 4)
    assert adv[0] == pytest.approx(3 / math.sqrt(3), rel=1e-5)


def test_bad_inputs():
    with pytest.raises(ValueError):
        whiten_advantages([1.0], ["a", "b"])
    with pytest.raises(ValueError):
        whiten_advantages([float("nan"), 1.0], ["a", "a"])


def test_group_key():
    assert group_key("propose", "code_f") == "propose/code_f"


def test_sequence_logprobs_mean_and_sum():
    lp = torch.tensor([[-1.0, -2.0, -9.0], [-4.0, -9.0, -9.0], [-9.0, -9.0, -9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
    assert sequence_logprobs(lp, mask, "mean").tolist() == [-1.5, -4.0, 0.0]
    assert sequence_logprobs(lp, mask, "sum").tolist() == [-3.0, -4.0, 0.0]
    with pytest.raises(ValueError):
        sequence_logprobs(lp, mask, "max")


def test_reinforce_loss_value_and_gradient():
    lp = torch.tensor([[-1.0, -2.0, -5.0], [-4.0, -6.0, -8.0]], requires_grad=True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    loss = reinforce_loss(lp, [2.0, -1.0], mask)
    # seq means: -1.5 and -6.0 -> loss = -(2 * -1.5 + -1 * -6) / 2 = -1.5
    assert loss.item() == pytest.approx(-1.5)
    loss.backward()
    # d loss / d lp[i, t] = -A_i / (2 * len_i) on masked tokens, 0 elsewhere
    expected = torch.tensor([[-0.5, -0.5, 0.0], [1 / 6, 1 / 6, 1 / 6]])
    assert torch.allclose(lp.grad, expected)


def test_reinforce_loss_sum_reduction_and_1d():
    lp = torch.tensor([[-1.0, -2.0], [-3.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    assert reinforce_loss(lp, [1.0, 1.0], mask, token_reduction="sum").item() == pytest.approx(3.0)
    assert reinforce_loss(torch.tensor([-3.0, -3.0]), [1.0, 1.0]).item() == pytest.approx(3.0)
    with pytest.raises(ValueError):
        reinforce_loss(lp, [1.0, 1.0])  # 2-D without mask
    with pytest.raises(ValueError):
        reinforce_loss(torch.tensor([-1.0]), [1.0, 2.0])


REWARDS = [1.0, -0.5, -0.5, 1.0, 1.0, -1.0, None, -0.5, 1.0, 0.0]
TASKS = ["t", "t", "t", "u", "u", "v", "v", "v", "w", "w"]
ADAPTERS = ["a"] * 5 + ["b"] * 5


def test_answer_advantages_keep_the_published_estimators_to_the_bit():
    """trr++ with group scaling is AZR's whitening, per_task with none is RLOO: the defaults of before
    `reward.scale_rewards` existed give the same floats."""
    answers = advantages.answer_advantages
    assert answers(REWARDS, TASKS, ADAPTERS, "trr++", "group") == whiten_advantages(REWARDS, TASKS)
    assert answers(REWARDS, TASKS, ADAPTERS, "per_task", "none") == advantages.leave_one_out_advantages(REWARDS, TASKS)


def test_answer_advantages_scale_by_group_batch_or_nothing():
    answers = advantages.answer_advantages
    stats = group_stats(REWARDS, TASKS)
    loo = advantages.leave_one_out_advantages(REWARDS, TASKS)
    centred = answers(REWARDS, TASKS, ADAPTERS, "trr++", "none")
    assert centred[:3] == [1.0 - stats["t"]["mean"], -0.5 - stats["t"]["mean"], -0.5 - stats["t"]["mean"]]
    assert centred[3:5] == [0.0, 0.0] and centred[6] is None  # no spread, no reward
    per_group = answers(REWARDS, TASKS, ADAPTERS, "per_task", "group")
    assert per_group[0] == pytest.approx(loo[0] / (stats["t"]["std"] + advantages.EPS))
    batch = group_stats(REWARDS, ADAPTERS)
    per_batch = answers(REWARDS, TASKS, ADAPTERS, "per_task", "batch")
    assert per_batch[0] == pytest.approx(loo[0] / (batch["a"]["std"] + advantages.EPS))
    assert per_batch[5] == pytest.approx(loo[5] / (batch["b"]["std"] + advantages.EPS))
    assert per_batch[3:5] == [0.0, 0.0] and per_batch[6] is None
    assert answers([1.0, 1.0, 1.0], ["t", "u", "u"], "aaa", "trr++", "batch") == [0.0, 0.0, 0.0]  # no spread at all
    with pytest.raises(ValueError, match="scale"):
        answers(REWARDS, TASKS, ADAPTERS, "per_task", "std")


def test_doctests():
    result = doctest.testmod(advantages)
    assert result.attempted > 0 and result.failed == 0
