"""The held-out pool: a frozen set of verified code_o/code_i tasks that no adapter ever proposes,
solves or trains on, answered greedily by every member (and the base) at every generation.

The pool is made once per study by the base model in the teacher's role (the project's proposer
prompt, references from the seed tasks and the pool so far, `heldout.seed`, independent of
`base.seed`, so every run of a study shares it; `stages.heldout_pool`). A proposal enters when it
is valid, not copyable (echoing what the task shows would be right: the project's copy rule), and
its normalised program is neither a seed's nor already in the pool. Each pool task carries its own
worked examples (seed tasks, drawn once), so the prompt of a task is the same for every member,
arm and generation and verdicts pair task by task. During the run the verify stage makes any
proposal whose program is a pool program invalid (`reason: heldout`, `mark_heldout`), so no pool
program reaches a buffer, a student or an update.

    pool = accept_into_pool(pool, verified_rows, seeds, per_type=128)
    jobs = scoring_jobs(pool, ["population-student0", None], mode="scaffolded", chat=chat)
    verdicts = verdict_table(graded_rows)                         # member -> task_id -> 0/1
    metrics = heldout_metrics(verdicts, pool, {"students": [...], "teachers": [...]})
"""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterable
from statistics import mean

from populora.core.progress import Progress
from populora.selfplay import prompts
from populora.selfplay.parsing import parse_answer
from populora.selfplay.roles import make_plan, worked_example_pool
from populora.selfplay.tasks import is_copyable, program_key, program_keys
from populora.verifier import grade_rows

HELDOUT_TYPES = ("code_o", "code_i")  # a code_f answer is a program: scored by hidden pairs, not in the pool
BASE = "base"  # the member name of the bare base model in verdict tables
POOL_FIELDS = ("task_id", "type", "program", "inputs", "outputs", "message")


def pool_types(types: Iterable[str]) -> tuple[str, ...]:
    """The trained task types a pool holds (code_o and code_i among `propose.types`)."""
    return tuple(t for t in types if t in HELDOUT_TYPES)


def accept_into_pool(pool: list[dict], verified: list[dict], seeds: list[dict], *, per_type: int,
                     types: Iterable[str] = HELDOUT_TYPES) -> list[dict]:
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
        out.append({**{k: row.get(k) for k in POOL_FIELDS}, "task_id": f"heldout-{task_type}-{index:03d}",
                    "source": row.get("task_id")})
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
            row = {**row, "valid": False, "reason": "heldout",
                   "reason_detail": "the program is a held-out pool program (populora/selfplay/heldout.py)"}
        out.append(row)
    return out


def scoring_jobs(pool: list[dict], members: list[str | None], *, mode: str,
                 chat: Callable[[str], str]) -> list[tuple[dict, prompts.Plan]]:
    """One (metadata, plan) per member and pool task: the solver's prompt with the task's own
    worked examples. `None` is the bare base model (member name `base`)."""
    jobs = []
    for member in members:
        for task in pool:
            prompt = prompts.solver_prompt(task, task.get("examples") or [])
            meta = {"answer_id": f"{task['task_id']}:{member or BASE}", "task_id": task["task_id"], "type": task["type"],
                    "student": member, "member": member or BASE}
            jobs.append((meta, make_plan(prompt, prompts.solver_steps(task["type"]), mode, chat, task["type"], "solve")))
    return jobs


def verdict_table(graded: list[dict]) -> dict[str, dict[str, int]]:
    """member -> task_id -> 1 (correct) or 0, from graded scoring rows."""
    table: dict[str, dict[str, int]] = {}
    for row in graded:
        table.setdefault(row["member"], {})[row["task_id"]] = int(bool(row.get("correct")))
    return table


def pool_task_type(task_id: str) -> str | None:
    """The task type a pool task's id names (`heldout-code_i-007` -> `code_i`, the ids `accept_into_pool`
    gives); None for an id of another form."""
    prefix, _, rest = task_id.partition("-")
    task_type, _, index = rest.rpartition("-")
    return task_type if prefix == "heldout" and task_type in HELDOUT_TYPES and index.isdigit() else None


