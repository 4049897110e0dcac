"""The held-out pool: a frozen set of verified code_o/code_i tasks that no adapter ever proposes,
solves or trains on, answered by every member (and the base) at every generation.

Two ways to make one (`stages.heldout_pool`): reuse a pool built before (the file `heldout.pool_file` names, passed in: the
committed pool v3 under data/, `populora/heldout/ruler.py`, verified again here), or let the base model propose
one in the teacher's role (`propose_pool`: the project's proposer prompt, references from the seed
tasks and the pool so far, `heldout.seed`, independent of `base.seed`, so every run of a study shares
it). A proposal enters when it is valid, not copyable (echoing what the task shows would be right:
the project's copy rule), and its normalised program is neither a seed's nor already in the pool.
Each pool task carries its own worked examples (seed tasks, drawn once), so the prompt of a task is
the same for every member, arm and generation and verdicts pair task by task. During the run the
verify stage makes any proposal whose program is a pool program invalid (`reason: heldout`,
`mark_heldout`), so no pool program reaches a buffer, a student or an update.

    pool = accept_into_pool(pool, verified_rows, seeds, per_type=128)
    pool = reuse_pool(pool_file, params, sandbox, log)     # the committed pool, verified again

Scoring is `populora/heldout/scoring.py`.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from populora.core.io import read_jsonl
from populora.core.progress import Progress
from populora.core.seeds import derive_seed
from populora.tasks.prompts import chat_wrapper
from populora.tasks.roles import proposal_rows, proposer_jobs, worked_example_pool
from populora.tasks.tasks import is_copyable, mark_duplicates, program_key, program_keys, seed_proposals
from populora.verifier import verify_rows

HELDOUT_TYPES = ("code_o", "code_i")  # a code_f answer is a program: scored by hidden pairs, not in the pool
BASE = "base"  # the member name of the bare base model in verdict tables
POOL_FIELDS = ("task_id", "type", "program", "inputs", "outputs", "message")


def pool_types(types: Iterable[str]) -> tuple[str, ...]:
    """The trained task types a pool holds (code_o and code_i among `propose.types`)."""
    return tuple(t for t in types if t in HELDOUT_TYPES)


def accept_into_pool(
    pool: list[dict], verified: list[dict], seeds: list[dict], *, per_type: int, types: Collection[str] = HELDOUT_TYPES
) -> list[dict]:
    """`pool` plus the verified rows that qualify, in order, until `per_type` of each type: valid,
    not copyable, a program that parses and is neither a seed's nor a pool task's (normalised AST).
    New tasks get ids `heldout-<type>-<index>`. Returns a new list."""
    out = list(pool)
    known = program_keys(seeds) | program_keys(pool)
    for row in verified:
        task_type = row.get("type")
        if task_type not in types or not row.get("valid") or is_copyable(row):
            continue
        key = program_key(row.get("program"))
        if key is None or key in known:
            continue
        index = sum(t["type"] == task_type for t in out)
        if index >= per_type:
            continue
        known.add(key)
        out.append(
            {
                **{k: row.get(k) for k in POOL_FIELDS},
                "task_id": f"heldout-{task_type}-{index:03d}",
                "source": row.get("task_id"),
            }
        )
    return out


def pool_is_full(pool: list[dict], per_type: int, types: Iterable[str]) -> bool:
    return all(sum(t["type"] == task_type for t in pool) >= per_type for task_type in types)


def attach_examples(pool: list[dict], seeds: list[dict], worked_examples: int, seed: int) -> list[dict]:
    """Each pool task with `examples`: its worked examples (seed tasks of its type with another
    program), drawn once, so every evaluation shows the same prompt."""
    rng = random.Random(seed)
    out = []
    for task in pool:
        choices = worked_example_pool(task, seeds)
        picked = rng.sample(choices, min(worked_examples, len(choices)))
        out.append({**task, "examples": [{k: e.get(k) for k in POOL_FIELDS} for e in picked]})
    return out


def mark_heldout(rows: list[dict], pool: list[dict]) -> list[dict]:
    """Verified rows with every valid task whose program is a pool program made invalid
    (`reason: heldout`): the pool stays out of every buffer, solve and update. Returns new rows."""
    keys = program_keys(pool)
    if not keys:
        return list(rows)
    out = []
    for row in rows:
        if isinstance(row, dict) and row.get("valid") and program_key(row.get("program")) in keys:
            row = {
                **row,
                "valid": False,
                "reason": "heldout",
                "reason_detail": "the program is a held-out pool program (populora/heldout/pool.py)",
            }
        out.append(row)
    return out


def pool_task_type(task_id: str) -> str | None:
    """The task type a pool task's id names (`heldout-code_i-007` -> `code_i`, the ids `accept_into_pool`
    gives); None for an id of another form."""
    prefix, _, rest = task_id.partition("-")
    task_type, _, index = rest.rpartition("-")
    return task_type if prefix == "heldout" and task_type in HELDOUT_TYPES and index.isdigit() else None


def verified_seeds(params, sandbox) -> list[dict]:
    """The seed tasks as the init stage keeps them (verified; without copyable ones under reject_copyable)."""
    seeds = worked_example_seeds(params, sandbox)
    return [row for row in seeds if not (params.propose.reject_copyable and is_copyable(row))]


def worked_example_seeds(params, sandbox) -> list[dict]:
    """Every seed task the sandbox verifies: what the pool's and the warm start's prompts draw worked examples from.

    Unlike `verified_seeds` it ignores `propose.reject_copyable`, a filter on what enters the buffer: the frozen
    warm base and a pool's prompts must not change with a proposal setting (pool v3 was calibrated on the warm base
    of params.yaml, where the filter is off; a study overlay that turned it on trained another warm base)."""
    code_f_inputs = params.propose.code_f_inputs
    return [
        row
        for row in verify_rows(
            seed_proposals(params.buffer.seeds, code_f_inputs),
            params.verify,
            sandbox=sandbox,
            code_f_inputs=code_f_inputs,
        )
        if row["valid"]
    ]


def propose_pool(params, model, tokenizer, seeds: list[dict], sandbox, log) -> list[dict]:
    """A pool the base model proposes, round by round (`heldout.max_rounds`), until `heldout.per_type` of each type."""
    per_type = params.heldout.per_type
    types = pool_types(params.propose.types)
    chat = chat_wrapper(tokenizer)
    pool: list[dict] = []
    for round_index in range(params.heldout.max_rounds):
        # one full batch of proposals per round, over the types not yet full (a full type's proposals would be wasted)
        missing = [t for t in types if sum(p["type"] == t for p in pool) < per_type]
        rows = _propose_round(params, model, tokenizer, chat, [*seeds, *pool], missing, round_index)
        parsed = [row for row in rows if row["parse_reason"] is None]
        with Progress(len(parsed), f"heldout pool round {round_index} verify", unit="proposals", log=log) as progress:
            verified = verify_rows(
                parsed,
                params.verify,
                sandbox=sandbox,
                code_f_inputs=params.propose.code_f_inputs,
                progress=progress.update,
            )
        pool = accept_into_pool(pool, verified, seeds, per_type=per_type, types=types)
        log.info(
            "round %d: %d proposals, %d parsed, %d valid; pool %s",
            round_index,
            len(rows),
            len(parsed),
            sum(r["valid"] for r in verified),
            _type_counts(pool, types),
        )
        if pool_is_full(pool, per_type, types):
            break
    else:
        log.warning(
            "held-out pool short after %d rounds: %s of %d per type (heldout.max_rounds)",
            params.heldout.max_rounds,
            _type_counts(pool, types),
            per_type,
        )
    return attach_examples(pool, seeds, params.solve.worked_examples, derive_seed(params.heldout.seed, "examples"))


def _propose_round(params, model, tokenizer, chat, known: list[dict], types: list[str], round_index: int) -> list[dict]:
    """Round `round_index`'s proposal rows: the base model in the teacher's role writes one batch of
    `propose.batch_size` proposals split over `types`, references drawn from `known` (the seeds and the pool so
    far); a proposal whose program is already known is marked a duplicate. Seeded by `heldout.seed`."""
    from populora.lm.sampling import GenRow, run_plans  # torch only where a model proposes

    cfg = params.propose
    seed = derive_seed(params.heldout.seed, "heldout_pool", round_index)
    jobs = proposer_jobs(
        ["base"],
        known,
        per_type=max(1, -(-cfg.batch_size // len(types))),
        references=cfg.references,
        n_inputs=cfg.code_f_inputs,
        mode=cfg.mode,
        chat=chat,
        rng=random.Random(seed),
        arm="heldout",
        gen=round_index,
        types=types,
    )
    results = run_plans(
        model,
        tokenizer,
        [GenRow(plan, None) for _, plan in jobs],
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=cfg.max_new_tokens,
        batch_size=cfg.batch_size,
        seed=seed,
        desc=f"heldout pool round {round_index}",
    )
    return mark_duplicates(proposal_rows(jobs, results, mode=cfg.mode, n_inputs=cfg.code_f_inputs), known)


def _type_counts(pool: list[dict], types: Iterable[str]) -> dict[str, int]:
    return {t: sum(p["type"] == t for p in pool) for t in types}


def reuse_pool(pool_file: str | Path, params, sandbox, log) -> list[dict]:
    """The tasks of `pool_file` (a pool made before: the file `heldout.pool_file` names) that the sandbox
    verifies again with the same outputs, the first `heldout.per_type` of each type (their worked examples
    as they were made)."""
    made = read_jsonl(pool_file)
    fields = ("task_id", "type", "program", "inputs", "message")

    def verify(rows: list[dict]) -> list[dict]:
        checks = [{k: row.get(k) for k in fields} for row in rows]
        return verify_rows(checks, params.verify, sandbox=sandbox, code_f_inputs=params.propose.code_f_inputs)

    kept, counts = first_alike(made, pool_types(params.propose.types), params.heldout.per_type, verify)
    log.info(
        "reused %s: %d tasks kept %s, %d left out (beyond per_type, another type, or not verified again alike)",
        pool_file,
        len(kept),
        counts,
        len(made) - len(kept),
    )
    if any(count < params.heldout.per_type for count in counts.values()):
        log.warning("held-out pool short: %s of %d per type in %s", counts, params.heldout.per_type, pool_file)
    return kept


def first_alike(
    made: list[dict], types: Iterable[str], per_type: int, verify: Callable[[list[dict]], list[dict]]
) -> tuple[list[dict], dict[str, int]]:
    """The first `per_type` rows of each of `types`, in file order, that `verify` finds valid with the outputs
    they were made with, and the count of each type. Rows are verified in file order, each round only as many
    of a type as it still lacks: a small pool taken from a big file (a test's or a pilot's) verifies the rows it
    may keep, not the whole file (the rows kept are those of verifying every row first)."""
    counts = dict.fromkeys(types, 0)
    kept: list[int] = []
    rest = [k for k, row in enumerate(made) if row.get("type") in counts]  # indices into `made`, in file order
    while rest and any(count < per_type for count in counts.values()):
        lacking = {t: per_type - count for t, count in counts.items()}
        batch, later = [], []
        for k in rest:
            task_type = made[k]["type"]
            if lacking[task_type] > 0:
                batch.append(k)
                lacking[task_type] -= 1
            elif counts[task_type] < per_type:
                later.append(k)  # verified in a later round, should this one leave its type short
        for k, check in zip(batch, verify([made[k] for k in batch])):
            if check["valid"] and check["outputs"] == made[k].get("outputs"):
                kept.append(k)
                counts[made[k]["type"]] += 1
        rest = later
    return [made[k] for k in sorted(kept)], counts
