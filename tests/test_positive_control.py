"""The positive control's parts: its tasks (populora/tasks/families.py), the per-task advantage, and one tiny run of
`python -m populora.control.positive` end to end on the tiny random model."""

from __future__ import annotations

import json

import pytest
import yaml

from populora.core.literals import output_is_an_argument
from populora.rl.rollouts import build_rollouts
from populora.tasks.families import family_tasks


@pytest.mark.parametrize("name", ["list_then_arith", "branch", "list_reduce"])
def test_family_pools_are_disjoint_and_copying_is_wrong(name):
    tasks = family_tasks(name, heldout=40, train=60, seed=3)
    heldout = {t["program"] for t in tasks["heldout"]}
    train = {(t["program"], t["inputs"][0]) for t in tasks["train"]}
    assert len(heldout) == 40 and len(train) == 60 and not heldout & {program for program, _ in train}
    for task in tasks["heldout"] + tasks["train"]:
        namespace: dict = {}
        exec(task["program"], namespace)
        output = eval(f"f({task['inputs'][0]})", namespace)
        assert not output_is_an_argument(task["inputs"][0], repr(output)), task
    assert family_tasks(name, heldout=40, train=60, seed=3) == tasks  # seeded
    assert family_tasks(name, heldout=40, train=60, seed=4) != tasks


def test_unknown_family_is_refused_naming_the_known_ones():
    with pytest.raises(ValueError, match="known: branch"):
        family_tasks("nope", heldout=1, train=1, seed=0)


def _answer(task_id, k, correct, student="s"):
    return {
        "task_id": task_id,
        "type": "code_o",
        "student": student,
        "answer_id": f"{task_id}:{k}",
        "correct": correct,
        "answer": "1",
        "parse_reason": None,
        "segments": [],
        "tokens": 1,
    }


def test_per_task_baseline_compares_answers_with_their_siblings_only():
    graded = [_answer("easy", k, True) for k in range(3)] + [_answer("mixed", 0, True), _answer("mixed", 1, False)]
    trr = build_rollouts([], graded, "learnability")
    per_task = build_rollouts([], graded, "learnability", "per_task")
    # TRR++: every answer to the easy task gets A > 0 (the task is easy, not the answer better)
    assert all(r["advantage"] > 0 for r in trr if r["task_id"] == "easy")
    assert [r["advantage"] for r in per_task] == [0.0, 0.0, 0.0, 1.5, -1.5]


def test_per_task_baseline_keeps_adapters_apart():
    graded = [_answer("t", 0, True, "a"), _answer("t", 1, False, "b")]
    assert [r["advantage"] for r in build_rollouts([], graded, "learnability", "per_task")] == [0.0, 0.0]


def test_control_runs_end_to_end_on_the_tiny_model(tiny_model_dir, tiny_params_dict, tmp_path):
    from populora.control.positive import main

    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params_dict))
    overlay = tmp_path / "overlay.yaml"
    overlay.write_text(
        yaml.safe_dump(
            {
                "control": {
                    "family": "list_then_arith",
                    "steps": 2,
                    "tasks_per_step": 2,
                    "samples": 2,
                    "heldout": 10,
                    "eval_every": 1,
                },
                "update": {"learning_rate": 0.01},
                "reward": {"advantage_baseline": "per_task"},
            }
        )
    )
    out = tmp_path / "control"
    assert (
        main(
            ["--params", str(params), "--overlay", str(overlay), "--base-model", str(tiny_model_dir), "--out", str(out)]
        )
        == 0
    )
    result = json.loads((out / "result.json").read_text())
    assert set(result["arms"]) == {"real", "shuffled"}
    for arm in result["arms"].values():
        assert [row["step"] for row in arm["steps"]] == [0, 1]
        assert set(arm["heldout"]) == {"1", "2"} and len(arm["heldout"]["2"]["verdicts"]) == 10
    assert set(result["summary"]["comparisons"]) == {"real - base", "real - shuffled", "shuffled - base"}
    assert result["summary"]["passed"] is False  # a random model learns nothing in two steps
    assert (out / "curves.png").stat().st_size > 0 and "Positive control" in (out / "control.md").read_text()
    # a finished arm is kept, not run again
    before = (out / "arms" / "real.json").read_bytes()
    assert (
        main(
            ["--params", str(params), "--overlay", str(overlay), "--base-model", str(tiny_model_dir), "--out", str(out)]
        )
        == 0
    )
    assert (out / "arms" / "real.json").read_bytes() == before


def test_control_refuses_a_bad_overlay_before_any_work(tmp_path, capsys):
    from populora.control.positive import main

    overlay = tmp_path / "overlay.yaml"
    overlay.write_text("control:\n  family: nope\n")
    assert main(["--overlay", str(overlay), "--base-model", str(tmp_path / "none"), "--out", str(tmp_path / "o")]) == 2
    assert not (tmp_path / "none").exists()


def test_the_committed_control_still_renders():
    """study/positive-control/ ran a family of the generator issue 55 replaced: its page renders all the same."""
    from populora.control.positive import markdown
    from tests.conftest import REPO

    page = markdown(json.loads((REPO / "study" / "positive-control" / "result.json").read_text()))
    assert page.startswith("# Positive control: `maximum` (a family of an earlier task generator)")
