"""Static rules of the verifier: what a proposal, an input or an answer may contain, decided on the AST
before anything runs (and the value-expression rules for answers and outputs).

Forbidden builtins: open, input, eval, exec, compile, breakpoint, globals, exit, quit, help,
__import__ and __builtins__ (unless the program binds the name itself, e.g. a parameter named
`input`); forbidden attributes are the introspection routes out (__subclasses__, __globals__,
f_back, ...). These are validity rules only; containment is the sandbox's job and does not rely
on them (tests/hostile_cases.py runs escapes that pass them).
"""

from __future__ import annotations

import ast

from populora.core.sections import TASK_TYPES
from populora.tasks.parsing import MAX_PROGRAM_CHARS  # one cap for the parser and the verifier
from populora.tasks.program_metrics import bound_names
from populora.tasks.tasks import CODE_F_INPUTS, input_count

MAX_INPUT_CHARS = 5_000

FORBIDDEN_MODULES = frozenset(
    {
        # AZR's list (the dotted entries it could never match are covered by their first component)
        "logging",
        "random",
        "multiprocessing",
        "pebble",
        "subprocess",
        "threading",
        "datetime",
        "time",
        "hashlib",
        "hmac",
        "bcrypt",
        "calendar",
        "os",
        "sys",
        # processes, files, network, interpreter internals, nondeterminism
        "_thread",
        "asyncio",
        "atexit",
        "builtins",
        "code",
        "codecs",
        "concurrent",
        "ctypes",
        "faulthandler",
        "fcntl",
        "ftplib",
        "gc",
        "getpass",
        "glob",
        "grp",
        "http",
        "imp",
        "importlib",
        "inspect",
        "io",
        "marshal",
        "mmap",
        "nt",
        "pathlib",
        "pickle",
        "pkgutil",
        "platform",
        "posix",
        "pty",
        "pwd",
        "resource",
        "runpy",
        "secrets",
        "select",
        "selectors",
        "shelve",
        "shutil",
        "signal",
        "site",
        "smtplib",
        "socket",
        "socketserver",
        "ssl",
        "sysconfig",
        "tempfile",
        "tracemalloc",
        "urllib",
        "uuid",
        "weakref",
        "webbrowser",
        "zipimport",
        "zoneinfo",
    }
)
FORBIDDEN_NAMES = frozenset(
    {  # builtins, rejected unless the program binds the name itself
        "__import__",
        "__builtins__",
        "__loader__",
        "__spec__",
        "open",
        "input",
        "breakpoint",
        "exec",
        "eval",
        "compile",
        "globals",
        "exit",
        "quit",
        "help",
    }
)
FORBIDDEN_ATTRIBUTES = frozenset(
    {
        "__subclasses__",
        "__globals__",
        "__builtins__",
        "__code__",
        "__closure__",
        "__import__",
        "__loader__",
        "__spec__",
        "__self__",
        "__reduce__",
        "__reduce_ex__",
        "import_module",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "gi_frame",
        "gi_code",
        "cr_frame",
        "ag_frame",
        "tb_frame",
    }
)
SAFE_CALLABLES = frozenset(
    {
        "set",
        "frozenset",
        "tuple",
        "list",
        "dict",
        "int",
        "float",
        "complex",
        "str",
        "bytes",
        "bytearray",
        "bool",
        "range",
        "slice",
    }
)


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
        if (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and (node.value in FORBIDDEN_ATTRIBUTES or node.value in ("__import__", "__builtins__"))
        ):
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
    if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "f":
        return call
    return None


def values_only(call: ast.Call, names: frozenset[str]) -> bool:
    """Every argument of `call` (positional and keyword) a value expression (`is_value_expression`)."""
    return all(is_value_expression(arg, names) for arg in call.args) and all(
        kw.arg and is_value_expression(kw.value, names) for kw in call.keywords
    )


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


_VALUE_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Tuple,
    ast.List,
    ast.Set,
    ast.Dict,
    ast.UnaryOp,
    ast.BinOp,
    ast.Name,
    ast.Call,
    ast.keyword,
    ast.Load,
    ast.UAdd,
    ast.USub,
    ast.Add,
    ast.Sub,
    ast.Mult,
)


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


def static_check(row: dict, code_f_inputs: int = CODE_F_INPUTS) -> tuple[str | None, str | None, ast.Module | None]:
    """(reason, detail, None) when the proposal row is invalid before running it, else (None, None, AST).
    A code_f row must carry `code_f_inputs` inputs (`populora.tasks.tasks.input_count`)."""
    if not (
        isinstance(row.get("task_id"), str)
        and row.get("type") in TASK_TYPES
        and isinstance(row.get("program"), str)
        and isinstance(row.get("inputs"), list)
        and all(isinstance(i, str) for i in row["inputs"])
        and isinstance(row.get("message"), (str, type(None)))
    ):
        return "malformed_row", None, None
    if len(row["inputs"]) != input_count(row["type"], code_f_inputs):
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
