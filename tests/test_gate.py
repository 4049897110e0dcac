"""The study's gate (populora/analysis/gate.py): each gate seed's final students against the base on the pool's
pass rates, paired over tasks; the verdict; the seeds a control needs at the gate's spread."""

import doctest

from populora.analysis import gate as gate_module
from populora.analysis.gate import gate_lines, gate_verdict, seed_against_base, seeds_for_mde
from populora.analysis.runs import empty_run
from populora.core.stats import t_mde

PLAN = {"gate": {"control": "1t1s", "seeds": [20, 21, 22]}}
TASKS = [f"t{k}" for k in range(64)]
BASE = {task: (0.125 if k % 2 else 0.0) for k, task in enumerate(TASKS)}


def _run(seed: int, lift: float, control: str = "1t1s") -> dict:
    """A run whose two students each solve `lift` more of every task than the base (one a bit more, one less)."""
    run = empty_run(f"{control}-s{seed}", control, seed, "population", ["s0", "s1"], ["s0", "s1", "t0"])
    students = {
        name: {task: min(1.0, rate + lift + (k % 3 - 1) * 0.125 + delta) for k, (task, rate) in enumerate(BASE.items())}
        for name, delta in (("s0", 0.02), ("s1", -0.02))
    }
    run["pass_rate"] = {"heldout": {**students, "t0": dict.fromkeys(TASKS, 1.0), "base": BASE}}
    return run


def test_doctests():
    assert doctest.testmod(gate_module).failed == 0


def test_a_seed_is_paired_with_the_base_over_tasks_students_only():
    row = seed_against_base(_run(20, 0.1))
    assert row["tasks"] == 64 and row["low"] > 0 and row["above"]
    assert abs(row["difference"] - (row["students"] - row["base"])) < 0.01  # the teacher (t0, 100%) is no student
    assert row["students"] < 30
    flat = seed_against_base(_run(21, 0.0))
    assert flat["low"] < 0 < flat["high"] and not flat["above"]
    assert seed_against_base(empty_run("x", "1t1s", 1, "population", ["s0"], ["s0"])) is None


def test_the_verdict_needs_every_gate_seed_above():
    assert gate_verdict([_run(20, 0.1), _run(21, 0.12), _run(22, 0.08)], PLAN)["verdict"] == "passed"
    assert gate_verdict([_run(20, 0.1), _run(21, 0.0), _run(22, 0.08)], PLAN)["verdict"] == "failed"
    pending = gate_verdict([_run(20, 0.1), _run(21, 0.1)], PLAN)
    assert pending["verdict"] == "pending" and pending["ran"] == [20, 21]
    # another control's run or an undeclared seed is not the gate's
    assert gate_verdict([_run(20, 0.1, "baseline"), _run(23, 0.1)], PLAN)["per_seed"] == []
    assert gate_verdict([_run(20, 0.1)], {"seeds": [1]}) is None


def test_the_seeds_needed_follow_the_spread():
    gate = gate_verdict([_run(20, 0.05), _run(21, 0.15), _run(22, 0.25)], PLAN)
    assert gate["sd"] is not None and gate["sd"] > 5
    needed = gate["seeds_needed"]
    # the MDE at the seeds needed is within the target, one seed fewer is not
    assert (
        t_mde(gate["sd"] * (2 / needed) ** 0.5, needed - 1)
        <= 5.0
        < t_mde(gate["sd"] * (2 / (needed - 1)) ** 0.5, needed - 2)
    )
    assert seeds_for_mde(0.5, 5.0) == 6  # never fewer than six


def test_the_section_says_the_verdict_and_the_seeds():
    text = "\n".join(gate_lines(gate_verdict([_run(20, 0.1), _run(21, 0.0), _run(22, 0.1)], PLAN)))
    assert "**Verdict: failed**" in text and "| 21 | 1t1s-s21 | 64 |" in text and "seeds a control" in text
    assert gate_lines(None) == []
