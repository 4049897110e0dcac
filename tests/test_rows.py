"""The typed rows between stages: a row of the wrong shape fails at the door, naming file, line and field."""

from __future__ import annotations

import pytest

from populora.core.io import ArtifactError, write_jsonl
from populora.core.rows import Answer, BufferEntry, GradedAnswer, Rollout, Task, read_rows, write_rows

SEGMENTS = [
    {"text": "prompt", "train": False, "ids": [1, 2]},
    {
        "text": "42",
        "train": True,
        "ids": [3],
        "keep": 1,
        "logprobs": [-0.5],
        "sampling": {"temperature": 1.0, "top_p": 1.0, "suppress_first": None},
    },
]
ANSWER = {
    "answer_id": "t0:student0:0",
    "task_id": "t0",
    "type": "code_o",
    "student": "student0",
    "sample": 0,
    "teacher": "teacher0",
    "task_origin": "proposed",
    "task_gen": 0,
    "examples": [],
    "answer": "42",
    "parse_reason": None,
    "segments": SEGMENTS,
    "tokens": 1,
}


def test_rows_round_trip_byte_for_byte(tmp_path):
    rows = [ANSWER, {**ANSWER, "answer_id": "t0:student0:1", "sample": 1, "answer": None, "parse_reason": "no_answer"}]
    write_rows(tmp_path / "answers.jsonl", rows, Answer)
    write_jsonl(tmp_path / "plain.jsonl", rows)
    assert (tmp_path / "answers.jsonl").read_bytes() == (tmp_path / "plain.jsonl").read_bytes()
    assert read_rows(tmp_path / "answers.jsonl", Answer) == rows


def test_a_writer_with_the_wrong_shape_fails_before_writing(tmp_path):
    with pytest.raises(ValueError, match=r"row 0 \(t0\) not a Answer row: answerr: Extra inputs"):
        write_rows(tmp_path / "answers.jsonl", [{**ANSWER, "answerr": "42"}], Answer)
    with pytest.raises(ValueError, match="segments.1.keep"):
        write_rows(
            tmp_path / "answers.jsonl", [{**ANSWER, "segments": [SEGMENTS[0], {**SEGMENTS[1], "keep": "one"}]}], Answer
        )
    assert not (tmp_path / "answers.jsonl").exists()


def test_a_reader_names_file_line_and_field(tmp_path):
    path = tmp_path / "graded.jsonl"
    write_jsonl(path, [{**ANSWER, "correct": True, "reason": None}, ANSWER])  # line 2 was never graded
    with pytest.raises(ArtifactError, match=r"graded.jsonl line 2: not a GradedAnswer row: correct: Field required"):
        read_rows(path, GradedAnswer)


def test_role_specific_fields_of_rollouts_and_tasks():
    from populora.core.rows import check_row

    propose = {
        "adapter": "teacher0",
        "role": "propose",
        "type": "code_o",
        "task_id": "t0",
        "segments": SEGMENTS,
        "tokens": 1,
        "reward": 0.5,
        "advantage": 0.0,
        "solve_rate": 0.5,
    }
    solve = {**propose, "adapter": "student0", "role": "solve", "solve_rate": None, "answer_id": "a", "correct": True}
    del solve["solve_rate"]
    assert check_row(propose, Rollout) and check_row(solve, Rollout)
    task = {
        "task_id": "t0",
        "type": "code_f",
        "teacher": "teacher0",
        "arm": "population",
        "gen": 0,
        "origin": "proposed",
        "program": "def f(a):\n    return a",
        "inputs": ["1"],
        "message": "m",
        "parse_reason": None,
        "segments": SEGMENTS,
        "tokens": 1,
        "source_task": "seed-code_f-0",
        "valid": True,
        "reason": None,
        "reason_detail": None,
        "outputs": ["1"],
    }
    assert check_row(task, Task)
    with pytest.raises(ValueError, match="valid"):
        check_row({k: v for k, v in task.items() if k != "valid"}, Task)
    with pytest.raises(ValueError, match="teacher"):
        check_row(
            {
                "task_id": "s",
                "type": "code_o",
                "program": "p",
                "inputs": [],
                "outputs": [],
                "message": None,
                "gen": 0,
                "origin": "seed",
            },
            BufferEntry,
        )
