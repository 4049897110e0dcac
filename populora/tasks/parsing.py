"""Parse teacher and student completions into task fields and answers (AZR rules, bugs fixed).

Completions are the assistant text *including* any scaffold prefills, so both generation modes
parse with the same code. Fixes over AZR: the program block must be tagged ```python (an
```input block that comes first is never taken as code); programs may hold classes and helper
functions (AZR's one-`def` regex rejected them); trailing top-level junk is cleaned off the way
AZR's seeding does (keep `f` and what it uses). Every failure returns a reason (PARSE_REASONS),
never raises: text that breaks Python's parser (MemoryError "parser stack overflowed",
RecursionError) is `syntax`, a program block over MAX_PROGRAM_CHARS is `too_long`, and the work on
one completion stays bounded however long or broken it is (perf/fuzz_completions.py feeds 10,000).
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import Any

MAX_PROGRAM_CHARS = 20_000  # longer programs are `too_long` here and in the verifier (populora.verifier.rules)
_PARSE_ERRORS = (SyntaxError, ValueError, MemoryError, RecursionError)  # what ast.parse raises on hostile text
_MAX_PREFIX_PARSES = 64  # bounds the work on one broken program (each parse is linear in its length)
_BLANK_TOKENS = (tokenize.NL, tokenize.COMMENT, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER)
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # Python's own line ends (str.splitlines also splits at \f, \x1c, ...)
_THINK_OPEN = re.compile(r"\s*<think>")
_THINK_TO_ANSWER = re.compile(r"</think>\s*<answer>")
PARSE_REASONS = {
    "truncated": "the generation hit max_new_tokens before the format was complete",
    "format": "free_form: no <think>...</think><answer>...</answer>",
    "no_program": "no ```python block",
    "no_input": "no (non-empty) ```input block",
    "too_few_inputs": "code_f: fewer ```input blocks than propose.code_f_inputs",
    "no_message": "code_f: no ```message block",
    "no_answer_block": "no block of the answer's kind",
    "syntax": "no prefix of the program parses",
    "no_entry_function": "no top-level def f",
    "too_long": f"a program block over {MAX_PROGRAM_CHARS} characters",
    "duplicate": "a code_o/code_i program already in the buffer (populora.tasks.tasks.mark_duplicates)",
}


def fenced_blocks(text: str, lang: str) -> list[str]:
    """Contents of every ```lang block, in order (an unclosed final block counts too).

    >>> fenced_blocks("```input\\n1, 2\\n```\\n```input\\n'a'\\n```", "input")
    ['1, 2', "'a'"]
    """
    pattern = re.compile(rf"```{re.escape(lang)}[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)
    return [match.group(1).strip("\n").rstrip() for match in pattern.finditer(text)]


def answer_section(text: str) -> str | None:
    """AZR free-form format: the text inside the last <answer>...</answer>, or None if malformed.

    Matches `^\\s*<think>.*?</think>\\s*<answer>.*?</answer>` (DOTALL) without a backtracking regex,
    which takes quadratic time on a megabyte of repeated tags."""
    opened = _THINK_OPEN.match(text)
    bridge = _THINK_TO_ANSWER.search(text, opened.end()) if opened else None
    if bridge is None or text.find("</answer>", bridge.end()) == -1:
        return None
    start = text.rfind("<answer>")
    end = text.find("</answer>", start)
    return text[start + len("<answer>") : end] if end != -1 else None


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.value.id for n in ast.walk(node) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)
    }


