"""Parsing of teacher/student completions and the pure task-assignment logic."""

from __future__ import annotations

import ast
import random

import pytest

from populora.tasks import prompts
from populora.tasks.parsing import clean_program, fenced_blocks, parse_answer, parse_proposal
from populora.tasks.roles import assign_tasks, proposer_jobs, solver_jobs
from populora.tasks.tasks import extend_buffer, is_valid_task, seed_proposals


def chat(prompt: str) -> str:
    return f"<user>{prompt}</user><assistant>"


@pytest.mark.parametrize(
    "text, expected",
    [
        # trailing call and print are dropped, helper kept
        (
            "def f(x):\n    return g(x)\ndef g(y):\n    return y + 1\nprint(f(2))",
            "def f(x):\n    return g(x)\n\ndef g(y):\n    return y + 1",
        ),
        # classes are allowed (AZR's one-def regex rejected these)
        ("class P:\n    def m(self):\n        return 1\ndef f(a):\n    return P().m() + a", None),
        # unused helper dropped
        ("def f(a):\n    return a\ndef unused():\n    return 0", "def f(a):\n    return a"),
        # junk after the code is cut at the longest parsable prefix
        ("def f(a):\n    return a * 2\nThis function doubles", "def f(a):\n    return a * 2"),
        ("import math\ndef f(a):\n    return math.floor(a)", None),
    ],
)
def test_clean_program(text, expected):
    program, reason = clean_program(text)
    assert reason is None
    if expected is None:  # kept whole (statements are re-joined, so compare the syntax trees)
        assert ast.dump(ast.parse(program)) == ast.dump(ast.parse(text))
    else:
        assert program == expected


def test_clean_program_reasons():
    assert clean_program("def g(a):\n    return a") == (None, "no_entry_function")
    assert clean_program("(((") == (None, "syntax")


def test_scaffolded_proposal_code_o():
    text = "```python\ndef f(a, b):\n    return a + b\n```\n```input\n1, 2\n"
    parsed = parse_proposal(text, "code_o", mode="scaffolded", n_inputs=10)
    assert parsed == {
        "program": "def f(a, b):\n    return a + b",
        "inputs": ["1, 2"],
        "message": None,
        "parse_reason": None,
    }


def test_input_block_first_is_not_taken_as_code():
    text = "```input\n1\n```\n```python\ndef f(a):\n    return a\n```\n```input\n3\n```"
    parsed = parse_proposal(text, "code_i", mode="scaffolded", n_inputs=10)
    assert parsed["program"] == "def f(a):\n    return a" and parsed["inputs"] == ["1"]


def test_code_f_needs_all_inputs_and_a_message():
    blocks = "".join(f"```input\n{i}\n```\n" for i in range(10))
    ok = parse_proposal(blocks + "```message\nadd one\n", "code_f", mode="scaffolded", n_inputs=10)
    assert ok["parse_reason"] is None and ok["inputs"] == [str(i) for i in range(10)] and ok["message"] == "add one"
    few = parse_proposal("```input\n1\n```\n```message\nm\n", "code_f", mode="scaffolded", n_inputs=10)
    assert few["parse_reason"] == "too_few_inputs"
    assert parse_proposal(blocks, "code_f", mode="scaffolded", n_inputs=10)["parse_reason"] == "no_message"


def test_free_form_requires_think_answer_format():
    good = "<think>plan</think>\n<answer>```python\ndef f(a):\n    return a\n```\n```input\n5\n```</answer>"
    assert parse_proposal(good, "code_o", mode="free_form", n_inputs=10)["parse_reason"] is None
    assert (
        parse_proposal("```python\ndef f(a):\n    return a\n```", "code_o", mode="free_form", n_inputs=10)[
            "parse_reason"
        ]
        == "format"
    )
    assert parse_answer("<think>x</think><answer>```output\n3\n```</answer>", "code_o", mode="free_form") == ("3", None)


