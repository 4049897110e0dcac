"""Program complexity metrics and the normalised-AST coverage hash.

.venv/bin/python -m pytest tests/test_program_metrics.py -q
"""

from __future__ import annotations

import pytest

from populora.tasks.program_metrics import (
    ast_depth,
    coverage,
    cyclomatic_complexity,
    normalized_ast_hash,
    program_metrics,
)

IDENTITY = "def f(a):\n    return a"
BRANCHY = """def f(xs, limit):

    total = 0
    for x in xs:
        if x > limit and x % 2:
            total += x
        elif x < 0:
            total -= 1
    return total
"""
NESTED = "def f(a):\n    def g(x):\n        if x:\n            return 1\n        return 0\n    return g(a)"
CLASSY = "class A:\n    def m(self, x):\n        return x if x else 0\ndef f(a):\n    return A().m(a)"


@pytest.mark.parametrize(
    "src,expected",
    [
        (IDENTITY, {"ast_depth": 3, "cyclomatic_complexity": 1, "loc": 2, "distinct_variables": 1}),
        (BRANCHY, {"ast_depth": 6, "cyclomatic_complexity": 5, "loc": 8, "distinct_variables": 4}),
        (NESTED, {"ast_depth": 5, "cyclomatic_complexity": 3, "loc": 6, "distinct_variables": 2}),
        (CLASSY, {"ast_depth": 6, "cyclomatic_complexity": 3, "loc": 5, "distinct_variables": 3}),
    ],
)
def test_program_metrics(src, expected):
    assert program_metrics(src) == expected


def test_depth_of_deep_nesting_does_not_recurse():
    src = "def f(a):\n    return " + "[" * 90 + "a" + "]" * 90
    assert ast_depth(__import__("ast").parse(src)) > 90


def test_cyclomatic_counts_nested_functions_and_methods():
    assert cyclomatic_complexity(NESTED) == 1 + 2
    assert cyclomatic_complexity(CLASSY) == 2 + 1


def test_hash_ignores_names_constants_and_docstrings():
    renamed = "def g(value):\n    '''doc'''\n    return value"
    assert normalized_ast_hash(IDENTITY) == normalized_ast_hash(renamed)
    assert normalized_ast_hash("def f(a):\n    return a + 1") == normalized_ast_hash("def f(b):\n    return b + 7")


def test_hash_keeps_structure_builtins_and_attributes():
    hashes = {
        normalized_ast_hash(src)
        for src in (
            IDENTITY,
            "def f(a):\n    return len(a)",
            "def f(a):\n    return sorted(a)",
            "def f(a):\n    return a.upper()",
            "def f(a):\n    return a.lower()",
            "def f(a):\n    return a + 'x'",
            "def f(a):\n    return a + 1.5",
        )
    }
    assert len(hashes) == 7


def test_coverage_counts_new_hashes_without_mutating():
    seen = {"h1"}
    merged, n_new = coverage(seen, ["h1", "h2", "h3", "h3"])
    assert (merged, n_new) == (frozenset({"h1", "h2", "h3"}), 2)
    assert seen == {"h1"}


def test_invalid_source_raises():
    with pytest.raises(SyntaxError):
        program_metrics("def f(:")
