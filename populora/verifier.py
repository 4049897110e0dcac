"""Task logic on top of the sandbox: validity of proposals and grading of answers (AZR code_o/i/f).

    rows = verify_rows([{"task_id": "t1", "type": "code_o", "program": "def f(a):\n    return a",
                         "inputs": ["'Hello world'"], "message": None}])
    rows[0]["valid"], rows[0]["outputs"]            # True, ["'Hello world'"]
    graded = grade_rows(rows, [{"task_id": "t1", "answer": "'Hello world'"}])   # correct: True

    with Sandbox(workers=2) as box:                 # reuse one worker pool across calls
        verify_rows(rows, sandbox=box); grade_rows(tasks, answers, sandbox=box)

Validity (AZR's rules with its bugs fixed; decided from structured results, never by searching
for the word "error"). A proposal is valid when, in order:
  * the row is well formed and has 1 input (code_o, code_i) or 10 inputs (code_f: 5 shown,
    5 hidden); the program parses, defines a top-level `def f`, uses no forbidden module (every
    import form; `__import__`, `importlib`) and no forbidden builtin or introspection attribute
    (FORBIDDEN_NAMES, FORBIDDEN_ATTRIBUTES); each input is a Python argument list;
  * f(input) returns for every input, within the limits, in two separate processes with
    different hash seeds and reversed input order, with equal values (else `nondeterministic`);
  * every result's repr evaluates back to an equal value and is an expression a solver could
    write (literals, containers, calls of the program's classes/imports; else `unrepresentable`:
    `nan`, objects compared by identity, `<object at 0x...>` reprs, which AZR accepted silently).
Forbidden builtins: open, input, eval, exec, compile, breakpoint, globals, exit, quit, help,
__import__ and __builtins__ (unless the program binds the name itself, e.g. a parameter named
`input`); forbidden attributes are the introspection routes out (__subclasses__, __globals__,
f_back, ...). These static rules are validity rules only; containment is the sandbox's job and
does not rely on them (tests/hostile_cases.py runs escapes that pass them).

Grading. code_o: value equality of the answer and the gold repr (1 == 1.0, dict/set order
free), by `ast.literal_eval` in this process when both are literals, else in the sandbox.
code_i: f(answer) == gold, in the sandbox. code_f: the answer program (the reference program's
imports prepended) must reproduce every hidden pair; it runs in a sandbox process that never
sees the gold outputs, and its reprs are compared here. Answers to code_o/code_i must be value
expressions (no attribute access, no calls of `f` or other functions: `f('x')` is not a
prediction) -> else `unsafe_answer`.

Verify reasons: VERIFY_REASONS; grade reasons: GRADE_REASONS (null when correct). Output rows
also carry "reason_detail" (human-readable: exception type and message, which input, ...).
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable

from populora.program_metrics import bound_names
from populora.sandbox import Call, Job, Limits, RunResult, Sandbox

TASK_TYPES = ("code_o", "code_i", "code_f")
N_INPUTS = {"code_o": 1, "code_i": 1, "code_f": 10}
N_GIVEN = 5  # code_f: inputs[:5] are shown to the solver, inputs[5:] are hidden
MAX_PROGRAM_CHARS = 20_000
MAX_INPUT_CHARS = 5_000

VERIFY_REASONS = {
    "malformed_row": "not an object, or task_id/type/program/inputs/message missing or mistyped",
    "wrong_input_count": "code_o/code_i need 1 input, code_f 10",
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
}
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

FORBIDDEN_MODULES = frozenset({
    # AZR's list (the dotted entries it could never match are covered by their first component)
    "logging", "random", "multiprocessing", "pebble", "subprocess", "threading", "datetime", "time", "hashlib",
    "hmac", "bcrypt", "calendar", "os", "sys",
    # processes, files, network, interpreter internals, nondeterminism
    "_thread", "asyncio", "atexit", "builtins", "code", "codecs", "concurrent", "ctypes", "faulthandler", "fcntl",
    "ftplib", "gc", "getpass", "glob", "grp", "http", "imp", "importlib", "inspect", "io", "marshal", "mmap",
    "nt", "pathlib", "pickle", "pkgutil", "platform", "posix", "pty", "pwd", "resource", "runpy", "secrets",
    "select", "selectors", "shelve", "shutil", "signal", "site", "smtplib", "socket", "socketserver", "ssl",
    "sysconfig", "tempfile", "tracemalloc", "urllib", "uuid", "weakref", "webbrowser", "zipimport", "zoneinfo",
})
FORBIDDEN_NAMES = frozenset({  # builtins, rejected unless the program binds the name itself
    "__import__", "__builtins__", "__loader__", "__spec__", "open", "input", "breakpoint", "exec", "eval",
    "compile", "globals", "exit", "quit", "help",
})
FORBIDDEN_ATTRIBUTES = frozenset({
    "__subclasses__", "__globals__", "__builtins__", "__code__", "__closure__", "__import__", "__loader__",
    "__spec__", "__self__", "__reduce__", "__reduce_ex__", "import_module", "f_globals", "f_locals",
    "f_builtins", "f_back", "f_code", "gi_frame", "gi_code", "cr_frame", "ag_frame", "tb_frame",
})
SAFE_CALLABLES = frozenset({"set", "frozenset", "tuple", "list", "dict", "int", "float", "complex", "str", "bytes",
                            "bytearray", "bool", "range", "slice"})

IDENTITY_PROGRAM = "def f(a):\n    return a"
IDENTITY_SEED = {"program": IDENTITY_PROGRAM, "inputs": ["'Hello world'"], "message": None}
IDENTITY_CODE_F_SEED = {  # AZR's six inputs, plus four to reach 10 (5 shown, 5 hidden)
    "program": IDENTITY_PROGRAM,
    "inputs": ["'Hello world'", "1", "dict(a=1, b=2)", "(1.1, 1.2, 1.3)", "'[[1, 0, 0], [0, 0, 0], [0, 0, 0]]'",
               "1001101100010001", "[3, 1, 2]", "'abc'", "True", "None"],
    "message": "Write a function that returns whatever you input",
}


def seed_rows() -> list[dict]:
    """The identity seeds as verifier input rows (code_o, code_i, code_f)."""
    return [{"task_id": f"seed-identity-{t}", "type": t, **(IDENTITY_CODE_F_SEED if t == "code_f" else IDENTITY_SEED)}
            for t in TASK_TYPES]


# ----------------------------------------------------------------------------- static analysis

def forbidden_use(tree: ast.AST, bound: set[str]) -> tuple[str, str] | None:
    """(reason, detail) for the first forbidden import, builtin or attribute in `tree`."""
    for node in ast.walk(tree):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                return "forbidden_module", "relative import"
            modules = [node.module or ""]
        for module in modules:
            hit = set(module.split(".")) & FORBIDDEN_MODULES
            if hit:
                return "forbidden_module", f"import of {module}"
        if isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES and node.id not in bound:
            return "forbidden_name", node.id
        if isinstance(node, ast.Attribute) and node.attr in FORBIDDEN_ATTRIBUTES:
            return "forbidden_name", f".{node.attr}"
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                node.value in FORBIDDEN_ATTRIBUTES or node.value in ("__import__", "__builtins__")):
            return "forbidden_name", f"string {node.value!r}"
    return None


def call_source(arguments: str) -> str:
    """The call expression for an argument list; newlines keep comments and brackets apart."""
    return f"f(\n{arguments}\n)"


def parse_arguments(arguments: str) -> ast.Call | None:
    """The parsed `f(<arguments>)` call, or None when `arguments` is not exactly an argument list."""
    try:
        call = ast.parse(call_source(arguments), mode="eval").body
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return None
    ok = isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f"
    return call if ok else None


def answer_names(program_tree: ast.Module) -> frozenset[str]:
    """Names a value expression may use: safe constructors plus the program's top-level classes
    and imported names (e.g. Counter). Never functions: `f(...)` would be no prediction at all."""
    names = set(SAFE_CALLABLES)
    for node in program_tree.body:
        if isinstance(node, ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return frozenset(n for n in names if not n.startswith("__"))


_VALUE_NODES = (ast.Expression, ast.Constant, ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp,
                ast.Name, ast.Call, ast.keyword, ast.Load, ast.UAdd, ast.USub, ast.Add, ast.Sub, ast.Mult)


def is_value_expression(node: ast.AST, names: frozenset[str]) -> bool:
    """Literals, containers, +/-/* and calls of `names` only: no attributes, subscripts, lambdas."""
    for sub in ast.walk(node):
        if not isinstance(sub, _VALUE_NODES):
            return False
        if isinstance(sub, ast.Name) and sub.id not in names:
            return False
        if isinstance(sub, ast.Call) and not isinstance(sub.func, ast.Name):
            return False
        if isinstance(sub, ast.keyword) and sub.arg is None:
            return False
        if isinstance(sub, ast.Dict) and None in sub.keys:
            return False
    return True


def literal_equal(a: str, b: str) -> bool | None:
    """Value equality of two literal reprs in this process; None when either is not a literal."""
    try:
        return bool(ast.literal_eval(a.strip()) == ast.literal_eval(b.strip()))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def static_check(row: dict) -> tuple[str | None, str | None, ast.Module | None]:
    """(reason, detail, None) when the proposal row is invalid before running it, else (None, None, AST)."""
    if not (isinstance(row.get("task_id"), str) and row.get("type") in TASK_TYPES
            and isinstance(row.get("program"), str) and isinstance(row.get("inputs"), list)
            and all(isinstance(i, str) for i in row["inputs"])
            and isinstance(row.get("message"), (str, type(None)))):
        return "malformed_row", None, None
    if len(row["inputs"]) != N_INPUTS[row["type"]]:
        return "wrong_input_count", f"{len(row['inputs'])} inputs", None
    if len(row["program"]) > MAX_PROGRAM_CHARS or any(len(i) > MAX_INPUT_CHARS for i in row["inputs"]):
        return "too_long", None, None
    try:
        tree = ast.parse(row["program"])
    except (SyntaxError, ValueError, MemoryError, RecursionError) as error:
        return "syntax", str(error)[:200], None
    bound = bound_names(tree)
    problem = forbidden_use(tree, bound)
    if problem:
        return (*problem, None)
    if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
        return "no_entry_function", None, None
    for index, arguments in enumerate(row["inputs"]):
        call = parse_arguments(arguments)
        if call is None:
            return "bad_input", f"input {index}", None
        problem = forbidden_use(call, bound | bound_names(call))
        if problem:
            return (*problem, None)
    return None, None, tree


# ----------------------------------------------------------------------------- verification

Outcome = tuple[str | None, str | None, list[str]]  # (reason, detail, outputs)


def judge_runs(run_a: RunResult, run_b_reversed: RunResult, names: frozenset[str]) -> Outcome:
    """(reason, detail, outputs) from two executions; run B evaluated the inputs in reverse order."""
    for run in (run_a, run_b_reversed):
        if run.status != "ok":
            return run.status, run.detail, []
    outputs = []
    for index, (a, b) in enumerate(zip(run_a.calls, reversed(run_b_reversed.calls))):
        for call in (a, b):
            if call.status == "no_entry":
                return "no_entry_function", "f is not callable", []
            if call.status == "exception":
                return "exception", f"input {index}: {call.exc_type}: {call.exc_message}", []
            if call.status == "output_too_large":
                return "output_too_large", f"input {index}", []
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


def _start_verification(row, box: Sandbox, limits: Limits) -> Callable[[], Outcome]:
    """Static checks now, and both executions submitted now; the thunk waits for the outcome."""
    if not isinstance(row, dict):
        return lambda: ("malformed_row", "not a JSON object", [])
    reason, detail, tree = static_check(row)
    if reason:
        return lambda: (reason, detail, [])
    calls = tuple(Call(call_source(a)) for a in row["inputs"])
    # two separate processes with different hash seeds; the second evaluates the inputs in reverse
    run_a = box.submit(Job(row["program"], calls, roundtrip=True, limits=limits), group=0)
    run_b = box.submit(Job(row["program"], calls[::-1], roundtrip=True, limits=limits), group=1)
    names = answer_names(tree)
    return lambda: judge_runs(run_a.result(), run_b.result(), names)


def _guarded(step: Callable, failure: Callable[[str], tuple]):
    """A verifier bug on some odd row becomes that row's `sandbox_error`, never a crashed stage."""
    try:
        return step()
    except Exception as error:  # noqa: BLE001
        return failure(f"verifier error: {error!r}"[:300])


def _verify_failure(detail: str) -> Callable[[], Outcome]:
    return lambda: ("sandbox_error", detail, [])


def verify_rows(rows: Iterable, *, timeout_s: float = 5.0, memory_mb: int = 512, max_output_chars: int = 10_000,
                workers: int = 2, sandbox: Sandbox | None = None,
                progress: Callable[[int], None] | None = None) -> list[dict]:
    """One output row per input row, in order: the row plus valid, reason, outputs, reason_detail."""
    rows = list(rows)
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=max_output_chars)
    box = sandbox or Sandbox(workers=workers, limits=limits)
    try:
        thunks = [_guarded(lambda row=row: _start_verification(row, box, limits), _verify_failure) for row in rows]
        out = []
        for row, thunk in zip(rows, thunks):
            reason, detail, outputs = _guarded(thunk, lambda d: _verify_failure(d)())
            base = dict(row) if isinstance(row, dict) else {"row": row}
            out.append({**base, "valid": reason is None, "reason": reason, "outputs": outputs,
                        "reason_detail": detail})
            if progress:
                progress(1)
        return out
    finally:
        if sandbox is None:
            box.close()


# ----------------------------------------------------------------------------- grading

Verdict = tuple[bool, str | None, str | None]  # (correct, reason, detail)


def _done(correct: bool, reason: str | None = None, detail: str | None = None) -> Callable[[], Verdict]:
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


def _task_index(tasks: Iterable) -> dict[str, tuple[dict, ast.Module]]:
    """Valid, well-formed task rows by task_id (first one wins); invalid rows are ignored."""
    index: dict[str, tuple[dict, ast.Module]] = {}
    for task in tasks:
        if not (isinstance(task, dict) and task.get("valid") is True and task.get("type") in TASK_TYPES
                and isinstance(task.get("task_id"), str) and isinstance(task.get("program"), str)
                and isinstance(task.get("outputs"), list) and isinstance(task.get("inputs"), list)
                and len(task["outputs"]) == len(task["inputs"]) == N_INPUTS[task["type"]]):
            continue
        try:
            index.setdefault(task["task_id"], (task, ast.parse(task["program"])))
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            continue
    return index


class _Grader:
    def __init__(self, box: Sandbox, limits: Limits):
        self.box, self.limits = box, limits

    def start(self, task: dict, tree: ast.Module, answer: str) -> Callable[[], Verdict]:
        """Submit the sandbox work for one answer now; the returned thunk waits for the verdict."""
        if len(answer) > MAX_PROGRAM_CHARS + 2 * self.limits.max_output_chars:
            return _done(False, "too_long")
        return getattr(self, task["type"])(task, tree, answer)

    def equal_in_sandbox(self, task: dict, tree: ast.Module, gold: str, candidate: str):
        """Future of eval(gold) == eval(candidate) in the reference program's namespace, or None
        when the candidate is not a value expression."""
        try:
            node = ast.parse(candidate.strip(), mode="eval")
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None
        if not is_value_expression(node, answer_names(tree)):
            return None
        job = Job(task["program"], (Call(candidate.strip(), expect=gold),), limits=self.limits)
        return self.box.submit(job)

    def code_o(self, task: dict, tree: ast.Module, answer: str) -> Callable[[], Verdict]:
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
        future = self.equal_in_sandbox(task, tree, gold, answer)
        return lambda: _call_verdict(future.result())

    def code_i(self, task: dict, tree: ast.Module, answer: str) -> Callable[[], Verdict]:
        call = parse_arguments(answer)
        if call is None:
            return _done(False, "syntax")
        names = answer_names(tree)
        if not all(is_value_expression(arg, names) for arg in call.args) or not all(
                kw.arg and is_value_expression(kw.value, names) for kw in call.keywords):
            return _done(False, "unsafe_answer")
        job = Job(task["program"], (Call(call_source(answer), expect=task["outputs"][0]),), limits=self.limits)
        future = self.box.submit(job)
        return lambda: _call_verdict(future.result())

    def code_f(self, task: dict, tree: ast.Module, answer: str) -> Callable[[], Verdict]:
        try:
            ast.parse(answer)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return _done(False, "syntax")
        imports = [ast.get_source_segment(task["program"], n) for n in tree.body
                   if isinstance(n, (ast.Import, ast.ImportFrom))]
        program = "\n".join([*imports, answer])
        hidden_inputs, gold = task["inputs"][N_GIVEN:], task["outputs"][N_GIVEN:]
        # the gold outputs never enter the process that runs the solver's program
        future = self.box.submit(Job(program, tuple(Call(call_source(i)) for i in hidden_inputs), limits=self.limits))
        return lambda: self._hidden_pairs_verdict(task, tree, future.result(), gold)

    def _hidden_pairs_verdict(self, task: dict, tree: ast.Module, run: RunResult, gold: list[str]) -> Verdict:
        if run.status != "ok":
            return False, run.status, run.detail
        for index, (call, expected) in enumerate(zip(run.calls, gold)):
            if call.status == "no_entry":
                return False, "no_entry_function", None
            if call.status == "exception":
                return False, "exception", f"hidden pair {index}: {call.exc_type}: {call.exc_message}"
            if call.status != "ok":
                return False, call.status, f"hidden pair {index}"
            same = True if call.repr == expected else literal_equal(expected, call.repr)
            if same is None:
                future = self.equal_in_sandbox(task, tree, expected, call.repr)
                same = future is not None and _call_verdict(future.result())[0]
            if not same:
                return False, "wrong", f"hidden pair {index}"
        return True, None, None


def grade_rows(tasks: Iterable, answers: Iterable, *, timeout_s: float = 5.0, memory_mb: int = 512,
               max_output_chars: int = 10_000, workers: int = 2, sandbox: Sandbox | None = None,
               progress: Callable[[int], None] | None = None) -> list[dict]:
    """One output row per answer row, in order: the row plus correct, reason, reason_detail.
    Identical (task_id, answer) pairs are executed once."""
    index = _task_index(tasks)
    answers = list(answers)
    limits = Limits(timeout_s=timeout_s, memory_mb=memory_mb, max_output_chars=max_output_chars)
    box = sandbox or Sandbox(workers=workers, limits=limits)
    try:
        grader, thunks, plan = _Grader(box, limits), {}, []
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
                    thunks[key] = _guarded(lambda: grader.start(*index[row["task_id"]], row["answer"]),
                                           lambda d: _done(False, "sandbox_error", d))
                plan.append(thunks[key])
        verdicts: dict[int, Verdict] = {}
        out = []
        for row, thunk in zip(answers, plan):
            if id(thunk) not in verdicts:
                verdicts[id(thunk)] = _guarded(thunk, lambda d: (False, "sandbox_error", d))
            verdict = verdicts[id(thunk)]
            base = dict(row) if isinstance(row, dict) else {"row": row}
            out.append({**base, "correct": verdict[0], "reason": verdict[1], "reason_detail": verdict[2]})
            if progress:
                progress(1)
        return out
    finally:
        if sandbox is None:
            box.close()
