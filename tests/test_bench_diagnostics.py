"""CRUXEval answer diagnostics on hand-made samples: right, wrong, truncated, unparsed, copied."""

from __future__ import annotations

from populora.bench.diagnostics import answer_diagnostics, argument_values, copies, copy_solves


def _o(answer, *, correct=False, truncated=False, tokens=5, input="'abc', [1, 2]", gold="'cba'"):
    return {
        "type": "code_o",
        "input": input,
        "gold_output": gold,
        "answer": answer,
        "correct": correct,
        "truncated": truncated,
        "tokens": tokens,
    }


def test_argument_values_reads_literals_and_skips_the_rest():
    assert argument_values("'a', [1, 2], {'k': (3,)}") == ["a", [1, 2], {"k": (3,)}]
    assert argument_values("x, 2") == [2]
    assert argument_values("((") == [] and argument_values(None) == []


def test_copies_of_code_o_answers():
    assert copies(_o("'abc', [1, 2]")) == (True, False)  # the whole argument list, verbatim
    assert copies(_o("'abc'")) == (False, True)  # one argument
    assert copies(_o('"abc"')) == (False, True)  # by value, whatever the quotes
    assert copies(_o("[1,2]")) == (False, True)
    assert copies(_o("'cba'")) == (False, False)
    assert copies(_o("1")) == (False, False)  # 1 is not True, nor 1.0 a copy of 1: types must match
    assert copies(_o("True", input="1")) == (False, False)
    assert copies(_o(None)) == (False, False)


def test_copies_of_code_i_answers():
    sample = {
        "type": "code_i",
        "input": "'abc'",
        "gold_output": "'xyz'",
        "correct": False,
        "truncated": False,
        "tokens": 3,
    }
    assert copies({**sample, "answer": "'xyz'"}) == (True, True)  # the shown output passed back
    assert copies({**sample, "answer": "1, 'xyz'"}) == (False, True)
    assert copies({**sample, "answer": "'abc'"}) == (False, False)


def test_copy_ceiling_counts_problems_a_copier_solves():
    assert copy_solves(_o("'x'", input="'abc', 3", gold="'abc'"))
    assert not copy_solves(_o("'x'", input="'abc', 3", gold="'cba'"))
    assert copy_solves({"type": "code_i", "input": "[1, 2]", "gold_output": "[1, 2]"})
    assert not copy_solves({"type": "code_i", "input": "[2, 1]", "gold_output": "[1, 2]"})


def test_diagnostics_classify_each_answer_once():
    samples = [
        _o("'cba'", correct=True, tokens=4),
        _o("'abc'", tokens=6),
        _o("'abc', [1, 2]", tokens=10),
        _o(None, truncated=True, tokens=96),
        _o(None, tokens=2),
        _o("'zzz'", tokens=2, gold="'abc'"),
    ]
    d = answer_diagnostics(samples)
    assert d["n"] == 6 and d["correct"] == 1 and d["wrong"] == 3 and d["no_answer"] == 2 and d["truncated"] == 1
    assert d["correct"] + d["wrong"] + d["no_answer"] == d["n"]
    assert d["copies_input"] == 1 and d["copies_argument"] == 1
    assert d["mean_answer_tokens"] == round((4 + 6 + 10 + 96 + 2 + 2) / 6, 3)
    assert d["copy_ceiling"] == 1  # the last problem's gold output is its first argument
    assert answer_diagnostics([])["n"] == 0


def test_answer_flags_name_the_problems_behind_each_count():
    from populora.bench.diagnostics import answer_diagnostics, answer_flags

    samples = [
        {
            "task_id": "echo",
            "type": "code_o",
            "input": "'ab'",
            "answer": "'ab'",
            "gold_output": "'ab'",
            "correct": True,
        },
        {"task_id": "right", "type": "code_o", "input": "1, 2", "answer": "3", "gold_output": "3", "correct": True},
        {
            "task_id": "cut",
            "type": "code_o",
            "input": "[1]",
            "answer": None,
            "gold_output": "2",
            "correct": False,
            "truncated": True,
        },
        {"task_id": "arg", "type": "code_o", "input": "[1], 5", "answer": "5", "gold_output": "6", "correct": False},
    ]
    flags = answer_flags(samples)
    assert flags == {
        "correct": ["echo", "right"],
        "truncated": ["cut"],
        "no_answer": ["cut"],
        "copies_input": ["echo"],
        "copies_argument": ["arg", "echo"],
    }
    counts = answer_diagnostics(samples)
    assert all(len(flags[key]) == counts[key] for key in flags)


def _jsonl(path, rows):
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_training_diagnostics_count_copies_per_generation_and_type(tmp_path):
    from populora.bench.diagnostics import training_diagnostics, training_samples

    tasks = [
        {"task_id": "o1", "type": "code_o", "inputs": ["'ab', 2"], "outputs": ["'abab'"]},
        {"task_id": "i1", "type": "code_i", "inputs": ["[3]"], "outputs": ["[3]"]},
        {"task_id": "f1", "type": "code_f", "inputs": ["1"], "outputs": ["2"]},
    ]

    def answer(i, task, text, correct, reason=None):
        task_type = {"o": "code_o", "i": "code_i", "f": "code_f", "m": "code_o"}[task[0]]
        return {
            "answer_id": f"a{i}",
            "task_id": task,
            "type": task_type,
            "answer": text,
            "correct": correct,
            "parse_reason": reason,
            "tokens": 4,
        }

    gen0 = [
        answer(0, "o1", "'ab'", False),
        answer(1, "o1", "'abab'", True),
        answer(2, "o1", None, False, "truncated"),
        answer(3, "i1", "[3]", True),
        answer(4, "f1", "def f(x): return 2", True),
    ]
    gen1 = [answer(5, "o1", "'ab', 2", False), answer(6, "o1", "2", False), answer(7, "missing", "1", False)]
    _jsonl(tmp_path / "gen000" / "solve_tasks.jsonl", tasks)
    _jsonl(tmp_path / "gen000" / "graded.jsonl", gen0)
    _jsonl(tmp_path / "gen001" / "solve_tasks.jsonl", tasks)
    _jsonl(tmp_path / "gen001" / "graded.jsonl", gen1)
    (tmp_path / "gen002").mkdir()  # a generation not run yet: left out
    samples = training_samples(tasks, gen0)
    assert [s["task_id"] for s in samples] == ["a0", "a1", "a2", "a3"]  # code_f left out; ids are the answers'
    assert samples[2]["truncated"] and samples[0]["input"] == "'ab', 2" and samples[3]["gold_output"] == "[3]"

    d = training_diagnostics(tmp_path)
    assert list(d) == ["gen000", "gen001"]
    o0, i0, o1 = d["gen000"]["code_o"], d["gen000"]["code_i"], d["gen001"]["code_o"]
    assert (o0["n"], o0["correct"], o0["truncated"], o0["copies"], o0["copies_correct"]) == (3, 1, 1, 1, 0)
    # the code_i answer passes the shown output back, and the task's own input is that value: a paid copy
    assert (i0["n"], i0["copies"], i0["copies_correct"], i0["copy_ceiling"]) == (1, 1, 1, 1)
    # the verbatim argument list copies the input, the second argument alone an argument: two copies;
    # an answer to a task the students were not shown is left out
    assert (o1["n"], o1["copies_input"], o1["copies_argument"], o1["copies"]) == (2, 1, 1, 2)
    assert d["gen001"]["code_i"]["n"] == 0
