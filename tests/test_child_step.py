"""Children train like their parents: on the tiny model, one update step of a child on a fixed batch
moves the adapter's dW (sum over modules of ||B'A' - BA||_F) within 30% of what the same step (same
batch, fresh AdamW moments on both sides) moves its parent, for every operator; the operators as they
were (sqrt(S) on both factors, no rebalance) fail the same check. The harness is perf/child_step.py,
which measures the same on SmolLM2 (docs/measurements.md)."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from populora.population import operators as ops
from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("child_step", REPO / "perf" / "child_step.py")
child_step = importlib.util.module_from_spec(spec)
sys.modules["child_step"] = child_step
spec.loader.exec_module(child_step)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    from tests.tiny_model import tiny_model_dir

    work = tmp_path_factory.mktemp("child_step")
    return child_step.measure(
        tiny_model_dir(work / "tiny"),
        work,
        rank=4,
        targets=["q_proj", "k_proj", "v_proj", "o_proj"],
        lr=1e-3,
        parent_steps=6,
        rows=8,
        max_new_tokens=24,
        operators=sorted(ops.MUTATIONS) + sorted(ops.CROSSOVERS),
        log=lambda _: None,
    )


@pytest.mark.parametrize("op", sorted(ops.MUTATIONS) + sorted(ops.CROSSOVERS))
def test_a_childs_step_moves_it_as_far_as_its_parents(measured, op):
    row = measured["operators"][op]
    ratio = row["child_fresh"] / measured["parent_fresh"]
    assert 0.7 <= ratio <= 1.3, (op, ratio)
    assert 0.5 < row["balance_vs_parent"] < 2.0


def test_the_previous_svd_refactoring_fails_the_same_check(measured):
    """The check can fail: the children the second study's svd_scale_rotate made stepped far shorter."""
    for op in ("svd_scale_rotate", "mask_components", "svd_split"):
        row = measured["operators"][op]
        assert row["previous_child_fresh"] / measured["parent_fresh"] < 0.7, op
        assert row["previous_balance_vs_parent"] < 0.5, op
