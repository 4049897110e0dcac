"""What a held-out pool gives away without reasoning (populora/analysis/baselines.py): the best constant
answer and the copy baseline per task type, graded in the sandbox by the project's grader, and printed
by the study beside the pool's scores.

    python -m pytest -m "" -n 0 tests/test_study_baselines.py -q
"""

from __future__ import annotations

from populora.analysis.baselines import best_k_constants, candidates, pool_baselines
from populora.analysis.tables import baselines_lines


def _task(task_id: str, task_type: str, program: str, inputs: str, outputs: str) -> dict:
    return {
        "task_id": task_id,
        "type": task_type,
        "program": program,
        "inputs": [inputs],
        "outputs": [outputs],
        "message": None,
        "examples": [],
    }


POOL = [
    _task("heldout-code_i-000", "code_i", "def f(x):\n    return x > 3", "10", "True"),
    _task("heldout-code_i-001", "code_i", "def f(x):\n    return x * 2", "10", "20"),
    _task("heldout-code_i-002", "code_i", "def f(x):\n    return x", "7", "7"),  # echoing the output solves it
    _task("heldout-code_o-000", "code_o", "def f(x):\n    return [0, 2, 4]", "1", "[0, 2, 4]"),
    _task("heldout-code_o-001", "code_o", "def f(x):\n    return len(x)", "'abc'", "3"),
]


def test_the_best_constant_and_the_copy_baseline_are_graded_per_type():
    assert {"10", "True", "[0, 2, 4]", "'abc'", "0"} <= set(candidates(POOL))
    found = pool_baselines(POOL)
    code_i, code_o = found["code_i"], found["code_o"]
    # `10` makes x > 3 true and 2x = 20: right on two of three code_i tasks; an input of 7 right on the third
    assert code_i["best"] == {"answer": "10", "correct": 2, "share": 0.666667} and code_i["n_tasks"] == 3
    assert code_i["copy"] == {"correct": 1, "share": 0.333333}
    assert code_o["best"]["correct"] == 1 and code_o["copy"]["correct"] == 0
    line = baselines_lines({"pool_baselines": found})[0]
    assert "code_i: the constant `10` is right on 2 of 3 (66.7)" in line
    assert "One constant per type scores 3 of 5 (60.0) on the whole pool" in line


def test_the_best_k_constants_are_graded_too_each_k_extending_the_last():
    """pass@k's control: k different constants a task. code_i: `10` is right on two tasks, an input of 7 on the
    third, so two constants cover all three; code_o's two tasks need two different outputs."""
    found = pool_baselines(POOL, ks=[1, 2, 4])
    assert found["code_i"]["best_at_k"] == {
        "1": {"correct": 2, "share": 0.666667},
        "2": {"correct": 3, "share": 1.0},
        "4": {"correct": 3, "share": 1.0},
    }
    assert [found["code_o"]["best_at_k"][k]["correct"] for k in ("1", "2", "4")] == [1, 2, 2]
    assert "best_at_k" not in pool_baselines(POOL)["code_o"]  # only when asked


def test_greedy_picks_the_constant_adding_most_and_breaks_ties_by_answer():
    right = {"b": {"t1", "t2"}, "a": {"t1", "t2"}, "c": {"t3"}, "d": set()}
    assert best_k_constants(right, [1, 2, 3, 8]) == {"1": 2, "2": 3, "3": 3, "8": 3}
    assert best_k_constants({}, [1]) == {"1": 0}
