import doctest

import pytest

from populora.rl import rewards
from populora.rl.rewards import solve_rate, student_reward, teacher_reward, teacher_reward_from_rate


@pytest.mark.parametrize(
    ("correct", "well_formed", "expected"),
    [
        (True, True, 1.0),
        (False, True, -0.5),
        (False, False, -1.0),
        (True, False, -1.0),  # unparseable answers are malformed, whatever the flag says
    ],
)
def test_student_reward(correct, well_formed, expected):
    assert student_reward(correct, well_formed) == expected


@pytest.mark.parametrize(
    ("valid", "n_correct", "n_attempts", "mode", "expected"),
    [
        # learnability: 1 - p strictly inside (0, 1), else 0
        (True, 0, 8, "learnability", 0.0),
        (True, 1, 8, "learnability", 0.875),
        (True, 4, 8, "learnability", 0.5),
        (True, 7, 8, "learnability", 0.125),
        (True, 8, 8, "learnability", 0.0),
        (True, 1, 1, "learnability", 0.0),
        # zero_sum: 1 - p everywhere
        (True, 0, 8, "zero_sum", 1.0),
        (True, 2, 8, "zero_sum", 0.75),
        (True, 8, 8, "zero_sum", 0.0),
        # invalid / malformed proposals: -1 in both modes, counts ignored
        (False, 0, 0, "learnability", -1.0),
        (False, 3, 8, "zero_sum", -1.0),
        # valid but never attempted: excluded from training
        (True, 0, 0, "learnability", None),
        (True, 0, 0, "zero_sum", None),
    ],
)
def test_teacher_reward_table(valid, n_correct, n_attempts, mode, expected):
    assert teacher_reward(valid, n_correct, n_attempts, mode=mode) == expected


def test_teacher_reward_default_mode_is_learnability():
    assert teacher_reward(True, 0, 4) == 0.0
    assert teacher_reward_from_rate(True, 0.0) == 0.0


@pytest.mark.parametrize("bad", [(5, 4), (-1, 4), (0, -1)])
def test_solve_rate_rejects_bad_counts(bad):
    with pytest.raises(ValueError):
        solve_rate(*bad)


def test_bad_mode_and_rate_rejected():
    with pytest.raises(ValueError, match="mode"):
        teacher_reward(True, 1, 2, mode="learnabilty")
    with pytest.raises(ValueError):
        teacher_reward_from_rate(True, 1.5)


def test_doctests():
    result = doctest.testmod(rewards)
    assert result.attempted > 0 and result.failed == 0
