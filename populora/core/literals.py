"""Python literals as a task or a prompt shows them: argument lists and output reprs, compared by
value. The one rule for "a solver could answer by echoing what it is shown" lives here, shared by
the self-play tasks (`propose.reject_copyable`, `populora.tasks.tasks.is_copyable`) and the
benchmark diagnostics (`populora.bench.diagnostics`): a module of its own so that the model stages
do not depend on the benchmark code.
"""

from __future__ import annotations

import ast

MISSING = object()  # not a literal (or no text at all): equal to nothing


def literal_value(source: str | None):
    """The value of a literal's source (`"[1, 2]"` -> `[1, 2]`), MISSING when it is not one."""
    try:
        return ast.literal_eval(source.strip()) if source is not None else MISSING
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return MISSING


def argument_values(arguments: str | None) -> list:
    """The literal values of an argument list's source (`"'a', [1, 2]"` -> `['a', [1, 2]]`);
    arguments that are not literals are left out."""
    if arguments is None:
        return []
    try:
        call = ast.parse(f"f({arguments})", mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return []
    if not isinstance(call, ast.Call):  # a ")" in the source closes the call early: "1) if x else (2"
        return []
    values = []
    for node in [*call.args, *(k.value for k in call.keywords)]:
        try:
            values.append(ast.literal_eval(node))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return values


def same_value(a, b) -> bool:
    """Equal values of the same type (1 and 1.0, or 1 and True, are not the same answer)."""
    try:
        return a is not MISSING and b is not MISSING and type(a) is type(b) and a == b
    except Exception:  # noqa: BLE001 - comparing arbitrary literals must not crash a report
        return False


def output_is_an_argument(arguments: str | None, output: str | None) -> bool:
    """Whether the value of `output` (a repr) equals one argument of `arguments` (an argument
    list's source): a solver shown one of them can answer with it verbatim. The rule behind
    `copy_solves` (CRUXEval-O) and behind `propose.reject_copyable` (self-play tasks)."""
    value = literal_value(output)
    return any(same_value(value, arg) for arg in argument_values(arguments))
