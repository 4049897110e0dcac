"""Many answers to one task graded at once: what the pool's best-constant check needs (every tried value against
every task of a pool), at the cost of one sandbox job per task instead of one per answer.

    accepted = accepted_answers(tasks, {task_id: [answer, ...]}, params.verify, sandbox, cache={})

`code_i` answers of a task run as the calls of one job (the program executed once, each answer's call compared
with the gold output); what passes there, and every answer of a job that did not finish (a timeout, a crash),
is graded again alone by `grade_rows`, so an accepted answer is exactly one the grader accepts. A rejection in
the batch stands: the pool's programs are pure functions of their arguments (a program whose calls changed its
own globals could make a later call of the batch fail where alone it would pass). `code_o` answers that are
literals compare in this process (`grade_rows`' own fast path), the rest go to `grade_rows`.

`cache` ((program, gold output, type, answer) -> accepted) carries verdicts across calls: the ruler's rounds
re-check a pool that differs from the last one in a few tasks.
"""

from __future__ import annotations

import ast
from dataclasses import replace

from populora.sandbox import Call, Job
from populora.verifier.grading import grade_rows
from populora.verifier.pool import limits_of
from populora.verifier.rules import answer_names, call_source, parse_arguments, values_only

BATCH_BUDGET_CALLS = 4  # a batched job's CPU and wall limits: this many times one job's (well within for quick calls)


def _key(task: dict, answer: str) -> tuple:
    return task["program"], task["outputs"][0], task["type"], answer


def _batchable(answer: str, names: frozenset[str]) -> bool:
    """An argument list of value expressions (what `grade_code_i` would run)."""
    call = parse_arguments(answer)
    return call is not None and values_only(call, names)


def _batched(tasks: list[dict], todo: dict[str, list[str]], config, sandbox) -> set[tuple[str, str]]:
    """The (task_id, answer) pairs of `code_i` tasks that one job per task rejected: the answers of a job that
    ended `ok` whose call did not equal the gold output."""
    limits = limits_of(config)
    futures = []
    for task in tasks:
        if task["type"] != "code_i" or not todo.get(task["task_id"]):
            continue
        names = answer_names(ast.parse(task["program"]))
        batch = [a for a in todo[task["task_id"]] if _batchable(a, names)]
        if batch:
            calls = tuple(Call(call_source(a), expect=task["outputs"][0]) for a in batch)
            # the job gets the time of at most BATCH_BUDGET_CALLS jobs alone, not one per call: a constant such as a
            # large int handed to `range` runs one call for as long as it may, and with hundreds of calls a budget per
            # call let one such job run for many minutes (pool v3's constants: 3 min and more). A job past its budget
            # ends `timeout`, and its answers are regraded one by one (`accepted_answers`), each with its own limit
            share = min(len(batch), BATCH_BUDGET_CALLS)
            wall = limits.wall_timeout_s and limits.wall_timeout_s * share
            job_limits = replace(limits, timeout_s=limits.timeout_s * share, wall_timeout_s=wall)
            futures.append((task["task_id"], batch, sandbox.submit(Job(task["program"], calls, limits=job_limits))))
    rejected = set()
    for task_id, batch, future in futures:
        run = future.result()
        if run.status == "ok":
            rejected |= {(task_id, a) for a, call in zip(batch, run.calls) if not (call.status == "ok" and call.equal)}
    return rejected


def accepted_answers(
    tasks: list[dict], answers: dict[str, list[str]], config, sandbox, cache: dict | None = None
) -> dict[str, list[str]]:
    """task_id -> the answers of `answers[task_id]` the grader accepts (`code_o` and `code_i` tasks with gold
    outputs), in their order."""
    cache = {} if cache is None else cache
    by_id = {t["task_id"]: t for t in tasks}
    todo = {t["task_id"]: [a for a in dict.fromkeys(answers[t["task_id"]]) if _key(t, a) not in cache] for t in tasks}
    rejected = _batched(tasks, todo, config, sandbox)
    for task_id, answer in rejected:
        cache[_key(by_id[task_id], answer)] = False
    rows = [
        {"task_id": task_id, "answer": answer}
        for task_id, pending in todo.items()
        for answer in pending
        if (task_id, answer) not in rejected
    ]
    for row in grade_rows([{**t, "valid": True} for t in tasks], rows, config, sandbox=sandbox) if rows else []:
        cache[_key(by_id[row["task_id"]], row["answer"])] = bool(row.get("correct"))
    return {t["task_id"]: [a for a in answers[t["task_id"]] if cache[_key(t, a)]] for t in tasks}
