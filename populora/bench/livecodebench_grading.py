"""LiveCodeBench grading: every test case of a solution in the verifier's sandbox, judged as lcb_runner judges.

    verdicts = grade(pairs, params.verify, timeout_s=6.0, memory_mb=2048)   # pairs: [(problem, code), ...]
    verdicts[i] == {"passed": False, "reason": "wrong_answer", "detail": "test 2 of 9: ...",
                    "tests_passed": 1, "tests_total": 9}

What runs follows lcb_runner/evaluation/testing_util.py (`run_test`):

* stdin problems (no `func_name` in the metadata): a last `if __name__ == '__main__':` block is
  unwrapped (`clean_if_name`), the imports are hoisted and everything else becomes the body of
  `wrapped_function`, behind lcb_runner's `import_string` (`make_function`). The call sees lcb_runner's
  mocks: `sys.stdin` reads the test input (read, readline, readlines, buffer), `open()` returns it,
  `sys.stdout` is captured, SystemExit ends the program normally. The output passes when, after
  `strip()` of the whole text and of each line, it has as many lines as the expected output and every
  line is equal, or else both lines parse as whitespace-separated decimals that are equal.
* functional problems (LeetCode): `import_string` + the code; `Solution().<func_name>` (a module
  function when there is no `class Solution`) is called with the JSON-decoded arguments, one per line
  of the input; a tuple result counts as a list; it passes when equal to the JSON-decoded output.
* tests run in order, public then private; the first failure ends the problem (pass@1 = all passed).

Every test case is one sandbox job (`populora.sandbox`, the verifier's process-isolated pool, its
layers required as `verify.required_layers` says): a fresh fork with a CPU-time limit of
`bench.livecodebench.timeout_s` (lcb_runner: 6 s of wall clock per test; a wall-clock backstop of 5x) for loading the solution and running it,
`memory_mb` of address space, a read-only file system but a private scratch folder, no network, no
processes, an empty environment. The expected output never enters that process: the solution's
stdout (or return value, as a literal repr) comes back and is compared here. Differences from
lcb_runner: each test gets a fresh process (a Solution instance is not shared between tests);
reliability_guard's disabled os functions are left to the sandbox (writes, signals and forks fail
there anyway); a return value without a Python literal repr (a custom object) counts as wrong.

Reasons (`REASONS`): wrong_answer, runtime_error, timeout, memory, syntax, no_entry, no_code,
output_too_large, crash, sandbox_error.
"""

from __future__ import annotations

import ast
import json
import logging
import sys
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal

from populora.core.progress import Progress
from populora.sandbox import Call, Job, Limits, RunResult
from populora.verifier.pool import sandbox_for

REASONS = {
    "wrong_answer": "ran, but the output differs from the expected one",
    "runtime_error": "the solution raised (loading it or on a test)",
    "timeout": "a test ran past bench.livecodebench.timeout_s",
    "memory": "a test ran out of its address space",
    "syntax": "the extracted code does not parse",
    "no_entry": "no wrapped program / no Solution.<func_name> to call",
    "no_code": "the completion holds no fenced code block",
    "output_too_large": "the output is far longer than the expected one",
    "crash": "the test process died (e.g. a segfault)",
    "sandbox_error": "the sandbox could not run the test",
}
INT_DIGITS = 50_000  # lcb_runner's evaluation raises Python's int/str conversion limit to this

IMPORT_STRING = "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\nfrom heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\nfrom statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\nfrom io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\nimport string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\nimport math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\nimport io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"  # lcb_runner's, verbatim

