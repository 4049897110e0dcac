"""What teachers are asked to propose and students to solve, as pure functions over plain data.

`proposer_jobs` and `solver_jobs` return (row metadata, Plan) pairs; the propose and solve stages
only add the model. Keeping this pure makes the prompts, the reference sampling and the
task assignment testable without a model.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from populora.core.sections import TASK_TYPES
from populora.tasks import prompts
from populora.tasks.parsing import parse_proposal
from populora.tasks.tasks import (
    is_valid_task,
    mark_duplicates,
    newest_first,
    pair_buffer,
    pair_of,
    program_key,
    sample_code_f_program,
    sample_references,
)

BANNED_FOR_PROMPT = [
    "logging",
    "random",
    "multiprocessing",
    "subprocess",
    "threading",
    "datetime",
    "time",
    "hashlib",
    "os",
    "sys",
]


def make_plan(prompt: str, steps: list[prompts.Step], mode: str, chat: Callable[[str], str], task_type: str, role: str):
    if mode == "free_form":
        return prompts.free_form_plan(prompt + prompts.free_form_suffix(task_type, role))
    return prompts.scaffolded_plan(prompt, steps, chat)


def buffer_of(
    buffer: list[dict], pairing: dict | None, *, teacher: str | None = None, student: str | None = None
) -> list[dict]:
    """What a teacher or a student may read of the buffer: all of it, or under `pairs` its pair's
    part (`pair_buffer`)."""
    pairs = pair_of(pairing)
    if pairs is None:
        return buffer
    if teacher is None:
        teacher = next((t for t, s in pairs.items() if s == student), None)
        if teacher is None:
            raise KeyError(f"student {student!r} is in no pair of {pairs}")
    return pair_buffer(buffer, teacher)


def mark_pair_duplicates(proposals: list[dict], buffer: list[dict], pairing: dict | None) -> list[dict]:
    """`mark_duplicates` against the buffer each proposal's teacher reads: under `pairs` a program
    another pair already has is no duplicate (the pairs know nothing of each other)."""
    if pair_of(pairing) is None:
        return mark_duplicates(proposals, buffer)
    marked: dict[int, dict] = {}
    for teacher in dict.fromkeys(row["teacher"] for row in proposals):
        mine = [i for i, row in enumerate(proposals) if row["teacher"] == teacher]
        rows = mark_duplicates([proposals[i] for i in mine], buffer_of(buffer, pairing, teacher=teacher))
        marked |= dict(zip(mine, rows))
    return [marked[i] for i in range(len(proposals))]


def proposer_jobs(
    teachers: list[str],
    buffer: list[dict],
    *,
    per_type: int,
    references: int,
    n_inputs: int,
    mode: str,
    chat: Callable[[str], str],
    rng: random.Random,
    arm: str,
    gen: int,
    types: Sequence[str] = TASK_TYPES,
    pairing: dict | None = None,
) -> list[tuple[dict, prompts.Plan]]:
    """Every teacher's proposal jobs: reference tasks and code_f programs drawn from the buffer it
    reads (`buffer_of`: all of it, or under `pairs` the seeds and its own pair's tasks)."""
    jobs = []
    full = buffer
    for teacher in teachers:
        buffer = buffer_of(full, pairing, teacher=teacher)
        for task_type in types:
            for k in range(per_type):
                meta = {
                    "task_id": f"{arm}-g{gen:03d}-{teacher}-{task_type}-{k}",
                    "type": task_type,
                    "teacher": teacher,
                    "arm": arm,
                    "gen": gen,
                    "origin": "proposed",
                }
                if task_type == "code_f":
                    source = sample_code_f_program(buffer, rng)
                    meta["program"] = source["program"]
                    meta["source_task"] = source["task_id"]
                    prompt = prompts.proposer_f_prompt(source["program"], n_inputs, source.get("inputs"))
                else:
                    refs = sample_references(buffer, task_type, references, rng)
                    meta["references"] = [r["task_id"] for r in refs]
                    example = prompts.AZR_IO_EXAMPLE if mode == "free_form" else None
                    prompt = prompts.proposer_io_prompt(task_type, refs, BANNED_FOR_PROMPT, example)
                jobs.append(
                    (
                        meta,
                        make_plan(
                            prompt, prompts.proposer_steps(task_type, n_inputs), mode, chat, task_type, "propose"
                        ),
                    )
                )
    return jobs


def teacher_slots(pairing: dict, student: str) -> list[str]:
    """The teachers a student serves this generation, one entry per slot (PFSP may give a student
    more than `solve.tasks_per_type` slots when teachers outnumber student slots: every teacher
    gets at least one student, so none of those slots is dropped)."""
    return [t for t in pairing["teachers"] for _ in range(pairing["counts"][t][student])]


def fill_in_order(buffer: list[dict], task_type: str, fill_in: str, rng: random.Random | None) -> list[dict]:
    """The buffer tasks of a type in the order fill-ins take them: `newest` first (the newest
    generation's tasks, then older ones, the seeds last), or `uniform`: a seeded random order over
    the whole buffer (AZR samples fill-ins uniformly, so the identity seed is not everyone's first)."""
    if fill_in == "newest":
        return newest_first(buffer, task_type)
    if fill_in != "uniform" or rng is None:
        raise ValueError(f"fill_in must be 'newest' or 'uniform' (with an rng), got {fill_in!r}")
    pool = [t for t in buffer if t["type"] == task_type]
    rng.shuffle(pool)
    return pool


def assign_tasks(
    pairing: dict,
    tasks: list[dict],
    buffer: list[dict],
    *,
    fill_in: str = "newest",
    rng: random.Random | None = None,
    types: tuple[str, ...] = TASK_TYPES,
) -> dict[str, dict[str, list[dict]]]:
    """students -> type -> tasks. Slot j of a student solves a task of the teacher in that slot,
    preferring that teacher's tasks no student has been given yet. When the teacher has no valid
    task of the type, the slot is filled from the buffer (`fill_in_order`: newest first, AZR's
    `max_new`, or uniformly): such a fill-in is marked `origin: "buffer"` with no `teacher` (its
    old author is `author`), so it is no game and earns nobody a reward."""
    valid = [t for t in tasks if is_valid_task(t)]
    given: dict[str, int] = {}
    assignment: dict[str, dict[str, list[dict]]] = {}
    for student in pairing["students"]:
        slots = teacher_slots(pairing, student)
        readable = buffer_of(buffer, pairing, student=student)  # under `pairs`: the seeds and its pair's tasks
        assignment[student] = {}
        for task_type in types:
            chosen: list[dict] = []
            fill = iter(fill_in_order(readable, task_type, fill_in, rng))
            for teacher in slots:
                own = [t for t in valid if t["teacher"] == teacher and t["type"] == task_type and t not in chosen]
                if own:
                    task = min(own, key=lambda t: given.get(t["task_id"], 0))
                else:
                    used = {t["task_id"] for t in chosen}
                    entry = next((b for b in fill if b["task_id"] not in used), None)
                    if entry is None:
                        continue
                    task = {**entry, "origin": "buffer", "teacher": None, "author": entry.get("teacher")}
                given[task["task_id"]] = given.get(task["task_id"], 0) + 1
                chosen.append(task)
            assignment[student][task_type] = chosen
    return assignment


def worked_example_pool(task: dict, buffer: list[dict]) -> list[dict]:
    """Buffer tasks of the task's type that may be shown as worked examples: never one with the
    same normalised program (whatever its type or input), which would hand over the answer."""
    key = program_key(task.get("program"))
    return [
        b
        for b in buffer
        if b["type"] == task["type"]
        and b["task_id"] != task["task_id"]
        and (key is None or program_key(b.get("program")) != key)
    ]


def solver_jobs(
    assignment: dict[str, dict[str, list[dict]]],
    buffer: list[dict],
    *,
    samples: int,
    worked_examples: int,
    mode: str,
    chat: Callable[[str], str],
    rng: random.Random,
    pairing: dict | None = None,
) -> list[tuple[dict, prompts.Plan]]:
    """Every student's answer jobs, worked examples drawn from the buffer it reads (`buffer_of`)."""
    jobs = []
    for student, by_type in assignment.items():
        readable = buffer_of(buffer, pairing, student=student)
        for task_type, tasks in by_type.items():
            for task in tasks:
                pool = worked_example_pool(task, readable)
                for sample in range(samples):
                    # A fresh draw of worked examples per sample: a fixed example gets copied.
                    examples = rng.sample(pool, min(worked_examples, len(pool)))
                    prompt = prompts.solver_prompt(task, examples)
                    meta = {
                        "answer_id": f"{task['task_id']}:{student}:{sample}",
                        "task_id": task["task_id"],
                        "type": task_type,
                        "student": student,
                        "sample": sample,
                        "teacher": task.get("teacher"),
                        "task_origin": task.get("origin"),
                        "task_gen": task.get("gen"),
                        "examples": [e["task_id"] for e in examples],
                    }
                    jobs.append(
                        (meta, make_plan(prompt, prompts.solver_steps(task_type), mode, chat, task_type, "solve"))
                    )
    return jobs


def proposal_rows(jobs, results, *, mode: str, n_inputs: int) -> list[dict]:
    """Parsed proposal rows (verifier input plus provenance and the raw segments), one per job."""
    rows = []
    for (meta, _), result in zip(jobs, results):
        parsed = parse_proposal(
            result.completion, meta["type"], mode=mode, n_inputs=n_inputs, truncated=result.truncated
        )
        if meta["type"] == "code_f":
            parsed["program"] = meta["program"]  # code_f proposals bring inputs + message for a buffer program
        rows.append({**meta, **parsed, "segments": result.segments, "tokens": result.tokens_generated})
    return rows