@pytest.mark.parametrize("garbage", ["", "```", "\x00\x01", "```python\n" + "(" * 5000, "🙂" * 100, "```output\n\n```"])
def test_garbage_never_raises(garbage):
    for task_type in ("code_o", "code_i", "code_f"):
        for mode in ("scaffolded", "free_form"):
            parsed = parse_proposal(garbage, task_type, mode=mode, n_inputs=10)
            assert parsed["parse_reason"] is not None
            answer, reason = parse_answer(garbage, task_type, mode=mode)
            assert answer is None and reason is not None


def test_truncated_generations_are_malformed():
    assert (
        parse_proposal("```python\ndef f(a):\n    return a", "code_o", mode="scaffolded", n_inputs=10, truncated=True)[
            "parse_reason"
        ]
        == "truncated"
    )
    assert parse_answer("```output\n1", "code_o", mode="scaffolded", truncated=True) == (None, "truncated")


def test_last_answer_block_wins():
    assert parse_answer("```output\n1\n```\n```output\n2\n```", "code_o", mode="scaffolded") == ("2", None)
    assert fenced_blocks("```input\na\n```", "output") == []


def _buffer():
    rows = seed_proposals("builtin")
    for row in rows:
        row["outputs"] = ["0"] * len(row["inputs"])
        row["valid"] = True
    return extend_buffer([], rows, 100)


def test_proposer_jobs_cover_every_teacher_and_type():
    jobs = proposer_jobs(
        ["t0", "t1"],
        _buffer(),
        per_type=2,
        references=2,
        n_inputs=10,
        mode="scaffolded",
        chat=chat,
        rng=random.Random(0),
        arm="population",
        gen=3,
    )
    assert len(jobs) == 2 * 3 * 2
    assert len({meta["task_id"] for meta, _ in jobs}) == len(jobs)
    code_f = [plan for meta, plan in jobs if meta["type"] == "code_f"]
    assert all(len(plan.steps) == 11 and not plan.steps[-1].must_stop for plan in code_f)
    code_o = next(plan for meta, plan in jobs if meta["type"] == "code_o")
    assert code_o.prompt.startswith("<user>") and "Reference Code Snippets" in code_o.prompt
    assert code_o.steps[0] == prompts.Step("```python\ndef f(", stop=prompts.PROGRAM_STOPS)
    assert code_o.steps[1].non_empty and code_o.steps[1].stops == prompts.INPUT_STOPS
    # scaffolded mode leaves out AZR's formatting example (a 135M model copies it verbatim) ...
    assert "'John'" not in code_o.prompt and "Example Format" not in code_o.prompt
    free = proposer_jobs(
        ["t0"],
        _buffer(),
        per_type=1,
        references=2,
        n_inputs=10,
        mode="free_form",
        chat=chat,
        rng=random.Random(0),
        arm="population",
        gen=3,
    )
    # ... free-form mode is AZR's format and keeps it
    assert all(
        "'John', {'age': 20, 'city': 'New York'}" in plan.prompt for meta, plan in free if meta["type"] != "code_f"
    )


def test_assignment_prefers_the_paired_teachers_tasks_then_the_buffer():
    pairing = {
        "teachers": ["t0", "t1"],
        "students": ["s0", "s1"],
        "counts": {"t0": {"s0": 2, "s1": 0}, "t1": {"s0": 0, "s1": 2}},
    }
    common = {"type": "code_o", "program": "def f(a):\n    return a", "inputs": ["1"], "outputs": ["1"]}
    tasks = [
        {**common, "task_id": "a", "teacher": "t0", "valid": True, "parse_reason": None},
        {**common, "task_id": "b", "teacher": "t1", "valid": False, "parse_reason": None},
        {**common, "task_id": "c", "teacher": "t1", "valid": True, "parse_reason": "no_message"},
    ]
    buffer = _buffer()
    assignment = assign_tasks(pairing, tasks, buffer)
    s0 = [t["task_id"] for t in assignment["s0"]["code_o"]]
    s1 = [t["task_id"] for t in assignment["s1"]["code_o"]]
    assert s0[0] == "a" and len(s0) == 2 and s0[1] != "a"  # own teacher's task once, then a buffer top-up
    assert "b" not in s1 and "c" not in s1 and len(s1) == 2  # invalid or unparsed tasks never reach students
    assert all(len(assignment[s][t]) == 2 for s in ("s0", "s1") for t in ("code_o", "code_i", "code_f"))
    jobs = solver_jobs(
        assignment, buffer, samples=3, worked_examples=1, mode="scaffolded", chat=chat, rng=random.Random(1)
    )
    assert len(jobs) == 2 * 3 * 2 * 3
    assert all(meta["task_id"] not in meta["examples"] for meta, _ in jobs)
    fill_ins = [t for t in assignment["s0"]["code_o"] if t["task_id"] != "a"]
    # a buffer top-up is marked as such: no teacher of this generation, no game, no reward for its author
    assert fill_ins and all(t["origin"] == "buffer" and t["teacher"] is None for t in fill_ins)
    assert assignment["s0"]["code_o"][0].get("origin") != "buffer"


