"""Scoring members on the held-out pool: the solver's prompt with each task's own worked examples,
graded in the sandbox, as a verdict table `member -> task_id -> 0|1` and flat metrics.

    jobs = scoring_jobs(pool, ["student0", None], mode="scaffolded", chat=chat)
    verdicts = verdict_table(graded_rows)                         # member -> task_id -> 0/1
    metrics = heldout_metrics(verdicts, pool, {"students": [...], "teachers": [...]})
    counts = pass_counts(params, model, tokenizer, pool, members, sandbox, samples=64)   # member -> task_id -> right
    curve = pass_at_k_curve(counts["base"], 64, [1, 2, 4, 8, 16, 32, 64])               # unbiased pass@k (Chen et al.)
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from statistics import mean

from populora.core.progress import Progress
from populora.heldout.pool import BASE
from populora.tasks import prompts
from populora.tasks.parsing import parse_answer
from populora.tasks.roles import make_plan
from populora.verifier import grade_rows


def scoring_jobs(
    pool: list[dict], members: list[str | None], *, mode: str, chat: Callable[[str], str]
) -> list[tuple[dict, prompts.Plan]]:
    """One (metadata, plan) per member and pool task: the solver's prompt with the task's own
    worked examples. `None` is the bare base model (member name `base`)."""
    jobs = []
    for member in members:
        for task in pool:
            prompt = prompts.solver_prompt(task, task.get("examples") or [])
            meta = {
                "answer_id": f"{task['task_id']}:{member or BASE}",
                "task_id": task["task_id"],
                "type": task["type"],
                "student": member,
                "member": member or BASE,
            }
            jobs.append(
                (meta, make_plan(prompt, prompts.solver_steps(task["type"]), mode, chat, task["type"], "solve"))
            )
    return jobs


def verdict_table(graded: list[dict]) -> dict[str, dict[str, int]]:
    """member -> task_id -> 1 (correct) or 0, from graded scoring rows."""
    table: dict[str, dict[str, int]] = {}
    for row in graded:
        table.setdefault(row["member"], {})[row["task_id"]] = int(bool(row.get("correct")))
    return table


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


def _answer_rows(params, model, tokenizer, pool, members, *, samples: int, temperature: float, seed: int) -> list[dict]:
    """`samples` answers of each member to each pool task (the solver's settings), parsed."""
    # the model's side is imported here, where the pool is scored: verify and the report use this module
    # (pool keys, per-task means) without loading torch, seconds per job
    from populora.lm.sampling import GenRow, run_plans

    cfg = params.solve
    jobs = scoring_jobs(pool, members, mode=cfg.mode, chat=prompts.chat_wrapper(tokenizer))
    jobs = [(meta, plan) for meta, plan in jobs for _ in range(samples)]  # a task's answers side by side: one prompt
    results = run_plans(
        model,
        tokenizer,
        [GenRow(plan, meta["student"]) for meta, plan in jobs],
        temperature=temperature,
        top_p=1.0,
        max_new_tokens=cfg.max_new_tokens,
        batch_size=cfg.batch_size,
        seed=seed,
        desc="heldout" if samples == 1 else f"heldout, {samples} answers a task",
    )
    rows = []
    for (meta, _), result in zip(jobs, results):
        answer, reason = parse_answer(result.completion, meta["type"], mode=cfg.mode, truncated=result.truncated)
        rows.append({**meta, "answer": answer, "parse_reason": reason})
    return rows


def score_members(
    params, model, tokenizer, pool: list[dict], members: list[str | None], roles: dict[str, list[str]], sandbox
) -> tuple[dict, dict]:
    """(metrics, verdict table) of `members` (adapter names on `model`; None: the bare base) on `pool`,
    greedy, with the solver's settings (`solve.mode`, `solve.max_new_tokens`, `solve.batch_size`)."""
    rows = _answer_rows(params, model, tokenizer, pool, members, samples=1, temperature=0.0, seed=0)
    with Progress(len(rows), "heldout grading", unit="answers", log=logging.getLogger("heldout")) as progress:
        table = pool_verdicts(pool, rows, params.verify, sandbox=sandbox, progress=progress.update)
    return heldout_metrics(table, pool, roles) | unanswered_metrics(rows), table


def unanswered_metrics(rows: list[dict]) -> dict[str, float]:
    """`heldout.<member>.unanswered`: the share of a member's answers in which the parser found no answer
    (truncated, no answer block, no answer section): how much of a score, or of a change in it, is format.

    >>> unanswered_metrics([{"member": "s", "answer": "1"}, {"member": "s", "answer": None}])
    {'heldout.s.unanswered': 0.5}
    """
    counts: dict[str, list[int]] = {}
    for row in rows:
        count = counts.setdefault(row["member"], [0, 0])
        count[0] += 1
        count[1] += row["answer"] is None
    return {f"heldout.{member}.unanswered": round(missing / n, 6) for member, (n, missing) in counts.items()}


def pass_counts(
    params,
    model,
    tokenizer,
    pool: list[dict],
    members: list[str | None],
    sandbox,
    *,
    samples: int,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[str, dict[str, int]]:
    """member -> task_id -> how many of `samples` answers at `temperature` are correct (`pass_rates` divides
    by `samples`; `pass_at_k` turns a count into pass@k)."""
    rows = _answer_rows(params, model, tokenizer, pool, members, samples=samples, temperature=temperature, seed=seed)
    tasks = [{**task, "valid": True} for task in pool]
    with Progress(len(rows), "heldout grading", unit="answers", log=logging.getLogger("heldout")) as progress:
        graded = grade_rows(tasks, rows, params.verify, sandbox=sandbox, progress=progress.update)
    hits: dict[str, dict[str, int]] = {}
    for row in graded:
        member = hits.setdefault(row["member"], {})
        member[row["task_id"]] = member.get(row["task_id"], 0) + int(bool(row.get("correct")))
    return {
        m: {t: hits.get(m, {}).get(t, 0) for t in (task["task_id"] for task in pool)}
        for m in dict.fromkeys(meta or BASE for meta in members)
    }


def pass_rates(
    params,
    model,
    tokenizer,
    pool: list[dict],
    members: list[str | None],
    sandbox,
    *,
    samples: int,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[str, dict[str, float]]:
    """member -> task_id -> share of `samples` answers at `temperature` that are correct: the pool's
    continuous, paired measure (a greedy verdict moves only when the most likely answer flips)."""
    counts = pass_counts(
        params, model, tokenizer, pool, members, sandbox, samples=samples, temperature=temperature, seed=seed
    )
    return {m: {t: c / samples for t, c in table.items()} for m, table in counts.items()}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimate of pass@k (the chance that at least one of k answers is right) from `c`
    right answers among `n` samples (Chen et al. 2021, "Evaluating Large Language Models Trained on
    Code"): 1 - C(n - c, k) / C(n, k), computed as a product so that n = 1000 does not overflow.

    >>> pass_at_k(64, 0, 8), pass_at_k(64, 64, 1), pass_at_k(4, 1, 1), round(pass_at_k(4, 1, 2), 4)
    (0.0, 1.0, 0.25, 0.5)
    """
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    out = 1.0
    for i in range(n - c + 1, n + 1):
        out *= 1.0 - k / i
    return 1.0 - out


def pass_at_k_curve(counts: dict[str, int], n: int, ks) -> dict[int, float | None]:
    """k -> the mean over tasks of `pass_at_k(n, c, k)` (None for no task)."""
    return {k: (round(mean(pass_at_k(n, c, k) for c in counts.values()), 6) if counts else None) for k in ks}


def pass_rate_metrics(rates: dict[str, dict[str, float]], pool: list[dict], roles: dict[str, list[str]]) -> dict:
    """`heldout.<member|role>.pass_rate` (and per type): the mean of the per-task pass rates. A role's figure
    only where every member of it was sampled: a generation without pass rates (`heldout.samples: 0`, or not
    due at `heldout.sample_every`) has none, never a 0."""
    by_type = {tt: [t["task_id"] for t in pool if t["type"] == tt] for tt in dict.fromkeys(t["type"] for t in pool)}
    out: dict[str, float | None] = {}

    def put(name: str, members: list[str]) -> None:
        for suffix, ids in (("", [t["task_id"] for t in pool]), *((f".{k}", v) for k, v in by_type.items())):
            values = [rates.get(m, {}).get(t, 0.0) for m in members for t in ids]
            out[f"heldout.{name}{suffix}.pass_rate"] = round(mean(values), 6) if values else None

    for member in rates:
        put(member, [member])
    for role, members in roles.items():
        if members and all(m in rates for m in members):
            put(role, list(members))
    return out


def pool_verdicts(
    pool: list[dict], rows: list[dict], config, *, sandbox=None, progress=None
) -> dict[str, dict[str, int]]:
    """member -> task_id -> 1 or 0: answer rows (`task_id`, `member`, `answer`) graded against the pool.
    Pool tasks were verified when the pool was made; their rows keep only the task's fields, so they are
    marked valid here (the grader answers `unknown_task`, never correct, for a task not marked valid)."""
    tasks = [{**task, "valid": True} for task in pool]
    return verdict_table(grade_rows(tasks, rows, config, sandbox=sandbox, progress=progress))
