"""Verified tasks of one split of the task families (`populora.tasks.families`): what the warm start trains on
and what the held-out pool and the warm start's validation are built from.

The generator's programs are drawn in order, verified in the sandbox (gold outputs computed there, never by
hand), and kept when they are valid and say something: not copyable (the output is an argument of the
input, `is_copyable`), not solved by the copy or echo baseline (`populora.verifier.baselines`), and, for
`code_o`, an output of at most `MAX_OUTPUT_CHARS` characters (inside the answer budget:
`populora.warmstart.examples.answer_budget` counts its tokens).

    tasks = verified_tasks("train", 800, seed=0, config=params.verify, sandbox=box)
    tasks = verified_tasks("validation", 200, seed=0, config=params.verify, sandbox=box)
"""

from __future__ import annotations

import random
from collections import Counter

from populora.tasks.families import TASK_TYPES, programs, task_rows
from populora.tasks.tasks import is_copyable
from populora.verifier.baselines import solved_by_baseline
from populora.verifier.validity import verify_rows

MAX_OUTPUT_CHARS = 40  # a code_o gold output's repr at most: about 20 tokens, inside every answer budget
TASK_FIELDS = (
    "task_id",
    "type",
    "program",
    "inputs",
    "outputs",
    "message",
    "family",
    "composition",
    "held_out",
    "split",
)


def verified_tasks(
    split: str,
    n: int,
    *,
    seed: int,
    config,
    sandbox,
    types=TASK_TYPES,
    chunk: int = 256,
    families: list[str] | None = None,
    counts: Counter | None = None,
) -> list[dict]:
    """`n` verified tasks of `split` (as many of each type in `types` as the programs give, in the
    generator's order), the programs drawn `chunk` at a time. `counts` (if given) gathers why candidates
    were dropped. Fewer than `n` only when the split's families run out of new programs."""
    stream = programs(split, seed, families=families)
    rng = random.Random(f"inputs:{split}:{seed}")
    counts = counts if counts is not None else Counter()
    kept: list[dict] = []
    index = 0
    while len(kept) < n:
        candidates = []
        for program in stream:
            candidates.extend(task_rows(program, rng, index=index, types=types))
            index += 1
            if len(candidates) >= chunk:
                break
        if not candidates:
            break
        counts["candidates"] += len(candidates)
        verified = verify_rows(candidates, config, sandbox=sandbox)
        good = []
        for row in verified:
            reason = drop_reason(row)
            if reason:
                counts[reason] += 1
            else:
                good.append({k: row.get(k) for k in TASK_FIELDS})
        echoed = solved_by_baseline(good, config, sandbox=sandbox)
        counts["copy_or_echo_solves"] += len(echoed)
        kept.extend(t for t in good if t["task_id"] not in echoed)
    counts["kept"] = min(len(kept), n)
    return kept[:n]


def drop_reason(row: dict) -> str | None:
    """Why a verified candidate is not kept (None: kept before the copy and echo check)."""
    if not row.get("valid"):
        return f"invalid:{row.get('reason')}"
    if is_copyable(row):
        return "copyable"
    if row["type"] == "code_o" and len(row["outputs"][0]) > MAX_OUTPUT_CHARS:
        return "output_too_long"
    return None


def type_counts(tasks: list[dict]) -> dict[str, int]:
    return dict(sorted(Counter(t["type"] for t in tasks).items()))
