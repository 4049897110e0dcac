"""Pure helpers split out of the heldout stage and the warm start: a child born by evolution is scored as its
own point (only a whole pipeline run reaches that path otherwise), and the warm start's record averages its
last steps, and it stops with the fix, before loading a model, when no generated task passed verification."""

from __future__ import annotations

from collections import Counter

import pytest

from populora.core.state import State
from populora.warmstart import run as warm_run
from populora.warmstart.run import _training_summary
from stages.heldout import BORN, _born_children, _born_metrics

POOL = [{"task_id": "a", "type": "code_o"}, {"task_id": "b", "type": "code_i"}]


def _state() -> State:
    return State(
        arm="population",
        generation=1,
        teachers=["teacher0"],
        students=["student0", "student1"],
        members={"teacher0": "t@g000", "student0": "s0@g000", "student1": "child@g001"},
        ratings={},
        lineage=[
            {"child_id": "s0@g000", "parents": [], "operator": "init"},
            {"child_id": "child@g001", "parents": ["s0@g000", "t@g000"], "operator": "crossover"},
        ],
    )


def test_a_born_child_is_scored_under_its_slot_with_its_lineage():
    born = {"student1": f"student1{BORN}"}
    table = {"student1": {"a": 0, "b": 0}, f"student1{BORN}": {"a": 1, "b": 0}}
    children = _born_children(_state(), born, table)
    assert children == {
        "student1": {
            "member": "child@g001",
            "parents": ["s0@g000", "t@g000"],
            "operator": "crossover",
            "verdicts": {"a": 1, "b": 0},
        }
    }
    metrics = _born_metrics(born, children, POOL)
    assert metrics["heldout.born.student1.accuracy"] == 0.5
    assert metrics["heldout.born.student1.code_o.accuracy"] == 1.0
    assert all(key.startswith("heldout.born.student1.") for key in metrics)  # never the trained member's keys


def test_a_child_without_a_lineage_event_or_verdicts_gets_empty_ones():
    state = _state()
    state.members["student0"] = "unknown@g001"
    children = _born_children(state, {"student0": f"student0{BORN}"}, {})
    assert children["student0"] == {"member": "unknown@g001", "parents": [], "operator": None, "verdicts": {}}
    assert _born_metrics({}, {}, POOL) == {}


def test_the_warm_start_record_averages_the_last_five_steps():
    steps = [
        {"tokens": 10, "answer_tokens": 2, "loss": float(i), "token_accuracy": 0.1 * i, "exact": 0.0} for i in range(7)
    ]
    summary = _training_summary(steps, train_s=2.0)
    assert summary["tokens"] == 70 and summary["answer_tokens"] == 14 and summary["tokens_per_s"] == 35.0
    assert summary["final"] == {"loss": 4.0, "token_accuracy": 0.4, "exact": 0.0}  # steps 2..6
    assert _training_summary(steps[:2], train_s=0.0)["final"]["loss"] == 0.5  # fewer than five: all of them
    assert _training_summary(steps[:1], train_s=0.0)["tokens_per_s"] is None


def test_a_warm_start_with_no_verified_task_stops_with_the_fix(tiny_params_dict, monkeypatch, tmp_path):
    """Before any model is loaded, not a division by zero in the record after an empty training."""
    import logging

    from populora.config import parse_params

    counts = Counter({"candidates": 12, "copyable": 7, "echo": 5})

    def nothing_verified(params, sandbox, seen):
        seen.update(counts)
        return [], []

    monkeypatch.setattr(warm_run, "verified_inputs", nothing_verified)
    params = parse_params({**tiny_params_dict, "warm_start": {**tiny_params_dict["warm_start"], "enabled": True}})
    with pytest.raises(ValueError, match="none of the 12 generated tasks passed") as error:
        warm_run.make_warm_base(params, tmp_path / "base", tmp_path / "out", None, logging.getLogger("t"))
    assert "'copyable': 7" in str(error.value) and "Fix: raise warm_start.examples" in str(error.value)
