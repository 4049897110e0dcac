"""Task families for the positive control: one program template, random inputs (pure, seeded).

A family is a `code_o` program template and an input generator. `family_tasks` draws distinct
(program, input) pairs and splits them into a held-out pool and a training pool that share no
input, so a held-out answer can never have been seen in training. Families are picked so that
copying the input is wrong (the output is never one of the arguments): a model that learnt to
echo its input, as the study's students did, scores 0 here.

    >>> tasks = family_tasks("add", heldout=4, train=8, seed=0)
    >>> len(tasks["heldout"]), len(tasks["train"]), tasks["train"][0]["type"]
    (4, 8, 'code_o')
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    program: str
    arguments: Callable[[random.Random], str]  # one argument list, as Python source
    about: str


def _word(rng: random.Random, low: int = 3, high: int = 6) -> str:
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(low, high)))


def _ints(rng: random.Random, low: int = 3, high: int = 5) -> list[int]:
    return [rng.randint(0, 9) for _ in range(rng.randint(low, high))]


def _distinct_ints(rng: random.Random) -> list[int]:
    return rng.sample(range(1, 20), rng.randint(3, 5))


FAMILIES: dict[str, Family] = {
    "add": Family("def f(a, b):\n    return a + b", lambda r: f"{r.randint(10, 49)}, {r.randint(10, 49)}",
                  "the sum of two two-digit numbers"),
    "first": Family("def f(xs):\n    return xs[0]", lambda r: repr(_ints(r)), "the first item of a list of digits"),
    "minimum": Family("def f(xs):\n    return min(xs)", lambda r: repr(_distinct_ints(r)), "the smallest of a few numbers"),
    "last": Family("def f(xs):\n    return xs[-1]", lambda r: repr(_ints(r)), "the last item of a list of digits"),
    "length": Family("def f(xs):\n    return len(xs)", lambda r: repr([r.randint(10, 99) for _ in range(r.randint(2, 7))]),
                     "the length of a list of two-digit numbers"),
    "maximum": Family("def f(xs):\n    return max(xs)", lambda r: repr(_distinct_ints(r)), "the largest of a few numbers"),
    "upper": Family("def f(s):\n    return s.upper()", lambda r: repr(_word(r)), "a lowercase word in capitals"),
    "reverse": Family("def f(s):\n    return s[::-1]", lambda r: repr(_word(r, 3, 5)), "a short word reversed"),
    "first_two": Family("def f(xs):\n    return xs[:2]", lambda r: repr(_ints(r)), "the first two items of a list"),
    "double": Family("def f(x):\n    return x * 2", lambda r: str(r.randint(11, 999)), "twice a number of two or three digits"),
}


def _copies(arguments: str, output) -> bool:
    """True when the output equals one of the arguments (a copying answer would be right)."""
    from populora.core.literals import output_is_an_argument

    return output_is_an_argument(arguments, repr(output))


def family_tasks(name: str, *, heldout: int, train: int, seed: int) -> dict[str, list[dict]]:
    """`{"heldout": [...], "train": [...]}` verifier rows (`task_id`, `type`, `program`, `inputs`)
    of family `name`: distinct inputs, none in both pools, none whose output is an argument
    (checked by evaluating the template here; the verifier computes the gold outputs later)."""
    if name not in FAMILIES:
        raise ValueError(f"unknown task family {name!r}; known: {', '.join(sorted(FAMILIES))}")
    family = FAMILIES[name]
    namespace: dict = {}
    exec(family.program, namespace)  # our own template, not model output: the output check needs it
    rng = random.Random(f"{name}:{seed}")
    seen: set[str] = set()
    inputs: list[str] = []
    for _ in range(200 * (heldout + train)):
        if len(inputs) == heldout + train:
            break
        arguments = family.arguments(rng)
        if arguments in seen or _copies(arguments, eval(f"f({arguments})", dict(namespace))):
            continue
        seen.add(arguments)
        inputs.append(arguments)
    if len(inputs) < heldout + train:
        raise ValueError(f"family {name!r} has fewer than {heldout + train} distinct inputs")
    rows = [{"task_id": f"{name}-{k:04d}", "type": "code_o", "program": family.program, "inputs": [arguments],
             "message": None} for k, arguments in enumerate(inputs)]
    return {"heldout": rows[:heldout], "train": rows[heldout:]}
