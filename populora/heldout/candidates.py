"""Candidate tasks for the held-out pool v2: programs with inputs drawn by typed random generators.

Two sources, both pure and seeded (the sandbox computes every gold output later, `populora.heldout.ruler`):

* **Template families** (`FAMILIES`): short list, number and string programs of the kinds the base model
  proposes and can sometimes run in its head, some with constants drawn per task, and typed random
  arguments from ranges wide enough that no constant answer passes. The same program
  makes a `code_o` task (predict the output) or a `code_i` task (give an input that produces it).
* **The base model's own programs** (`redraw_inputs`): the programs of a pool it proposed (the second
  study's, `study/learning/heldout_pool.jsonl`), each argument redrawn with the *type and shape* of the
  one the model wrote (an int becomes a random int, a word a random word, a list of ints a random list
  of ints...). 42 of that pool's 64 code_i gold inputs were one of five literals (`10`, `5`, `'hello'`,
  `"hello"`, `'HeLLo'`), which a constant answer then passes; redrawn, the model's favourite literal
  is one value among a hundred.

    >>> rng = random.Random(0)
    >>> task = family_task("maximum", rng, "code_o", 0)
    >>> task["type"], task["program"].startswith("def f(xs):")
    ('code_o', True)
    >>> redraw_arguments("10, 'hello'", random.Random(1)) != "10, 'hello'"
    True
"""

from __future__ import annotations

import ast
import random
import string
from collections.abc import Callable
from dataclasses import dataclass

WORD_LETTERS = string.ascii_lowercase


def _word(rng: random.Random, low: int = 3, high: int = 7) -> str:
    return "".join(rng.choice(WORD_LETTERS) for _ in range(rng.randint(low, high)))


def _ints(rng: random.Random, low: int = 3, high: int = 6, top: int = 20) -> list[int]:
    return [rng.randint(0, top) for _ in range(rng.randint(low, high))]


@dataclass(frozen=True)
class Family:
    """`program(rng)` -> the program text with its constants drawn; `arguments(rng)` -> an argument list."""

    program: Callable[[random.Random], str]
    arguments: Callable[[random.Random], str]


def _fixed(text: str) -> Callable[[random.Random], str]:
    return lambda rng: text


def _distinct(rng: random.Random, low: int = 3, high: int = 5) -> list[int]:
    return rng.sample(range(10, 100), rng.randint(low, high))


# Short programs the 135M base model gets right at temperature 1 some of the time (a first attempt with
# harder ones, affine maps, loops over sums, dict lookups, found 1 of 32 tasks in the 5-60% window:
# study/pool-v2/README.md). Values are drawn from ranges wide enough that no single answer passes more
# than a few percent of a family's tasks (two-digit numbers, random words).
FAMILIES: dict[str, Family] = {
    "maximum": Family(_fixed("def f(xs):\n    return max(xs)"), lambda r: repr(_distinct(r))),
    "minimum": Family(_fixed("def f(xs):\n    return min(xs)"), lambda r: repr(_distinct(r))),
    "first": Family(_fixed("def f(xs):\n    return xs[0]"), lambda r: repr(_distinct(r))),
    "last": Family(_fixed("def f(xs):\n    return xs[-1]"), lambda r: repr(_distinct(r))),
    "second": Family(_fixed("def f(xs):\n    return xs[1]"), lambda r: repr(_distinct(r))),
    "first_two": Family(_fixed("def f(xs):\n    return xs[:2]"), lambda r: repr(_distinct(r, 3, 4))),
    "sorted": Family(_fixed("def f(xs):\n    return sorted(xs)"), lambda r: repr(_distinct(r, 3, 4))),
    "add": Family(_fixed("def f(a, b):\n    return a + b"), lambda r: f"{r.randint(10, 49)}, {r.randint(10, 49)}"),
    "double": Family(_fixed("def f(x):\n    return x * 2"), lambda r: str(r.randint(11, 99))),
    "increment": Family(lambda r: f"def f(x):\n    return x + {r.randint(1, 3)}", lambda r: str(r.randint(10, 99))),
    "negate": Family(_fixed("def f(x):\n    return -x"), lambda r: str(r.randint(10, 99))),
    "upper": Family(_fixed("def f(s):\n    return s.upper()"), lambda r: repr(_word(r, 4, 7))),
    "reverse": Family(_fixed("def f(s):\n    return s[::-1]"), lambda r: repr(_word(r, 3, 6))),
    "twice": Family(_fixed("def f(s):\n    return s + s"), lambda r: repr(_word(r, 3, 5))),
    "join": Family(_fixed("def f(a, b):\n    return a + b"), lambda r: f"{_word(r, 2, 4)!r}, {_word(r, 2, 4)!r}"),
    "count_letter": Family(lambda r: f"def f(s):\n    return s.count('{r.choice('aeiou')}') + len(s)",
                           lambda r: repr(_word(r, 4, 9))),
}


