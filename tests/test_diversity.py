"""Member diversity: weight distance from r x r products equals the dense computation; verdict agreement
and clone pairs."""

import doctest

import pytest
import torch

from populora.population import agreement, diversity
from populora.population.agreement import verdict_diversity
from populora.population.diversity import weight_distance, weight_diversity
from tests.test_operators import random_adapter


def dense(sd):
    from populora.population.operators import lora_modules

    return torch.cat([(sd[m.b_key].double() @ sd[m.a_key].double()).flatten() for m in lora_modules(sd)])


def test_weight_distance_matches_the_dense_difference():
    a, b = random_adapter(1), random_adapter(2)
    da, db = dense(a), dense(b)
    expected = float((da - db).norm() / (0.5 * (da.norm() + db.norm())))
    assert weight_distance(a, b) == pytest.approx(expected, rel=1e-9)
    assert weight_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    scaled = {k: (2 * v if "lora_B" in k else v) for k, v in a.items()}  # dW doubled: distance 1 / 1.5
    assert weight_distance(a, scaled) == pytest.approx(1 / 1.5, rel=1e-9)


def test_two_untrained_members_are_at_distance_zero_and_a_refactored_one_too():
    fresh = random_adapter(3, zero_b=True)
    assert weight_distance(fresh, random_adapter(4, zero_b=True)) == 0.0
    a = random_adapter(5)
    rescaled = {k: (3 * v if "lora_A" in k else v / 3) for k, v in a.items()}  # the same dW, other factors
    assert weight_distance(a, rescaled) == pytest.approx(0.0, abs=1e-6)


def test_weight_diversity_over_a_sub_population():
    out = weight_diversity("students", {"s0": random_adapter(1), "s1": random_adapter(1), "s2": random_adapter(2)})
    assert out["diversity.students.pairs"] == 3
    assert out["diversity.students.weight_distance_min"] == pytest.approx(0.0, abs=1e-6)  # s0 and s1: one adapter
    assert out["diversity.students.weight_distance"] > 0.3
    assert weight_diversity("teachers", {"t0": random_adapter(1)})["diversity.teachers.weight_distance"] is None


def test_verdict_agreement_and_clone_pairs():
    ids = ["a", "b", "c", "d"]
    table = {"s0": {"a": 1, "b": 0, "c": 1}, "s1": {"a": 1, "c": 1}, "s2": {"a": 0, "b": 1, "c": 1, "d": 1}}
    out = verdict_diversity("students", table, ["s0", "s1", "s2"], ids)
    assert out["diversity.students.clone_pairs"] == 1  # s0 and s1: a missing verdict counts wrong
    assert out["diversity.students.verdict_agreement"] == pytest.approx((1 + 0.25 + 0.25) / 3)
    assert verdict_diversity("students", table, ["s0"], ids)["diversity.students.clone_pairs"] is None


@pytest.mark.parametrize("module", [diversity, agreement])
def test_doctests(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