def test_every_pfsp_slot_is_kept_so_every_teacher_gets_a_student():
    from populora.population.ratings import new_rating, pfsp_pairing

    teachers, students = ["t0", "t1", "t2", "t3"], ["s0", "s1"]
    ratings = {m: new_rating() for m in teachers + students}
    tasks = [
        {
            "task_id": f"{t}-o",
            "type": "code_o",
            "teacher": t,
            "program": f"def f(a):\n    return a + {i}",
            "inputs": ["1"],
            "outputs": [str(1 + i)],
            "valid": True,
            "parse_reason": None,
            "origin": "proposed",
        }
        for i, t in enumerate(teachers)
    ]
    for seed in range(5):
        pairing = pfsp_pairing(teachers, students, ratings, slots_per_student=1, seed=seed)
        assignment = assign_tasks(pairing, tasks, _buffer())
        served = {t["teacher"] for s in students for t in assignment[s]["code_o"]}
        assert served == set(teachers)


def test_no_worked_example_shares_the_tasks_program():
    buffer = _buffer()
    twin = dict(buffer[0])  # the same program (renamed variable) under another id: shows the answer
    task = {**twin, "task_id": "new", "origin": "proposed", "teacher": "t0"}
    jobs = solver_jobs(
        {"s0": {task["type"]: [task]}},
        buffer,
        samples=20,
        worked_examples=3,
        mode="scaffolded",
        chat=chat,
        rng=random.Random(0),
    )
    from populora.tasks.tasks import program_key

    shown = {e for meta, _ in jobs for e in meta["examples"]}
    assert shown and all(
        program_key(b["program"]) != program_key(task["program"]) for b in buffer if b["task_id"] in shown
    )


def test_a_proposal_copying_a_buffer_program_is_a_duplicate():
    from populora.tasks.tasks import mark_duplicates

    buffer = _buffer()
    copy = {"task_id": "p1", "type": "code_o", "program": buffer[0]["program"], "parse_reason": None}
    fresh = {"task_id": "p2", "type": "code_i", "program": "def f(q):\n    return q * 3 - 1", "parse_reason": None}
    code_f = {"task_id": "p3", "type": "code_f", "program": buffer[0]["program"], "parse_reason": None}
    broken = {"task_id": "p4", "type": "code_o", "program": buffer[0]["program"], "parse_reason": "no_input"}
    rows = mark_duplicates([copy, fresh, code_f, broken], buffer)
    assert [r["parse_reason"] for r in rows] == ["duplicate", None, None, "no_input"]


def test_is_valid_task():
    assert is_valid_task({"valid": True, "parse_reason": None})
    assert not is_valid_task({"valid": True, "parse_reason": "no_message"})
    assert not is_valid_task({"valid": False})


def test_code_f_prompt_shows_inputs_that_fit_the_program():
    # AZR's fixed two-argument example was copied by the small model whatever f's arity
    prompt = prompts.proposer_f_prompt("def f(a):\n    return a", 10, ["3", "[1, 2]"])
    assert "```input\n3\n```" in prompt and "'John'" not in prompt