# Runs inside the sandbox with the solution's program text as _SOURCE; the call is
# `_lcb_stdin(_SOURCE, input)` or `_lcb_call(_SOURCE, func_name, input)`.
HARNESS = r"""
import builtins as _builtins, io as _io, json as _json, sys as _sys, types as _types

_sys.set_int_max_str_digits(50000)
_builtins.quit = None  # as lcb_runner's reliability_guard


class _LcbNoEntry(Exception):
    pass


class _MockBuffer:
    def __init__(self, inputs):
        self.inputs = inputs.encode("utf-8")

    def read(self, *args):
        return self.inputs

    def readline(self, *args):
        return self.inputs.split(b"\n")[0] + b"\n"


class _MockStdin:
    def __init__(self, inputs):
        self.inputs = inputs
        self._stringio = _io.StringIO(inputs)
        self.buffer = _MockBuffer(inputs)

    def read(self, *args):
        return self.inputs

    def readline(self, *args):
        return self._stringio.readline(*args)

    def readlines(self, *args):
        return self.inputs.split("\n")

    def __getattr__(self, name):
        return getattr(self._stringio, name)


def _lcb_method(source, name):
    module = _types.ModuleType("tmp_sol", "")
    exec(compile(source, "<solution>", "exec"), module.__dict__)
    method = getattr(module.Solution() if "class Solution" in source else module, name, None)
    if method is None:
        raise _LcbNoEntry(name)
    return method


def _lcb_stdin(source, inputs):
    captured = _io.StringIO()  # made before the solution's code runs (which could replace io.StringIO)
    captured.close = lambda *args: 1
    method = _lcb_method(source, "wrapped_function")
    lines, real = iter(inputs.split("\n")), _sys.stdin
    for name, patch in (("readline", lambda *a: next(lines)), ("readlines", lambda *a: inputs.split("\n")),
                        ("read", lambda *a: inputs)):
        try:
            setattr(real, name, patch)  # lcb_runner patches these on the stdin a solution may have bound
        except Exception:
            pass
    _sys.stdin = _MockStdin(inputs)
    _builtins.open = lambda *args, **kwargs: _io.StringIO(inputs)
    _sys.stdout = captured
    try:
        method()
    except SystemExit:
        pass
    return captured.getvalue()


def _lcb_call(source, name, inputs):
    method = _lcb_method(source, name)
    prediction = method(*[_json.loads(line) for line in inputs.split("\n")])
    if isinstance(prediction, tuple):
        prediction = list(prediction)
    if type(prediction).__module__ == "numpy" and hasattr(prediction, "tolist"):
        prediction = prediction.tolist()
    return prediction
"""


# ------------------------------------------------------------------ the program, as lcb_runner builds it


def clean_if_name(code: str) -> str:
    """lcb_runner's clean_if_name: a last `if __name__ == '__main__':` block becomes top-level code."""
    try:
        tree = ast.parse(code)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            # lcb_runner unparses lists of statements, which ast.unparse takes (typeshed: one node)
            body, block = ast.unparse(tree.body[:-1]), ast.unparse(last.body)  # type: ignore[arg-type]  # a list
            code = body + "\n" + block
    except Exception:  # noqa: BLE001  (as lcb_runner: any failure leaves the code as it is)
        pass
    return code


def make_function(code: str) -> str:
    """lcb_runner's make_function: imports hoisted, the rest the body of `wrapped_function`."""
    try:
        tree = ast.parse(code)
        imports = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom))]
        body = [s for s in tree.body if not isinstance(s, (ast.Import, ast.ImportFrom))]
        function = ast.FunctionDef(
            name="wrapped_function",
            args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[]),
            body=body,
            decorator_list=[],
            lineno=-1,
        )
        hoisted = ast.unparse(imports)  # type: ignore[arg-type]  # a list of statements, as in clean_if_name
        return IMPORT_STRING + "\n" + hoisted + "\n" + ast.unparse(function)
    except Exception:  # noqa: BLE001
        return code


def solution_source(problem: dict, code: str) -> str:
    """What the sandbox executes for `code` on this problem."""
    if problem["fn_name"]:
        return IMPORT_STRING + "\n\n" + code
    return make_function(clean_if_name(code))


def case_job(problem: dict, source: str, test: tuple[str, str], timeout_s: float, memory_mb: int) -> Job:
    """One test case as one sandbox job (the expected output stays out of it)."""
    inputs, expected = test
    call = (
        f"_lcb_call(_SOURCE, {problem['fn_name']!r}, {inputs!r})"
        if problem["fn_name"]
        else f"_lcb_stdin(_SOURCE, {inputs!r})"
    )
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=4 * len(expected) + 10_000)
    return Job(f"{HARNESS}\n_SOURCE = {source!r}\n", (Call(call),), entry=None, limits=limits)


# ----------------------------------------------------------------------------------- comparison


