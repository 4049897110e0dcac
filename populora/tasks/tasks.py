"""Task rows, seed programs and the per-type task buffer (AZR §1.5-1.6), as plain data.

A task row is the verifier's row: {"task_id", "type", "program", "inputs", "outputs",
"message", "valid", ...} plus provenance ("arm", "gen", "teacher"). The buffer is the list of
every valid task so far; proposer references and solver worked examples are sampled from it,
and students' task lists are topped up from it (newest first, AZR's `max_new`).

Seeds: AZR starts from the identity program only and then lets a 7B model write 256 seed
triplets. A 135M model cannot, so by default a handful of simple hand-written programs join
the identity seed (`seeds: builtin`); `seeds: identity` is AZR's single seed. Their outputs are
computed by the verifier in the `init` stage, never written by hand.

Copyable tasks: a code_o/code_i task whose output equals one of its input's arguments (the
identity seed; a disguised identity such as `str(x).encode().decode()` on a string) pays a
student for echoing what the task shows. AZR keeps them; with `propose.reject_copyable` the
verify stage marks them invalid (reason `copyable`) and init leaves such seeds out of the buffer.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from functools import lru_cache
from typing import TypedDict

from populora.core.literals import output_is_an_argument
from populora.tasks.program_metrics import normalized_ast_hash

# The code_f shape, defined once: a code_f task carries `propose.code_f_inputs` inputs (AZR: 10),
# the first half shown to the solver, the rest hidden (`code_f_split`); code_o/code_i carry one.
CODE_F_INPUTS = 10
MAX_CODE_F_INPUTS = 10  # the seed tasks carry 10 inputs each


def input_count(task_type: str, code_f_inputs: int = CODE_F_INPUTS) -> int:
    """Inputs a task row of `task_type` must carry."""
    return code_f_inputs if task_type == "code_f" else 1


def code_f_split(items: list) -> tuple[list, list]:
    """(shown, hidden) halves of a code_f task's inputs or outputs: the first len // 2 are shown."""
    half = len(items) // 2
    return list(items[:half]), list(items[half:])


class SeedRow(TypedDict):
    """A seed proposal's program, inputs and message."""

    program: str
    inputs: list[str]
    message: str | None


IDENTITY_PROGRAM = "def f(a):\n    return a"
IDENTITY_SEED: SeedRow = {"program": IDENTITY_PROGRAM, "inputs": ["'Hello world'"], "message": None}
IDENTITY_CODE_F_SEED: SeedRow = {  # AZR's six inputs, plus four to reach 10 (5 shown, 5 hidden)
    "program": IDENTITY_PROGRAM,
    "inputs": [
        "'Hello world'",
        "1",
        "dict(a=1, b=2)",
        "(1.1, 1.2, 1.3)",
        "'[[1, 0, 0], [0, 0, 0], [0, 0, 0]]'",
        "1001101100010001",
        "[3, 1, 2]",
        "'abc'",
        "True",
        "None",
    ],
    "message": "Write a function that returns whatever you input",
}


