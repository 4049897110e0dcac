"""Complexity and problem-space coverage of proposed programs (training-dynamics metrics).

    program_metrics("def f(a):\n    return a")
    # {'ast_depth': 3, 'cyclomatic_complexity': 1, 'loc': 2, 'distinct_variables': 1}
    seen, n_new = coverage(seen, [normalized_ast_hash(p) for p in valid_programs])

* ast_depth: longest root-to-leaf path of the AST (Module = 0; context/operator nodes not counted).
* cyclomatic_complexity: radon's cyclomatic complexity summed over every function, method and
  nested function (radon's own `total_complexity` skips nested functions).
* loc: non-blank lines.
* distinct_variables: distinct names assigned anywhere (ast.Name in Store context) plus
  function/lambda parameter names.
* normalized_ast_hash: hash of the AST with bound identifiers renamed in order of appearance
  (v0, v1, ...), constants replaced by their type and bare constant statements (docstrings)
  dropped; builtins, imported modules, attributes and keyword names are kept, since they carry
  the program's meaning. Two programs that differ only in names and literals share a hash, so
  the number of distinct hashes measures how much of the program space proposals cover.

Every function raises SyntaxError for source that does not parse (only valid programs are measured).
A valid program may be nested deeper than Python's recursion limit allows radon's visitor (a sum of
500 terms is); `cyclomatic_complexity` then reruns radon on a thread with a deep stack of its own.
"""

from __future__ import annotations

import ast
import hashlib
import sys
import threading
from collections.abc import Iterable

from radon.complexity import cc_visit
from radon.visitors import Class

_LEAF_KINDS = (ast.expr_context, ast.operator, ast.boolop, ast.unaryop, ast.cmpop)


def ast_depth(tree: ast.AST) -> int:
    deepest, stack = 0, [(tree, 0)]
    while stack:  # iterative: deeply nested programs must not hit the recursion limit
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node) if not isinstance(child, _LEAF_KINDS))
    return deepest


_DEEP_STACK_BYTES = 256 << 20  # reserved address space, touched only as deep as the program goes
_DEEP_RECURSION = 200_000  # far past any AST that ast.parse builds (its own limit is a few thousand levels)


def _on_deep_stack(fn, *args):
    """fn(*args) on a thread with a large stack and recursion limit (radon's visitor recurses per AST
    level); the process-wide limit is restored after, and the stage is single-threaded meanwhile."""
    result, previous_size, previous_limit = {}, threading.stack_size(), sys.getrecursionlimit()

    def run():
        try:
            result["value"] = fn(*args)
        except BaseException as error:  # noqa: BLE001  (re-raised in the caller's thread)
            result["error"] = error

    threading.stack_size(_DEEP_STACK_BYTES)
    sys.setrecursionlimit(_DEEP_RECURSION)
    try:
        thread = threading.Thread(target=run)
        thread.start()
        thread.join()
    finally:
        threading.stack_size(previous_size)
        sys.setrecursionlimit(previous_limit)
    if "error" in result:
        raise result["error"]
    return result["value"]


def cyclomatic_complexity(src: str) -> int:
    try:
        visited = cc_visit(src)
    except RecursionError:
        visited = _on_deep_stack(cc_visit, src)
    total, blocks = 0, [b for b in visited if not isinstance(b, Class)]  # cc_visit lists methods itself
    while blocks:
        block = blocks.pop()
        total += block.complexity
        blocks.extend(block.closures)
    return total


def distinct_variables(tree: ast.AST) -> int:
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    names |= {n.arg for n in ast.walk(tree) if isinstance(n, ast.arg)}
    return len(names)


def lines_of_code(src: str) -> int:
    return sum(1 for line in src.splitlines() if line.strip())


def program_metrics(src: str) -> dict[str, int]:
    tree = ast.parse(src)
    return {
        "ast_depth": ast_depth(tree),
        "cyclomatic_complexity": cyclomatic_complexity(src),
        "loc": lines_of_code(src),
        "distinct_variables": distinct_variables(tree),
    }


def bound_names(tree: ast.AST, *, imports: bool = True) -> set[str]:
    """Every name the code binds anywhere (assignments, parameters, defs, handlers, match
    captures, and with `imports` the names imports bind)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Load):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif imports and isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    return names


class _Normalizer(ast.NodeTransformer):
    def __init__(self, bound: set[str]):
        self.bound = bound
        self.names: dict[str, str] = {}

    def canon(self, name: str) -> str:
        return self.names.setdefault(name, f"v{len(self.names)}") if name in self.bound else name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.canon(node.id)
        return node

    def visit_arg(self, node: ast.arg) -> ast.AST:
        node.arg = self.canon(node.arg)
        return self.generic_visit(node)

    def _visit_def(self, node):
        node.name = self.canon(node.name)
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _visit_def

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        node.name = self.canon(node.name) if node.name else None
        return self.generic_visit(node)

    def visit_Global(self, node):
        node.names = [self.canon(n) for n in node.names]
        return node

    visit_Nonlocal = visit_Global

    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Constant):  # docstrings: dropped (the tree is only dumped, never compiled)
            return None
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        return ast.Constant(value=f"<{type(node.value).__name__}>")


def normalized_ast_hash(src: str) -> str:
    tree = ast.parse(src)
    tree = _Normalizer(bound_names(tree, imports=False)).visit(tree)  # own names are free to rename
    return hashlib.sha256(ast.dump(tree, include_attributes=False).encode()).hexdigest()[:16]


def coverage(seen: Iterable[str], new_hashes: Iterable[str]) -> tuple[frozenset[str], int]:
    """(all hashes so far, how many of `new_hashes` were not seen before); inputs are not modified."""
    before = frozenset(seen)
    after = before | frozenset(new_hashes)
    return after, len(after) - len(before)