def _rate(verdicts: dict[str, int], task_ids: list[str]) -> tuple[int, int]:
    return sum(verdicts.get(t, 0) for t in task_ids), len(task_ids)


def heldout_metrics(table: dict[str, dict[str, int]], pool: list[dict], roles: dict[str, list[str]]) -> dict:
    """Flat metrics of one evaluation: per member `heldout.<member>.accuracy`, `.correct`, `.n` and
    per type `heldout.<member>.<type>.accuracy`; per role (`students`, `teachers`: their members'
    verdicts pooled, so `.correct`/`.n` give the Wilson band) the same keys. A member without a
    verdict for a task counts it wrong."""
    ids = [t["task_id"] for t in pool]
    by_type = {tt: [t["task_id"] for t in pool if t["type"] == tt] for tt in dict.fromkeys(t["type"] for t in pool)}
    out: dict[str, float | int | None] = {}

    def put(name: str, members: list[str]) -> None:
        correct = sum(_rate(table.get(m, {}), ids)[0] for m in members)
        n = len(ids) * len(members)
        out[f"heldout.{name}.correct"], out[f"heldout.{name}.n"] = correct, n
        out[f"heldout.{name}.accuracy"] = correct / n if n else None
        for task_type, type_ids in by_type.items():
            hits = sum(_rate(table.get(m, {}), type_ids)[0] for m in members)
            out[f"heldout.{name}.{task_type}.accuracy"] = hits / (len(type_ids) * len(members)) if type_ids else None

    for member in table:
        put(member, [member])
    for role, members in roles.items():
        if members:
            put(role, list(members))
    return out


def per_task_mean(table: dict[str, dict[str, int]], members: list[str], task_ids: list[str]) -> list[float]:
    """Per task, the mean verdict of `members` (a role's score on each task, for paired comparisons)."""
    return [mean(table.get(m, {}).get(t, 0) for m in members) for t in task_ids]


def score_members(params, model, tokenizer, pool: list[dict], members: list[str | None],
                  roles: dict[str, list[str]], sandbox) -> tuple[dict, dict]:
    """(metrics, verdict table) of `members` (adapter names on `model`; None: the bare base) on `pool`,
    greedy, with the solver's settings (`solve.mode`, `solve.max_new_tokens`, `solve.batch_size`)."""
    # the model's side is imported here, where the pool is scored: verify and the report use this module
    # (pool keys, per-task means) without loading torch, seconds per job
    from populora.lm.sampling import GenRow, run_plans

    cfg = params.solve
    jobs = scoring_jobs(pool, members, mode=cfg.mode, chat=prompts.chat_wrapper(tokenizer))
    results = run_plans(model, tokenizer, [GenRow(plan, meta["student"]) for meta, plan in jobs], temperature=0.0,
                        top_p=1.0, max_new_tokens=cfg.max_new_tokens, batch_size=cfg.batch_size, seed=0, desc="heldout")
    rows = []
    for (meta, _), result in zip(jobs, results):
        answer, reason = parse_answer(result.completion, meta["type"], mode=cfg.mode, truncated=result.truncated)
        rows.append({**meta, "answer": answer, "parse_reason": reason})
    with Progress(len(rows), "heldout grading", unit="answers", log=logging.getLogger("heldout")) as progress:
        table = pool_verdicts(pool, rows, params.verify, sandbox=sandbox, progress=progress.update)
    return heldout_metrics(table, pool, roles), table


def pool_verdicts(pool: list[dict], rows: list[dict], config, *, sandbox=None, progress=None) -> dict[str, dict[str, int]]:
    """member -> task_id -> 1 or 0: answer rows (`task_id`, `member`, `answer`) graded against the pool.
    Pool tasks were verified when the pool was made; their rows keep only the task's fields, so they are
    marked valid here (the grader answers `unknown_task`, never correct, for a task not marked valid)."""
    tasks = [{**task, "valid": True} for task in pool]
    return verdict_table(grade_rows(tasks, rows, config, sandbox=sandbox, progress=progress))
