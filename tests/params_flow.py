"""Which params keys a stage reads, followed through the code (AST), for tests/test_dvc_shape.py.

A stage reads `params.section[.key]` itself, and through every local function it hands `params` to
(`load_sampler(base, adapters, params)`, `members_of_arm(params, arm)`, ...), whatever that function names
its argument (`def settings_for(cfg, ...)`: `cfg.bench.limit`), transitively. No table of helper modules:
a new helper is followed as soon as a stage passes it `params`. Where `params` goes somewhere this cannot
follow (stored, returned, put in a container, handed to a method or to a function outside populora/ and
stages/), `ParamsFlowError` names the line, so a read cannot slip past unseen. Code that loads the params
itself is read through its `load_params(...).section[.key]` chains in every module the stage imports.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

from workflow.dag import REPO, code_deps, module_file

LOCAL = ("populora", "stages", "workflow")
# a method of a params section that reads other keys of it (BenchSection.limit_of: bench.limit and bench.limits)
SECTION_METHODS = {"bench.limit_of": {"bench.limit", "bench.limits"}}


class ParamsFlowError(AssertionError):
    """`params` reaches code this reader cannot follow."""


class _Source:
    def __init__(self, module: str, root: Path):
        path = module_file(module, root)
        if path is None:
            raise ParamsFlowError(f"no source for module {module} under {root}")
        self.module, self.root = module, root
        self.package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        self.tree = ast.parse(path.read_text(), str(path))
        self.parents = {child: node for node in ast.walk(self.tree) for child in ast.iter_child_nodes(node)}
        self.defs = {node.name: node for node in self.tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        self.imports: dict[str, tuple[str, str | None]] = {}  # local name -> (module, attribute or None)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.imports[alias.asname or alias.name.split(".")[0]] = (
                        alias.name if alias.asname else alias.name.split(".")[0],
                        None,
                    )
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    as_module = module_file(sub, root) is not None
                    self.imports[alias.asname or alias.name] = (sub, None) if as_module else (base, alias.name)


@cache
def _source(module: str, root: Path) -> _Source:
    return _Source(module, root)


def _where(src: _Source, node: ast.AST) -> str:
    return f"{src.module.replace('.', '/')}.py:{getattr(node, 'lineno', '?')}"


def _key(names: list[str]) -> str:
    if len(names) == 1 or names[1] in ("model_dump", "model_copy"):
        return names[0]
    key = f"{names[0]}.{names[1]}"
    return key


def _chain(src: _Source, node: ast.Attribute) -> set[str]:
    """`root.a.b...` from its first Attribute node: {"a.b"} (or {"a"} for a whole section)."""
    names = [node.attr]
    while isinstance(parent := src.parents.get(node), ast.Attribute) and parent.value is node:
        names.append(parent.attr)
        node = parent
    key = _key(names)
    return SECTION_METHODS.get(key, {key})


def _definition(src: _Source, name: str, seen=()) -> tuple[_Source, ast.AST] | None:
    """The local def (function or class) `name` means in `src`, through imports and re-exports."""
    if name in src.defs:
        return src, src.defs[name]
    target = src.imports.get(name)
    if target is None or target[1] is None or target[0].split(".")[0] not in LOCAL or (src.module, name) in seen:
        return None
    return _definition(_source(target[0], src.root), target[1], (*seen, (src.module, name)))


def _callee(src: _Source, func: ast.expr) -> tuple[_Source, ast.AST] | None:
    if isinstance(func, ast.Name):
        return _definition(src, func.id)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        target = src.imports.get(func.value.id)
        if target and target[1] is None and target[0].split(".")[0] in LOCAL:  # `module.function(...)`
            return _definition(_source(target[0], src.root), func.attr)
    return None


def _parameter(defn: ast.AST, call: ast.Call, arg: ast.expr) -> str | None:
    """The name under which `defn` receives `arg` of `call` (None: *args / **kwargs, not followable)."""
    method = isinstance(defn, ast.ClassDef)
    if method:
        init = next((n for n in defn.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            return None
        defn = init
    names = [a.arg for a in (*defn.args.posonlyargs, *defn.args.args)][1 if method else 0 :]
    if arg in call.args:
        index = call.args.index(arg)
        return names[index] if index < len(names) else None
    keyword = next(k.arg for k in call.keywords if k.value is arg)
    return keyword if keyword in names or keyword in [a.arg for a in defn.args.kwonlyargs] else None


def _body(defn: ast.AST) -> ast.AST:
    if isinstance(defn, ast.ClassDef):
        return next(n for n in defn.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    return defn


def flow(src: _Source, scope: ast.AST, var: str, seen: set) -> set[str]:
    """Keys read from `var` inside `scope` of `src`, following every call that receives `var`."""
    if (src.module, id(scope), var) in seen:
        return set()
    seen.add((src.module, id(scope), var))
    reads: set[str] = set()
    for node in ast.walk(scope):
        if not (isinstance(node, ast.Name) and node.id == var and isinstance(node.ctx, ast.Load)):
            continue
        parent = src.parents[node]
        if isinstance(parent, ast.Attribute):
            reads |= _chain(src, parent)
            continue
        call = src.parents[parent] if isinstance(parent, ast.keyword) else parent
        if not (isinstance(call, ast.Call) and node is not call.func):
            raise ParamsFlowError(
                f"{_where(src, node)}: `{var}` goes where the params reader cannot follow it "
                f"({ast.unparse(parent)[:80]}); read its keys there, or teach tests/params_flow.py"
            )
        found = _callee(src, call.func)
        name = found and _parameter(found[1], call, node)
        if not name:
            raise ParamsFlowError(
                f"{_where(src, node)}: `{var}` is handed to {ast.unparse(call.func)}, which the "
                f"params reader cannot follow (not a local function with a named parameter)"
            )
        reads |= flow(found[0], _body(found[1]), name, seen)
    return reads


def load_params_reads(module: str, root: Path) -> set[str]:
    """`load_params(...).section[.key]` chains in a module, `declared(load_params(...), stage)...` too (the
    stage's view, stages._common.declared): code that loads the params itself."""
    src = _source(module, root)
    reads = set()
    for node in ast.walk(src.tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "load_params":
            parent = src.parents.get(node)
            if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Name) and parent.func.id == "declared":
                parent = src.parents.get(parent)
            if isinstance(parent, ast.Attribute):
                reads |= _chain(src, parent)
    return reads


def params_read(module: str, root: Path = REPO) -> set[str]:
    """Every params key the stage `module` reads: from its `params`, through the functions it hands `params`
    to, and from `load_params(...)` chains anywhere in the local modules it imports."""
    reads = flow(_source(module, root), _source(module, root).tree, "params", set())
    for path in code_deps(module, root):
        name = path.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        if name.split(".")[0] in ("populora", "stages"):
            reads |= load_params_reads(name, root)
    return reads
