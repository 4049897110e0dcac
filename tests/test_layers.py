"""The library's layers (docs/layout.md, CONTRIBUTING.md): what each folder of populora/ may import, and that no
stage builds a model name or imports another stage."""

from __future__ import annotations

import ast
import re

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "populora"
# folder -> the populora folders it must not import
# analysis/ (the study analysis) is the top floor: no other folder imports it; the statistics every floor shares
# live in core/stats.py. tasks/ (the task world: task rows, parsing, prompts, roles, program metrics, the families)
# is the ground floor beside core/: torch-free, it imports nothing above core. verifier/ sits on it; rl/ (the training
# step) beside verifier/, neither importing the other. The held-out pool (heldout/) sits above rl and verifier (it
# proposes, verifies, grades): neither imports it back.
ABOVE_TASKS = (
    "lm",
    "rl",
    "population",
    "bench",
    "report",
    "verifier",
    "sandbox",
    "control",
    "analysis",
    "heldout",
    "warmstart",
)
FORBIDDEN = {
    "core": ("tasks", *ABOVE_TASKS),
    "tasks": ABOVE_TASKS,
    "lm": ("rl", "population", "bench", "report", "verifier", "sandbox", "control", "analysis", "heldout", "warmstart"),
    "population": ("rl", "bench", "report", "control", "analysis", "heldout", "warmstart"),
    "bench": ("report", "control", "analysis", "warmstart"),
    "report": ("control", "analysis"),
    "control": ("report", "analysis"),
    "rl": ("verifier", "heldout", "bench", "report", "control", "analysis", "warmstart"),
    "verifier": ("rl", "heldout", "bench", "report", "population", "control", "analysis", "warmstart"),
    "heldout": ("bench", "report", "population", "control", "analysis", "warmstart"),
    "sandbox": ("lm", "rl", "population", "bench", "report", "verifier", "control", "analysis", "heldout", "warmstart"),
    # the warm start sits beside the held-out pool (it verifies, prompts, trains; its study scores CRUXEval
    # through bench/); only stages and the controls above it use it
    "warmstart": ("report", "population", "control", "analysis"),
}


def test_the_task_floor_never_imports_torch():
    for path in sorted((PACKAGE / "tasks").glob("*.py")):
        assert not {name for name in _imports(path) if name.split(".")[0] in ("torch", "transformers", "peft")}, path


def _imports(path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_layer_imports_only_below_it(layer):
    offending = [
        f"{path.relative_to(REPO)} imports {name}"
        for path in sorted((PACKAGE / layer).glob("*.py"))
        for name in sorted(_imports(path))
        if any(name == f"populora.{other}" or name.startswith(f"populora.{other}.") for other in FORBIDDEN[layer])
    ]
    assert not offending


def folder_graph() -> dict[str, set[str]]:
    """populora folder -> the populora folders its modules import (lazy imports inside functions included)."""
    graph: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.glob("*/*.py")):
        folder = path.parent.name
        for name in _imports(path):
            parts = name.split(".")
            if parts[0] == "populora" and len(parts) > 1 and (PACKAGE / parts[1]).is_dir() and parts[1] != folder:
                graph.setdefault(folder, set()).add(parts[1])
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every folder that can reach itself, with one path back (depth-first)."""
    found = []
    for start in sorted(graph):
        stack = [(start, [start])]
        seen = set()
        while stack:
            node, path = stack.pop()
            for nxt in sorted(graph.get(node, ())):
                if nxt == start:
                    found.append(path + [start])
                    stack.clear()
                    break
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, path + [nxt]))
    return found


def test_no_import_loop_between_folders():
    assert not cycles(folder_graph())
    assert cycles({"a": {"b"}, "b": {"a"}}) == [["a", "b", "a"], ["b", "a", "b"]]  # the check can fail


def test_no_stage_imports_the_study_analysis():
    """The pipeline never needs the study (it reads finished runs): stages import neither it nor its CLI."""
    offending = [
        f"{path.name} imports {name}"
        for path in sorted((REPO / "stages").glob("*.py"))
        for name in sorted(_imports(path))
        if name == "populora.analysis" or name.startswith("populora.analysis.")
    ]
    assert not offending


def test_no_flat_modules_besides_config():
    # __main__.py: the one door to the tools outside the DAG (python -m populora <command>)
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "__main__.py", "config.py"]


def test_stages_neither_build_model_names_nor_import_each_other():
    for path in sorted((REPO / "stages").glob("*.py")):
        text = path.read_text()
        assert not re.search(r'f"\{[^}]*arm[^}]*\}-\{[^}]*slot', text), (
            f"{path.name} builds a model name (use ModelRef)"
        )
        assert not re.search(r'\.split\("-"', text), f"{path.name} parses a name string"
        stages = {name for name in _imports(path) if name.startswith("stages.") and not name.startswith("stages._")}
        assert not stages, f"{path.name} imports {stages}"
