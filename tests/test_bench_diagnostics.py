"""CRUXEval answer diagnostics on hand-made samples: right, wrong, truncated, unparsed, copied."""

from __future__ import annotations

from populora.bench.diagnostics import answer_diagnostics, argument_values, copies, copy_solves


def _o(answer, *, correct=False, truncated=False, tokens=5, input="'abc', [1, 2]", gold="'cba'"):
    return {"type": "code_o", "input": input, "gold_output": gold, "answer": answer, "correct": correct,
            "truncated": truncated, "tokens": tokens}


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
    sample = {"type": "code_i", "input": "'abc'", "gold_output": "'xyz'", "correct": False, "truncated": False, "tokens": 3}
    assert copies({**sample, "answer": "'xyz'"}) == (True, True)  # the shown output passed back
    assert copies({**sample, "answer": "1, 'xyz'"}) == (False, True)
    assert copies({**sample, "answer": "'abc'"}) == (False, False)


def test_copy_ceiling_counts_problems_a_copier_solves():
    assert copy_solves(_o("'x'", input="'abc', 3", gold="'abc'"))
    assert not copy_solves(_o("'x'", input="'abc', 3", gold="'cba'"))
    assert copy_solves({"type": "code_i", "input": "[1, 2]", "gold_output": "[1, 2]"})
    assert not copy_solves({"type": "code_i", "input": "[2, 1]", "gold_output": "[1, 2]"})


def test_diagnostics_classify_each_answer_once():
    samples = [_o("'cba'", correct=True, tokens=4), _o("'abc'", tokens=6), _o("'abc', [1, 2]", tokens=10),
               _o(None, truncated=True, tokens=96), _o(None, tokens=2), _o("'zzz'", tokens=2, gold="'abc'")]
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
        {"task_id": "echo", "type": "code_o", "input": "'ab'", "answer": "'ab'", "gold_output": "'ab'", "correct": True},
        {"task_id": "right", "type": "code_o", "input": "1, 2", "answer": "3", "gold_output": "3", "correct": True},
        {"task_id": "cut", "type": "code_o", "input": "[1]", "answer": None, "gold_output": "2", "correct": False, "truncated": True},
        {"task_id": "arg", "type": "code_o", "input": "[1], 5", "answer": "5", "gold_output": "6", "correct": False},
    ]
    flags = answer_flags(samples)
    assert flags == {"correct": ["echo", "right"], "truncated": ["cut"], "no_answer": ["cut"],
                     "copies_input": ["echo"], "copies_argument": ["arg", "echo"]}
    counts = answer_diagnostics(samples)
    assert all(len(flags[key]) == counts[key] for key in flags)