def truncated(value, length: int = 300) -> str:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= length else text[: length // 2] + "...(truncated) ..." + text[-length // 2 :]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(part) for part in line.split()]
    except Exception:  # noqa: BLE001  (decimal.InvalidOperation and friends)
        return None


def stdio_matches(prediction: str, expected: str) -> bool:
    """lcb_runner's grade_stdio comparison: stripped lines, equal as text or as decimals."""
    got = [line.strip() for line in prediction.strip().split("\n")]
    want = [line.strip() for line in expected.strip().split("\n")]
    if len(got) != len(want):
        return False
    for mine, theirs in zip(got, want):
        if mine == theirs:
            continue
        left, right = _decimals(mine), _decimals(theirs)
        if left is None or right is None or left != right:
            return False
    return True


def judge(problem: dict, run: RunResult, expected: str) -> tuple[bool, str | None, str | None]:
    """(passed, reason, detail) of one test case from its sandbox run."""
    if run.status != "ok":
        reason = run.status if run.status in REASONS else "sandbox_error"
        return False, reason, run.detail
    call = run.calls[0]
    if call.status == "exception":
        reason = {
            "_LcbNoEntry": "no_entry",
            "SyntaxError": "syntax",
            "IndentationError": "syntax",
            "TabError": "syntax",
        }.get(call.exc_type or "", "runtime_error")
        return False, reason, f"{call.exc_type}: {call.exc_message}"
    if call.status != "ok":
        return False, call.status if call.status in REASONS else "sandbox_error", None
    try:
        value = ast.literal_eval(call.repr or "")  # no repr (a forged result): no literal either
    except Exception:  # noqa: BLE001  (no literal repr: a custom object, inf, ...)
        return False, "wrong_answer", f"result has no literal repr: {truncated(call.repr)}"
    if problem["fn_name"]:
        try:
            passed = value == json.loads(expected)
        except ValueError:  # json.JSONDecodeError
            return False, "wrong_answer", f"the expected output is not JSON: {truncated(expected)!r}"
    else:
        passed = isinstance(value, str) and stdio_matches(value, expected)
    return (
        (True, None, None)
        if passed
        else (False, "wrong_answer", f"got {truncated(value)!r}, expected {truncated(expected)!r}")
    )


# -------------------------------------------------------------------------------------- grading


def grade_one(box, problem: dict, code: str, timeout_s: float, memory_mb: int) -> dict:
    """Run the tests in order until the first failure."""
    total = len(problem["tests"])
    verdict = {"passed": False, "reason": None, "detail": None, "tests_passed": 0, "tests_total": total}
    if not code.strip():
        return {**verdict, "reason": "no_code"}
    try:
        compile(code, "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as error:
        return {**verdict, "reason": "syntax", "detail": f"{type(error).__name__}: {error}"[:300]}
    source = solution_source(problem, code)
    for index, test in enumerate(problem["tests"]):
        passed, reason, detail = judge(problem, box.run(case_job(problem, source, test, timeout_s, memory_mb)), test[1])
        if not passed:
            return {
                **verdict,
                "reason": reason,
                "detail": f"test {index + 1} of {total}: {detail}"[:600],
                "tests_passed": index,
            }
    return {**verdict, "passed": True, "tests_passed": total}


def grade(pairs: list[tuple[dict, str]], verify_config, *, timeout_s: float, memory_mb: int, log=None) -> list[dict]:
    """One verdict per (problem, code) pair, in order; identical pairs run once. The sandbox is the
    verifier's (`verify` section: workers, isolation requirement)."""
    if 0 < sys.get_int_max_str_digits() < INT_DIGITS:  # expected outputs and results may hold huge integers
        sys.set_int_max_str_digits(INT_DIGITS)
    unique = list({(problem["task_id"], code): (problem, code) for problem, code in pairs}.values())
    with (
        sandbox_for(verify_config, log=log) as box,
        ThreadPoolExecutor(max(1, verify_config.workers)) as pool,
        Progress(
            len(unique), "livecodebench tests", unit="solutions", log=log or logging.getLogger(__name__)
        ) as progress,
    ):

        def one(pair):
            verdict = grade_one(box, *pair, timeout_s=timeout_s, memory_mb=memory_mb)
            progress.update()
            return verdict

        done = pool.map(one, unique)
        verdicts = {(problem["task_id"], code): verdict for (problem, code), verdict in zip(unique, done)}
    return [verdicts[(problem["task_id"], code)] for problem, code in pairs]