# (program, input for code_o/code_i, ten inputs for code_f, message) -- simple on purpose.
BUILTIN_SEEDS = [
    (
        "def f(a, b):\n    return a * b",
        "3, 4",
        ["2, 3", "0, 5", "-1, 4", "7, 7", "10, 0", "1, 1", "6, -2", "3, 9", "12, 2", "5, 5"],
        "Combine the two numbers",
    ),
    (
        "def f(s):\n    return s[::-1]",
        "'hello'",
        ["'abc'", "'racecar'", "''", "'ab'", "'python'", "'12345'", "'a b'", "'xyz'", "'level'", "'data'"],
        "Transform the string",
    ),
    (
        "def f(xs):\n    return sorted(xs)",
        "[3, 1, 2]",
        [
            "[5, 4]",
            "[]",
            "[1]",
            "[2, 2, 1]",
            "[9, -1, 3]",
            "[0, 0]",
            "[7, 8, 6]",
            "[3, 2, 1, 0]",
            "[10, 1]",
            "[4, 6, 5]",
        ],
        "Order matters",
    ),
    (
        "def f(xs):\n    return len(xs)",
        "[1, 2, 3, 4]",
        [
            "[]",
            "[1]",
            "'abc'",
            "(1, 2)",
            "[0, 0, 0]",
            "'hello world'",
            "{1: 2}",
            "[[1], [2]]",
            "'x'",
            "[5, 6, 7, 8, 9]",
        ],
        "Count something",
    ),
    (
        "def f(n):\n    total = 0\n    for i in range(n):\n        total += i\n    return total",
        "5",
        ["0", "1", "2", "3", "4", "6", "7", "10", "12", "20"],
        "Accumulate over a range",
    ),
    (
        "def f(d, key):\n    return d.get(key, 0) + 1",
        "{'a': 1}, 'a'",
        [
            "{}, 'a'",
            "{'a': 5}, 'a'",
            "{'b': 2}, 'a'",
            "{'b': 2}, 'b'",
            "{'x': -1}, 'x'",
            "{'a': 1, 'b': 2}, 'b'",
            "{'k': 10}, 'k'",
            "{'k': 10}, 'z'",
            "{'a': 0}, 'a'",
            "{'q': 3}, 'q'",
        ],
        "Look it up",
    ),
    (
        "def f(s):\n    return [c for c in s if c.isupper()]",
        "'HeLLo'",
        ["'ABC'", "'abc'", "'aBc'", "''", "'Hello World'", "'XyZ'", "'PyThOn'", "'123A'", "'a'", "'QQ'"],
        "Filter the characters",
    ),
]


def seed_proposals(kind: str, code_f_inputs: int = CODE_F_INPUTS) -> list[dict]:
    """Seed rows in the verifier's input format (outputs are computed by verifying them); code_f
    seeds carry their first `code_f_inputs` inputs."""
    seeds = [
        (
            IDENTITY_SEED["program"],
            IDENTITY_SEED["inputs"][0],
            IDENTITY_CODE_F_SEED["inputs"],
            IDENTITY_CODE_F_SEED["message"],
        )
    ]
    if kind == "builtin":
        seeds += BUILTIN_SEEDS
    rows = []
    for index, (program, single, many, message) in enumerate(seeds):
        for task_type in ("code_o", "code_i"):
            rows.append(
                {
                    "task_id": f"seed-{task_type}-{index}",
                    "type": task_type,
                    "program": program,
                    "inputs": [single],
                    "message": None,
                    "gen": -1,
                    "origin": "seed",
                }
            )
        rows.append(
            {
                "task_id": f"seed-code_f-{index}",
                "type": "code_f",
                "program": program,
                "inputs": list(many[:code_f_inputs]),
                "message": message,
                "gen": -1,
                "origin": "seed",
            }
        )
    return rows


def is_valid_task(row: dict) -> bool:
    """A proposal becomes a task only when it parsed cleanly *and* the verifier accepted it."""
    return bool(row.get("valid")) and not row.get("parse_reason")


BUFFER_FIELDS = ("task_id", "type", "program", "inputs", "outputs", "message", "gen", "origin", "teacher")


def buffer_entry(task: dict) -> dict:
    return {key: task.get(key) for key in BUFFER_FIELDS}


def extend_buffer(buffer: list[dict], valid_tasks: list[dict], max_size: int) -> list[dict]:
    """Append valid tasks; past `max_size` drop the *oldest non-seed* entries (AZR kept the oldest,
    which froze its buffer once full)."""
    merged = buffer + [buffer_entry(t) for t in valid_tasks if is_valid_task(t)]
    overflow = len(merged) - max_size
    if overflow <= 0:
        return merged
    seeds = [t for t in merged if t.get("origin") == "seed"]
    rest = [t for t in merged if t.get("origin") != "seed"]
    return seeds + rest[overflow:]


def pair_of(pairing: dict | None) -> dict[str, str] | None:
    """teacher -> student where the pairing keeps independent pairs (`pairing.strategy: pairs`, the
    ensemble control), else None: every member shares the arm's one buffer."""
    return dict(pairing["pairs"]) if pairing and pairing.get("scheme") == "pairs" else None


def pair_buffer(buffer: list[dict], teacher: str) -> list[dict]:
    """The buffer as one independent pair sees it: the seeds and its own teacher's tasks (buffer
    entries carry `teacher`), never another pair's."""
    return [b for b in buffer if b.get("origin") == "seed" or b.get("teacher") == teacher]