def family_task(name: str, rng: random.Random, task_type: str, index: int) -> dict:
    """One verifier row of family `name`: its program with constants drawn, one typed random argument list."""
    family = FAMILIES[name]
    return {"task_id": f"{name}-{task_type}-{index:04d}", "type": task_type, "program": family.program(rng),
            "inputs": [family.arguments(rng)], "message": None, "source": f"family:{name}"}


def draw_like(value, rng: random.Random, depth: int = 0):
    """A random value of the same type and shape as `value` (a literal the model wrote)."""
    if isinstance(value, bool):
        return rng.random() < 0.5
    if isinstance(value, int):
        return rng.randint(-5, 99) if value < 0 else rng.randint(0, 99)
    if isinstance(value, float):
        return round(rng.uniform(-10, 100), 1)
    if isinstance(value, str):
        if not value:
            return ""
        if value.isdigit():
            return str(rng.randint(10, 99999))
        word = _word(rng, max(1, min(len(value), 10) - 2), min(len(value), 10) + 2)
        if " " in value:
            word = " ".join(_word(rng, 2, 6) for _ in range(value.count(" ") + 1))
        if any(ch.isupper() for ch in value):
            word = "".join(ch.upper() if rng.random() < 0.5 else ch for ch in word)
        return word
    if isinstance(value, (list, tuple, set)) and depth < 3:
        items = list(value)
        template = items[0] if items else 0
        n = rng.randint(max(1, len(items) - 2), max(2, len(items) + 2))
        drawn = [draw_like(template, rng, depth + 1) for _ in range(n)]
        return type(value)(drawn) if not isinstance(value, set) else set(drawn)
    if isinstance(value, dict) and depth < 3 and value:
        template = next(iter(value.values()))
        key_template = next(iter(value))
        return {draw_like(key_template, rng, depth + 1): draw_like(template, rng, depth + 1) for _ in range(len(value))}
    return value  # None, empty containers, anything unknown: kept as written


def split_arguments(arguments: str) -> list | None:
    """The literal values of an argument list (`"10, 'a'"` -> `[10, 'a']`); None unless all are literals."""
    try:
        call = ast.parse(f"f({arguments})", mode="eval").body
        if not isinstance(call, ast.Call) or call.keywords:
            return None
        return [ast.literal_eval(arg) for arg in call.args]
    except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
        return None


def redraw_arguments(arguments: str, rng: random.Random) -> str | None:
    """`arguments` with each value redrawn by `draw_like`; None when they are not all literals."""
    values = split_arguments(arguments)
    if values is None:
        return None
    return ", ".join(repr(draw_like(v, rng)) for v in values)


def redraw_inputs(rows: list[dict], rng: random.Random, *, per_program: int = 2) -> list[dict]:
    """Verifier rows: each code_o/code_i program of `rows` (a pool the base model proposed) with
    `per_program` freshly drawn inputs, as both task types (the ruler keeps at most one per program)."""
    out = []
    for row in rows:
        for k in range(per_program):
            arguments = redraw_arguments(row["inputs"][0], rng) if row.get("inputs") else None
            if arguments is None:
                continue
            for task_type in ("code_o", "code_i"):
                out.append({"task_id": f"model-{row['task_id']}-{task_type}-{k}", "type": task_type,
                            "program": row["program"], "inputs": [arguments], "message": None,
                            "source": f"model:{row['task_id']}"})
    return out


def family_candidates(per_family: int, seed: int) -> list[dict]:
    """`per_family` tasks of each family and type, seeded (`random.Random(f"{name}:{type}:{seed}")`)."""
    out = []
    for name in sorted(FAMILIES):
        for task_type in ("code_o", "code_i"):
            rng = random.Random(f"{name}:{task_type}:{seed}")
            out.extend(family_task(name, rng, task_type, k) for k in range(per_family))
    return out
