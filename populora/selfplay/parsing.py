"""Parse teacher and student completions into task fields and answers (AZR rules, bugs fixed).

Completions are the assistant text *including* any scaffold prefills, so both generation modes
parse with the same code. Fixes over AZR: the program block must be tagged ```python (an
```input block that comes first is never taken as code); programs may hold classes and helper
functions (AZR's one-`def` regex rejected them); trailing top-level junk is cleaned off the way
AZR's seeding does (keep `f` and what it uses). Every failure returns a reason, never raises.
"""

from __future__ import annotations

import ast
import re

_THINK_ANSWER = re.compile(r"(?s)^\s*<think>.*?</think>\s*<answer>.*?</answer>")


def fenced_blocks(text: str, lang: str) -> list[str]:
    """Contents of every ```lang block, in order (an unclosed final block counts too).

    >>> fenced_blocks("```input\\n1, 2\\n```\\n```input\\n'a'\\n```", "input")
    ['1, 2', "'a'"]
    """
    pattern = re.compile(rf"```{re.escape(lang)}[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
    return [match.group(1).strip("\n").rstrip() for match in pattern.finditer(text)]


def answer_section(text: str) -> str | None:
    """AZR free-form format: the text inside the last <answer>...</answer>, or None if malformed."""
    if not _THINK_ANSWER.match(text):
        return None
    start = text.rfind("<answer>")
    end = text.find("</answer>", start)
    return text[start + len("<answer>") : end] if end != -1 else None


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
    }


def _longest_parsable_prefix(src: str) -> ast.Module | None:
    lines = src.rstrip().splitlines()
    for end in range(len(lines), 0, -1):
        try:
            return ast.parse("\n".join(lines[:end]))
        except (SyntaxError, ValueError):
            continue
    return None


def clean_program(src: str) -> tuple[str | None, str | None]:
    """Keep imports, `f`, and the top-level functions/classes/constants `f` needs; drop the rest.

    Returns (program, None) or (None, reason) with reason `syntax` or `no_entry_function`.

    >>> clean_program("def f(a):\\n    return g(a)\\ndef g(x):\\n    return x * 2\\nprint(f(3))")[0]
    'def f(a):\\n    return g(a)\\n\\ndef g(x):\\n    return x * 2'
    """
    tree = _longest_parsable_prefix(src)
    if tree is None:
        return None, "syntax"
    defined: dict[str, ast.stmt] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            for target in stmt.targets:
                defined.setdefault(target.id, stmt)
    entry = defined.get("f")
    if not isinstance(entry, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, "no_entry_function"
    keep: set[int] = set()
    frontier = [entry]
    while frontier:
        stmt = frontier.pop()
        if id(stmt) in keep:
            continue
        keep.add(id(stmt))
        frontier.extend(defined[name] for name in _names_used(stmt) if name in defined and id(defined[name]) not in keep)
    kept = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)) or id(s) in keep]
    # Offsets from a prefix parse are valid in the full text: only trailing lines were dropped.
    return "\n\n".join(ast.get_source_segment(src, s) or ast.unparse(s) for s in kept), None


def parse_proposal(text: str, task_type: str, *, mode: str, n_inputs: int, truncated: bool = False) -> dict:
    """Teacher completion -> {"program", "inputs", "message", "parse_reason"} (reason None when ok)."""
    result = {"program": "", "inputs": [], "message": None, "parse_reason": None}
    if truncated:
        result["parse_reason"] = "truncated"
        return result
    body = text if mode == "scaffolded" else answer_section(text)
    if body is None:
        result["parse_reason"] = "format"
        return result
    inputs = fenced_blocks(body, "input")
    if task_type == "code_f":
        messages = fenced_blocks(body, "message")
        result["message"] = messages[-1].strip() if messages else None
        if len(inputs) < n_inputs:
            result["parse_reason"] = "too_few_inputs"
            return result
        result["inputs"] = inputs[-n_inputs:]
        if not result["message"]:
            result["parse_reason"] = "no_message"
        return result
    programs = fenced_blocks(body, "python")
    if not programs:
        result["parse_reason"] = "no_program"
        return result
    if not inputs or not inputs[0].strip():
        result["parse_reason"] = "no_input"
        return result
    program, reason = clean_program(programs[0])
    result.update(program=program or "", inputs=[inputs[0].strip()], parse_reason=reason)
    return result


ANSWER_LANG = {"code_o": "output", "code_i": "input", "code_f": "python"}


def parse_answer(text: str, task_type: str, *, mode: str, truncated: bool = False) -> tuple[str | None, str | None]:
    """Student completion -> (answer, None) or (None, reason). The last block of the right kind wins."""
    if truncated:
        return None, "truncated"
    body = text if mode == "scaffolded" else answer_section(text)
    if body is None:
        return None, "format"
    blocks = [b for b in fenced_blocks(body, ANSWER_LANG[task_type]) if b.strip()]
    if not blocks:
        return None, "no_answer_block"
    answer = blocks[-1].strip()
    if task_type == "code_f":
        program, reason = clean_program(answer)
        return (program, None) if program else (None, reason)
    return answer, None
