"""Answers that read only what a task shows: the copy and echo baselines, graded in the sandbox.

A score on a held-out set means something only beside what needs no reasoning (DESIGN.md, "a ruler
that cannot be gamed"): the best constant answer, and the answers a solver gives by handing back
what it is shown.

* **copy** (`code_o`): an argument of the shown input given as the output (or the whole input); right
  whenever the program returns one of its arguments unchanged.
* **echo** (`code_i`): the shown output handed back as the input (as the one argument, or repeated for
  each parameter); right whenever the program maps that value to itself (`sorted`, `upper`, `xs[:2]` on
  a short list), which the rule-based copy filter (`populora.tasks.tasks.is_copyable`: the output
  equals an argument of the *gold* input) does not see.

    verdicts = baseline_verdicts(tasks, params.verify, sandbox=box)   # task_id -> {"copy": bool} or {"echo": bool}

The best constant's candidates are defined here once (`constant_candidates`, `constant_answer`): the pool ruler
(`populora.heldout.ruler`) picks a pool under them and the study's baselines (`populora.analysis.baselines`) report
them, so the two cannot disagree about a pool.
"""

from __future__ import annotations

import ast

from populora.core.literals import argument_values
from populora.verifier.grading import grade_rows

BASELINE_OF = {"code_o": "copy", "code_i": "echo"}
# small literals a model reaches for when it does not know; a pool's own gold inputs and outputs are added per pool
SIMPLE_CONSTANTS = (
    "0",
    "1",
    "-1",
    "2",
    "3",
    "5",
    "10",
    "100",
    "''",
    "'a'",
    "'hello'",
    '"hello"',
    "'Hello'",
    "'HeLLo'",
    "'abc'",
    "'hello world'",
    "[]",
    "[0]",
    "[1]",
    "[1, 2, 3]",
    "[0, 2, 4]",
    "[1, 2, 3, 4]",
    "{}",
    "()",
    "True",
    "False",
    "None",
)


def constant_candidates(tasks: list[dict]) -> list[str]:
    """The constants a best-constant check tries on `tasks`: the simple literals, then every gold input and output of
    every task (both types: a list some `code_o` task is shown is a likely `code_i` answer), without repeats."""
    golds = sorted(
        {
            value
            for t in tasks
            for value in (*t.get("inputs", []), *t.get("outputs", []))
            if isinstance(value, str) and value.strip()
        }
    )
    return list(dict.fromkeys([*SIMPLE_CONSTANTS, *golds]))


def constant_answer(task: dict, value: str) -> str:
    """`value` as `task`'s answer: a `code_i` answer repeats it for each parameter of `f` (one literal for all)."""
    n = 1 if task["type"] == "code_o" else (arity(task["program"]) or 1)
    return ", ".join([value] * n) if n > 1 and "," not in value else value


def arity(program: str) -> int | None:
    """Positional parameters of `f` (None when the program has no plain `def f`)."""
    try:
        for node in ast.parse(program).body:
            if isinstance(node, ast.FunctionDef) and node.name == "f":
                return len(node.args.args)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return None


def copy_answers(task: dict) -> list[str]:
    """`code_o`: each argument of the shown input, and the whole input, as the output."""
    shown = task["inputs"][0]
    return list(dict.fromkeys([*(repr(v) for v in argument_values(shown)), shown]))


def echo_answers(task: dict) -> list[str]:
    """`code_i`: the shown output as the input: once, and repeated for each parameter of `f`."""
    output = task["outputs"][0]
    n = arity(task["program"]) or 1
    return list(dict.fromkeys([output, ", ".join([output] * n)]))


def baseline_answers(task: dict) -> list[str]:
    return copy_answers(task) if task["type"] == "code_o" else echo_answers(task) if task["type"] == "code_i" else []


def baseline_verdicts(tasks: list[dict], config=None, *, sandbox=None) -> dict[str, dict[str, bool]]:
    """task_id -> {"copy": solved} for `code_o`, {"echo": solved} for `code_i` (verified tasks with outputs)."""
    rows = [
        {"task_id": t["task_id"], "answer": answer, "answer_id": f"{t['task_id']}#{k}"}
        for t in tasks
        if t["type"] in BASELINE_OF
        for k, answer in enumerate(baseline_answers(t))
    ]
    graded = grade_rows([{**t, "valid": True} for t in tasks], rows, config, sandbox=sandbox)
    out = {t["task_id"]: {BASELINE_OF[t["type"]]: False} for t in tasks if t["type"] in BASELINE_OF}
    for row in graded:
        if row.get("correct"):
            task_type = next(iter(out[row["task_id"]]))
            out[row["task_id"]][task_type] = True
    return out


def solved_by_baseline(tasks: list[dict], config=None, *, sandbox=None) -> set[str]:
    """The ids of the tasks the copy or echo baseline solves."""
    return {tid for tid, verdict in baseline_verdicts(tasks, config, sandbox=sandbox).items() if any(verdict.values())}
