"""Validity of proposals (AZR's rules with its bugs fixed; decided from structured results, never by
searching for the word "error"). A proposal is valid when, in order:
  * the row is well formed and has 1 input (code_o, code_i) or `code_f_inputs` inputs (code_f,
    default 10: the first half shown, the rest hidden; `populora.tasks.tasks.code_f_split`); the program parses, defines a top-level `def f`, uses no forbidden module (every
    import form; `__import__`, `importlib`) and no forbidden builtin or introspection attribute
    (populora.verifier.rules); each input is a Python argument list;
  * f(input) returns for every input, within the limits, in two separate processes with
    different hash seeds and reversed input order, with equal values (else `nondeterministic`);
  * every result's repr evaluates back to an equal value and is an expression a solver could
    write (literals, containers, calls of the program's classes/imports; else `unrepresentable`:
    `nan`, objects compared by identity, `<object at 0x...>` reprs, which AZR accepted silently).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from populora.core.sections import VerifySection
from populora.sandbox import Call, Job, Limits, RunResult, Sandbox
from populora.tasks.tasks import CODE_F_INPUTS
from populora.verifier.pool import guarded, limits_of, sandbox_for, verify_config
from populora.verifier.rules import (
    MAX_INPUT_CHARS,
    MAX_PROGRAM_CHARS,
    answer_names,
    call_source,
    is_value_expression,
    literal_equal,
    static_check,
)

VERIFY_REASONS = {
    "malformed_row": "not an object, or task_id/type/program/inputs/message missing or mistyped",
    "wrong_input_count": "code_o/code_i need 1 input, code_f propose.code_f_inputs (default 10)",
    "too_long": f"program over {MAX_PROGRAM_CHARS} or an input over {MAX_INPUT_CHARS} characters",
    "syntax": "the program does not parse",
    "bad_input": "an input is not a Python argument list",
    "forbidden_module": "imports a forbidden module (any form), or a relative import",
    "forbidden_name": "uses a forbidden builtin (open, eval, exec, __import__, ...) or introspection attribute",
    "no_entry_function": "no top-level `def f`",
    "exception": "f (or the program's top level) raised for some input",
    "timeout": "ran past the wall-clock or CPU limit",
    "memory": "ran past the memory limit",
    "crash": "the process died (segfault, abort, garbled result)",
    "output_too_large": "a result's repr is longer than max_output_chars (never truncated)",
    "unrepresentable": "a result's repr does not evaluate back to an equal value a solver could write",
    "nondeterministic": "two separate executions gave different values",
    "sandbox_error": "the sandbox failed; not the program's fault",
    "copyable": "code_o/code_i output equals an argument of the input (only with propose.reject_copyable; "
    "populora.tasks.tasks.mark_copyable)",
    "heldout": "the program is a held-out pool program (stages.verify --heldout; populora.heldout.pool.mark_heldout)",
}

Outcome = tuple[str | None, str | None, list[str]]  # (reason, detail, outputs)


def judge_runs(run_a: RunResult, run_b_reversed: RunResult, names: frozenset[str]) -> Outcome:
    """(reason, detail, outputs) from two executions; run B evaluated the inputs in reverse order."""
    for run in (run_a, run_b_reversed):
        if run.status != "ok":
            return run.status, run.detail, []
    outputs: list[str] = []
    for index, (a, b) in enumerate(zip(run_a.calls, reversed(run_b_reversed.calls))):
        for call in (a, b):
            if call.status == "no_entry":
                return "no_entry_function", "f is not callable", []
            if call.status == "exception":
                return "exception", f"input {index}: {call.exc_type}: {call.exc_message}", []
            if call.status == "output_too_large":
                return "output_too_large", f"input {index}", []
        if a.repr is None or b.repr is None:  # the zygote writes one with every ok call; a forged result may not
            raise ValueError(f"input {index}: a call result without its repr")  # guarded: sandbox_error
        if not (a.roundtrip and b.roundtrip):
            return "unrepresentable", f"input {index}: {a.repr[:100]}", []
        if a.repr != b.repr and not literal_equal(a.repr, b.repr):
            return "nondeterministic", f"input {index}: {a.repr[:80]} vs {b.repr[:80]}", []
        try:
            representable = is_value_expression(ast.parse(a.repr, mode="eval"), names)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            representable = False
        if not representable:
            return "unrepresentable", f"input {index}: {a.repr[:100]}", []
        outputs.append(a.repr)
    return None, None, outputs


def _start_verification(row, box: Sandbox, limits: Limits, code_f_inputs: int) -> Callable[[], Outcome]:
    """Static checks now, and both executions submitted now; the thunk waits for the outcome."""
    if not isinstance(row, dict):
        return lambda: ("malformed_row", "not a JSON object", [])
    reason, detail, tree = static_check(row, code_f_inputs)
    if reason:
        return lambda: (reason, detail, [])
    assert tree is not None  # static_check parsed the program: it found no reason
    calls = tuple(Call(call_source(a)) for a in row["inputs"])
    # two separate processes with different hash seeds; the second evaluates the inputs in reverse
    run_a = box.submit(Job(row["program"], calls, roundtrip=True, limits=limits), group=0)
    run_b = box.submit(Job(row["program"], calls[::-1], roundtrip=True, limits=limits), group=1)
    names = answer_names(tree)
    return lambda: judge_runs(run_a.result(), run_b.result(), names)


def _verify_failure(detail: str) -> Callable[[], Outcome]:
    return lambda: ("sandbox_error", detail, [])


def verify_rows(
    rows: Iterable,
    config: VerifySection | None = None,
    *,
    sandbox: Sandbox | None = None,
    progress: Callable[[int], None] | None = None,
    code_f_inputs: int = CODE_F_INPUTS,
    **overrides,
) -> list[dict]:
    """One output row per input row, in order: the row plus valid, reason, outputs, reason_detail.

    `config` is the `verify` section (default: its defaults); keyword `overrides` are its field
    names (`verify_rows(rows, **params.verify.model_dump())` works too). Without `sandbox`, a pool
    is started for this call and closed after it. A code_f row must carry `code_f_inputs` inputs
    (`propose.code_f_inputs`). IsolationError when a layer of
    config.required_layers is missing."""
    rows = list(rows)
    config = verify_config(config, **overrides)
    limits = limits_of(config)
    with sandbox_for(config, sandbox) as box:
        thunks = [
            guarded(lambda row=row: _start_verification(row, box, limits, code_f_inputs), _verify_failure)
            for row in rows
        ]
        out = []
        for row, thunk in zip(rows, thunks):
            reason, detail, outputs = guarded(thunk, lambda d: _verify_failure(d)())
            base = dict(row) if isinstance(row, dict) else {"row": row}
            out.append({**base, "valid": reason is None, "reason": reason, "outputs": outputs, "reason_detail": detail})
            if progress:
                progress(1)
        return out