def extend_pair_buffers(buffer: list[dict], valid_tasks: list[dict], max_size: int, pairing: dict | None) -> list[dict]:
    """The next buffer: `extend_buffer`, or under `pairs` each pair's own tasks capped as one pair's
    buffer would be (seeds + its tasks <= `max_size`, its oldest dropped first), in the buffer's order."""
    pairs = pair_of(pairing)
    if pairs is None:
        return extend_buffer(buffer, valid_tasks, max_size)
    merged = buffer + [buffer_entry(t) for t in valid_tasks if is_valid_task(t)]
    seeds = [t for t in merged if t.get("origin") == "seed"]
    drop = set()
    for teacher in pairs:
        own = [t["task_id"] for t in merged if t.get("origin") != "seed" and t.get("teacher") == teacher]
        drop |= set(own[: max(0, len(seeds) + len(own) - max_size)])
    return seeds + [t for t in merged if t.get("origin") != "seed" and t["task_id"] not in drop]


def of_type(buffer: list[dict], task_type: str) -> list[dict]:
    return [t for t in buffer if t["type"] == task_type]


def sample_references(buffer: list[dict], task_type: str, k: int, rng: random.Random) -> list[dict]:
    """Up to k distinct buffer tasks of `task_type`, uniformly without replacement (AZR io_n)."""
    pool = of_type(buffer, task_type)
    return rng.sample(pool, min(k, len(pool)))


def sample_code_f_program(buffer: list[dict], rng: random.Random) -> dict:
    """code_f proposals start from a program of the deduction/abduction buffers (AZR)."""
    pool = of_type(buffer, "code_o") + of_type(buffer, "code_i")
    return rng.choice(pool)


def newest_first(buffer: list[dict], task_type: str) -> list[dict]:
    return sorted(of_type(buffer, task_type), key=lambda t: t.get("gen", -1), reverse=True)


@lru_cache(maxsize=1 << 16)  # a buffer of thousands is hashed once per stage, not once per task
def program_key(program: str | None) -> str | None:
    """The normalised-AST hash that decides whether two programs are "the same" (own names renamed,
    constants abstracted: see `populora.tasks.program_metrics`); None for text that does not parse."""
    if not program:
        return None
    try:
        return normalized_ast_hash(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def program_keys(tasks: Iterable[dict]) -> set[str]:
    return {key for t in tasks if (key := program_key(t.get("program"))) is not None}


def mark_duplicates(proposals: list[dict], buffer: list[dict]) -> list[dict]:
    """Proposals whose program is already in the buffer (normalised) become invalid with
    `parse_reason: duplicate`: a teacher that copies a reference earns -1, not a task.
    code_f proposals are exempt (they bring inputs and a message for a buffer program by design).
    Returns new rows; earlier parse failures are kept as they are."""
    known = program_keys(buffer)
    out = []
    for row in proposals:
        if row["type"] != "code_f" and row.get("parse_reason") is None and program_key(row.get("program")) in known:
            row = {**row, "parse_reason": "duplicate"}
        out.append(row)
    return out


COPYABLE_TYPES = ("code_o", "code_i")  # a code_f answer is a program: nothing shown to echo


def is_copyable(task: dict) -> bool:
    """Whether a verified code_o/code_i task's output equals one argument of its input, so that
    echoing what the task shows solves it (code_o: the argument; code_i: the output back)."""
    if task.get("type") not in COPYABLE_TYPES or not task.get("inputs") or not task.get("outputs"):
        return False
    return output_is_an_argument(task["inputs"][0], task["outputs"][0])


def mark_copyable(tasks: list[dict]) -> list[dict]:
    """Verified rows with every valid copyable task made invalid (`reason: copyable`, its outputs
    kept); a teacher then earns what any invalid proposal earns. Returns new rows."""
    out = []
    for row in tasks:
        if isinstance(row, dict) and row.get("valid") and is_copyable(row):
            row = {
                **row,
                "valid": False,
                "reason": "copyable",
                "reason_detail": f"output {row['outputs'][0][:80]} is an argument of the input",
            }
        out.append(row)
    return out
