"""Garbage completions never crash a stage (issue 50): the small version of perf/fuzz_completions.py,
hypothesis properties of the parsers, and the library bugs the fuzzer found, one test each.

    .venv/bin/python -m pytest tests/test_fuzz_completions.py -m "" -q     (-m "": the sandboxed run is marked slow)

The full run (10,000 completions, idle and beside two CPU hogs) is `perf/fuzz_completions.py`; its
figures are in docs/measurements.md and perf/measured/fuzz_completions.json.
"""

from __future__ import annotations

import ast
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from populora.core.io import read_jsonl, write_jsonl
from populora.tasks import parsing
from populora.tasks.parsing import PARSE_REASONS, answer_section, clean_program, parse_answer, parse_proposal
from populora.tasks.program_metrics import program_metrics
from tests.conftest import REPO

sys.path.insert(0, str(REPO / "perf"))
from fuzz_completions import fuzz
from fuzz_corpus import TOKENS, generate


@pytest.mark.slow  # sandboxes and busy loops for ~30 s: CI's full lane (scripts/run_tests.sh), not the fast one
def test_garbage_through_every_stage_idle_and_beside_cpu_hogs():
    """400 completions of every kind: nothing raises, every failed row has a known reason, nothing
    escapes the sandbox, and the verdicts beside two busy loops equal those on the idle machine."""
    samples = generate(400, seed=50)
    assert {s.kind for s in samples} >= {
        "grammar",
        "mutated",
        "nested",
        "random_bytes",
        "not_python",
        "escape",
        "program_answer",
        "parser_talk",
        "unterminated_fence",
    }
    report = fuzz(samples, hogs=2)
    assert report["failures"] == [] and report["escapes"] == []
    assert report["verdicts_differ"] == 0 and report["verdicts_compared"] == 2 * len(samples)
    reasons = report["reasons"]  # the corpus reaches every layer: parser, static rules, sandbox, grader
    assert {"syntax", "format", "too_few_inputs", "parsed"} <= set(reasons["propose"])
    assert {"valid", "exception", "forbidden_module", "wrong_input_count"} <= set(reasons["verify"])
    assert {"correct", "wrong", "malformed", "exception"} <= set(reasons["grade"])


TEXT = st.lists(st.one_of(st.sampled_from(TOKENS), st.text(max_size=12)), max_size=30).map("".join)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    text=TEXT,
    task_type=st.sampled_from(["code_o", "code_i", "code_f"]),
    mode=st.sampled_from(["scaffolded", "free_form"]),
    truncated=st.booleans(),
)
def test_parsers_return_a_known_reason_and_never_raise(text, task_type, mode, truncated):
    row = parse_proposal(text, task_type, mode=mode, n_inputs=3, truncated=truncated)
    assert row["parse_reason"] is None or row["parse_reason"] in PARSE_REASONS
    answer, reason = parse_answer(text, task_type, mode=mode, truncated=truncated)
    assert (answer is None) != (reason is None) and (reason is None or reason in PARSE_REASONS)


def _exhaustive_prefix(src: str):
    """The search as it was (every prefix of whole lines, longest first), on Python's line ends."""
    lines = parsing._LINE_BREAK.split(src.rstrip()) if src.strip() else []
    for end in range(len(lines), 0, -1):
        try:
            return ast.dump(ast.parse("\n".join(lines[:end])))
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
    return None


LINES = st.lists(
    st.sampled_from(
        [
            "def f(a):",
            "    return a",
            "    x = (",
            "    )",
            "x = 1 +",
            "y = 2",
            "  z = 3",
            "class C:",
            "    pass",
            "'''",
            "if a:",
            "else:",
            "print(f(1))",
            "return",
            "def g(:",
            "    return [",
            "1]",
            "",
            "x = [1,",
            "     2",
            "     3]",
            '"""doc',
            "a = \\",
            "  b",
            "    if a:",
            "        return 1",
            "    else:",
            "\tpass",
            "@dec",
            "def h():",
            "# note",
            "  ",
            "x = 1  # c",
            "\\",
            "match a:",
            "    case 1:",
        ]
    ),
    max_size=14,
).map("\n".join)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(src=LINES)
def test_the_bounded_prefix_search_finds_what_the_exhaustive_one_found(src):
    tree = parsing._longest_parsable_prefix(src)
    assert (ast.dump(tree) if tree is not None else None) == _exhaustive_prefix(src)


# ---------------------------------------------------------------- the bugs the fuzzer found


def test_a_deeply_nested_expression_is_a_syntax_reason_not_a_crash():
    """ast.parse raises MemoryError (parser stack) or RecursionError on these; propose and solve crashed."""
    for expression in (
        "-" * 200_000 + "1",
        "not " * 100_000 + "1",
        "+".join(["1"] * 4000),
        "a" + "()" * 5000,
        "lambda: " * 50_000 + "1",
    ):
        program = f"def f(a):\n    return {expression}"
        proposal = parse_proposal(
            f"```python\n{program}\n```\n```input\n1\n```", "code_o", mode="scaffolded", n_inputs=1
        )
        assert proposal["parse_reason"] in ("syntax", "too_long")
        assert parse_answer(f"```python\n{program}\n```", "code_f", mode="scaffolded")[1] in ("syntax", "too_long")


def test_a_long_broken_program_is_cut_in_bounded_time():
    """Every prefix was parsed: 3,000 broken lines took 1.5 s, a megabyte hours."""
    broken = "def f(a):\n    return a\n" + "x = (\n" * 3000
    start = time.perf_counter()
    assert clean_program(broken) == ("def f(a):\n    return a", None)
    assert clean_program(broken * 60)[1] == "too_long"
    assert clean_program("def f(a):\n    return a\n" + "x = 1 +\n" * 2000)[0] == "def f(a):\n    return a"
    assert answer_section("<think></think><answer>" * 100_000) is None  # a backtracking regex: quadratic
    assert time.perf_counter() - start < 5


def test_rows_with_lone_surrogates_are_written_and_read_back(tmp_path):
    """write_jsonl encoded UTF-8 strictly: a completion holding a lone surrogate crashed the stage's write."""
    rows = [{"text": "ok \ud800 \udfff end"}, {"text": "plain é"}]
    write_jsonl(tmp_path / "rows.jsonl", rows)
    assert read_jsonl(tmp_path / "rows.jsonl") == rows
    assert '"plain é"' in (tmp_path / "rows.jsonl").read_text(encoding="utf-8")  # other rows keep raw UTF-8


def test_complexity_of_a_valid_but_deep_program_is_measured():
    """radon's visitor recursed past the limit on a 500-term sum (a valid task): checkpoint crashed."""
    metrics = program_metrics("def f(a):\n    return " + " + ".join(["a"] * 1500))
    assert metrics["ast_depth"] == 1502 and metrics["cyclomatic_complexity"] == 1
    assert sys.getrecursionlimit() < 10_000  # restored
    path = Path(parsing.__file__)
    assert path.is_file()