def _logical_line_ends(text: str) -> list[int]:
    """Line numbers (1-based), ascending, where a prefix can end and parse: where a logical line ends (a
    NEWLINE token; elsewhere a bracket, string or continuation is open), up to the first error, and
    every line before the first code (blank, comment, continuation lines: an empty module)."""
    ends, first_code, failed = [], None, False
    try:
        for token in tokenize.generate_tokens(io.StringIO(text).readline):
            if token.type == tokenize.NEWLINE:
                ends.append(token.start[0])
            elif first_code is None and token.type not in _BLANK_TOKENS:
                first_code = token.start[0]
    except (tokenize.TokenError, SyntaxError, ValueError) as error:  # a prefix can use the lines before the error
        failed = True
        where = error.args[1] if isinstance(error, tokenize.TokenError) and len(error.args) > 1 else None
        where = where[0] if isinstance(where, tuple) else getattr(error, "lineno", None)
        first_code = first_code or (where if isinstance(where, int) else 1)
    # blank and comment lines before the first code: a prefix of them alone parses (an empty module)
    lead = first_code - 1 if first_code is not None else (0 if failed else text.count("\n") + 1)
    return [end for end in range(1, lead + 1) if end not in ends] + ends


def _longest_parsable_prefix(src: str) -> ast.Module | None:
    """The AST of the longest prefix of whole lines that parses. Only prefixes ending at a logical
    line's end are tried, longest first; a prefix holding the line a parse failed at fails the same
    way, so the search jumps below it; it gives up (None) after _MAX_PREFIX_PARSES parses. (Trying
    every prefix was quadratic: 3,000 broken lines took 1.5 s, a megabyte hours.) Lines are split
    where Python splits them (\\n, \\r\\n, \\r), so parse positions index them."""
    if not src.strip():
        return None
    lines = _LINE_BREAK.split(src.rstrip())
    limit = len(lines)
    attempts = 0
    for end in reversed(_logical_line_ends("\n".join(lines))):
        if end > limit:
            continue
        attempts += 1
        if attempts > _MAX_PREFIX_PARSES:
            return None
        try:
            return ast.parse("\n".join(lines[:end]))
        except SyntaxError as error:
            if isinstance(error.lineno, int) and error.lineno >= 1:
                limit = min(limit, error.lineno - 1)
        except _PARSE_ERRORS:  # nul bytes, surrogates, parser stack or recursion overflow: a shorter prefix may do
            continue
    return None


def clean_program(src: str) -> tuple[str | None, str | None]:
    """Keep imports, `f`, and the top-level functions/classes/constants `f` needs; drop the rest.

    Returns (program, None) or (None, reason) with reason `syntax`, `no_entry_function` or `too_long`.

    >>> clean_program("def f(a):\\n    return g(a)\\ndef g(x):\\n    return x * 2\\nprint(f(3))")[0]
    'def f(a):\\n    return g(a)\\n\\ndef g(x):\\n    return x * 2'
    """
    if len(src) > MAX_PROGRAM_CHARS:
        return None, "too_long"
    tree = _longest_parsable_prefix(src)
    if tree is None:
        return None, "syntax"
    defined: dict[str, ast.stmt] = {}
    for stmt in tree.body:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined[stmt.name] = stmt
        elif isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            for target in stmt.targets:
                if isinstance(target, ast.Name):  # every one is (checked above)
                    defined.setdefault(target.id, stmt)
    entry = defined.get("f")
    if not isinstance(entry, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return None, "no_entry_function"
    keep: set[int] = set()
    frontier: list[ast.stmt] = [entry]
    while frontier:
        stmt = frontier.pop()
        if id(stmt) in keep:
            continue
        keep.add(id(stmt))
        frontier.extend(
            defined[name] for name in _names_used(stmt) if name in defined and id(defined[name]) not in keep
        )
    kept = [s for s in tree.body if isinstance(s, (ast.Import, ast.ImportFrom)) or id(s) in keep]
    # Offsets from a prefix parse are valid in the full text: only trailing lines were dropped.
    try:
        return "\n\n".join(ast.get_source_segment(src, s) or ast.unparse(s) for s in kept), None
    except RecursionError:  # ast.unparse of a deeply nested statement
        return None, "syntax"


def parse_proposal(text: str, task_type: str, *, mode: str, n_inputs: int, truncated: bool = False) -> dict:
    """Teacher completion -> {"program", "inputs", "message", "parse_reason"} (reason None when ok)."""
    result: dict[str, Any] = {"program": "", "inputs": [], "message": None, "parse_reason": None}
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
