"""Grading of answers, one grader per task type (GRADERS).

code_o: value equality of the answer and the gold repr (1 == 1.0, dict/set order free), by
`ast.literal_eval` in this process when both are literals, else in the sandbox. code_i:
f(answer) == gold, in the sandbox. code_f: the answer program (the reference program's imports
prepended) must reproduce every hidden pair; it runs in a sandbox process that never sees the
gold outputs, and its reprs are compared here. Answers to code_o/code_i must be value
expressions (no attribute access, no calls of `f` or other functions: `f('x')` is not a
prediction) -> else `unsafe_answer`.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from populora.core.sections import TASK_TYPES, VerifySection
from populora.sandbox import Call, Job, Limits, RunResult, Sandbox
from populora.tasks.tasks import code_f_split
from populora.verifier.pool import guarded, limits_of, sandbox_for, verify_config
from populora.verifier.rules import (
    MAX_PROGRAM_CHARS,
    answer_names,
    call_source,
    is_value_expression,
    literal_equal,
    parse_arguments,
    values_only,
)
from populora.verifier.validity import VERIFY_REASONS

GRADE_REASONS = {
    "malformed_row": "the answer row is not an object or has no task_id",
    "unknown_task": "no valid task with this task_id",
    "malformed": "no answer (the student's output could not be parsed)",
    "too_long": "answer over the length limit",
    "syntax": "the answer does not parse (as a value, an argument list or a program)",
    "unsafe_answer": "a code_o/code_i answer that is not a value expression",
    "no_entry_function": "a code_f answer without a callable f",
    "exception": "evaluating the answer raised",
    "wrong": "evaluated fine, but not equal to the gold output",
    **{k: VERIFY_REASONS[k] for k in ("timeout", "memory", "crash", "output_too_large", "sandbox_error")},
}

Verdict = tuple[bool, str | None, str | None]  # (correct, reason, detail)
Thunk = Callable[[], Verdict]  # waits for the sandbox work submitted when it was made


@dataclass(frozen=True)
class Context:
    box: Sandbox
    limits: Limits


def _done(correct: bool, reason: str | None = None, detail: str | None = None) -> Thunk:
    return lambda: (correct, reason, detail)


def _call_verdict(run: RunResult) -> Verdict:
    """Verdict of a one-call job whose call carried `expect` (code_o fallback, code_i)."""
    if run.status != "ok":
        return False, run.status, run.detail
    call = run.calls[0]
    if call.status == "exception":
        return False, "exception", f"{call.exc_type}: {call.exc_message}"
    if call.status != "ok":
        return False, "no_entry_function" if call.status == "no_entry" else call.status, None
    return (True, None, None) if call.equal else (False, "wrong", None)


def _equal_in_sandbox(ctx: Context, task: dict, tree: ast.Module, gold: str, candidate: str):
    """Future of eval(gold) == eval(candidate) in the reference program's namespace, or None
    when the candidate is not a value expression."""
    try:
        node = ast.parse(candidate.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    if not is_value_expression(node, answer_names(tree)):
        return None
    job = Job(task["program"], (Call(candidate.strip(), expect=gold),), limits=ctx.limits)
    return ctx.box.submit(job)


def grade_code_o(ctx: Context, task: dict, tree: ast.Module, answer: str) -> Thunk:
    gold = task["outputs"][0]
    try:
        node = ast.parse(answer.strip(), mode="eval")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return _done(False, "syntax")
    fast = literal_equal(gold, answer)
    if fast is not None:
        return _done(fast, None if fast else "wrong")
    if not is_value_expression(node, answer_names(tree)):
        return _done(False, "unsafe_answer")
    future = _equal_in_sandbox(ctx, task, tree, gold, answer)
    return lambda: _call_verdict(future.result())


def grade_code_i(ctx: Context, task: dict, tree: ast.Module, answer: str) -> Thunk:
    call = parse_arguments(answer)
    if call is None:
        return _done(False, "syntax")
    if not values_only(call, answer_names(tree)):
        return _done(False, "unsafe_answer")
    job = Job(task["program"], (Call(call_source(answer), expect=task["outputs"][0]),), limits=ctx.limits)
    future = ctx.box.submit(job)
    return lambda: _call_verdict(future.result())


def grade_code_f(ctx: Context, task: dict, tree: ast.Module, answer: str) -> Thunk:
    try:
        ast.parse(answer)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return _done(False, "syntax")
    imports: list[str] = []
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            segment = ast.get_source_segment(task["program"], node)
            assert segment is not None  # the tree was parsed from this program: its nodes have positions
            imports.append(segment)
    program = "\n".join([*imports, answer])
    hidden_inputs, gold = code_f_split(task["inputs"])[1], code_f_split(task["outputs"])[1]
    # the gold outputs never enter the process that runs the solver's program
    future = ctx.box.submit(Job(program, tuple(Call(call_source(i)) for i in hidden_inputs), limits=ctx.limits))
    return lambda: _hidden_pairs_verdict(ctx, task, tree, future.result(), gold)


def _hidden_pairs_verdict(ctx: Context, task: dict, tree: ast.Module, run: RunResult, gold: list[str]) -> Verdict:
    if run.status != "ok":
        return False, run.status, run.detail
    for index, (call, expected) in enumerate(zip(run.calls, gold)):
        if call.status == "no_entry":
            return False, "no_entry_function", None
        if call.status == "exception":
            return False, "exception", f"hidden pair {index}: {call.exc_type}: {call.exc_message}"
        if call.status != "ok":
            return False, call.status, f"hidden pair {index}"
        if call.repr is None:  # the zygote writes one with every ok call; a forged result may not
            raise ValueError(f"hidden pair {index}: a call result without its repr")  # guarded: sandbox_error
        same = True if call.repr == expected else literal_equal(expected, call.repr)
        if same is None:
            future = _equal_in_sandbox(ctx, task, tree, expected, call.repr)
            same = future is not None and _call_verdict(future.result())[0]
        if not same:
            return False, "wrong", f"hidden pair {index}"
    return True, None, None


GRADERS: dict[str, Callable[[Context, dict, ast.Module, str], Thunk]] = {
    "code_o": grade_code_o,
    "code_i": grade_code_i,
    "code_f": grade_code_f,
}
assert set(GRADERS) == set(TASK_TYPES)


def start_grading(ctx: Context, task: dict, tree: ast.Module, answer: str) -> Thunk:
    """Submit the sandbox work for one answer now; the returned thunk waits for the verdict."""
    if len(answer) > MAX_PROGRAM_CHARS + 2 * ctx.limits.max_output_chars:
        return _done(False, "too_long")
    return GRADERS[task["type"]](ctx, task, tree, answer)


def _shape_ok(task_type: str, n_inputs: int) -> bool:
    """One input for code_o/code_i; code_f needs at least one shown and one hidden pair (how many
    the verifier required is `propose.code_f_inputs`: the grader splits whatever the task carries)."""
    return n_inputs >= 2 if task_type == "code_f" else n_inputs == 1


def _task_index(tasks: Iterable) -> dict[str, tuple[dict, ast.Module]]:
    """Valid, well-formed task rows by task_id (first one wins); invalid rows are ignored."""
    index: dict[str, tuple[dict, ast.Module]] = {}
    for task in tasks:
        if not (
            isinstance(task, dict)
            and task.get("valid") is True
            and task.get("type") in TASK_TYPES
            and isinstance(task.get("task_id"), str)
            and isinstance(task.get("program"), str)
            and isinstance(task.get("outputs"), list)
            and isinstance(task.get("inputs"), list)
            and len(task["outputs"]) == len(task["inputs"])
            and _shape_ok(task["type"], len(task["inputs"]))
        ):
            continue
        try:
            index.setdefault(task["task_id"], (task, ast.parse(task["program"])))
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
    return index


def grade_rows(
    tasks: Iterable,
    answers: Iterable,
    config: VerifySection | None = None,
    *,
    sandbox: Sandbox | None = None,
    progress: Callable[[int], None] | None = None,
    **overrides,
) -> list[dict]:
    """One output row per answer row, in order: the row plus correct, reason, reason_detail.
    Identical (task_id, answer) pairs are executed once. `config`, `overrides` and `sandbox` as
    for verify_rows (IsolationError likewise)."""
    index = _task_index(tasks)
    answers = list(answers)
    config = verify_config(config, **overrides)
    with sandbox_for(config, sandbox) as box:
        ctx, thunks, plan = Context(box, limits_of(config)), {}, []
        for row in answers:
            if not isinstance(row, dict) or not isinstance(row.get("task_id"), str):
                plan.append(_done(False, "malformed_row"))
            elif row["task_id"] not in index:
                plan.append(_done(False, "unknown_task"))
            elif not isinstance(row.get("answer"), str):
                plan.append(_done(False, "malformed"))
            else:
                key = (row["task_id"], row["answer"])
                if key not in thunks:
                    thunks[key] = guarded(
                        lambda row=row: start_grading(ctx, *index[row["task_id"]], row["answer"]),
                        lambda d: _done(False, "sandbox_error", d),
                    )
                plan.append(thunks[key])
        verdicts: dict[int, Verdict] = {}
        out = []
        for row, thunk in zip(answers, plan):
            if id(thunk) not in verdicts:
                verdicts[id(thunk)] = guarded(thunk, lambda d: (False, "sandbox_error", d))
            verdict = verdicts[id(thunk)]
            base = dict(row) if isinstance(row, dict) else {"row": row}
            out.append({**base, "correct": verdict[0], "reason": verdict[1], "reason_detail": verdict[2]})
            if progress:
                progress(1)
        return out
