"""The rows that cross stages, typed once: what each JSONL artifact of a generation holds.

    proposals.jsonl   Proposal       propose -> verify              one teacher completion, parsed
    tasks.jsonl       Task           verify -> solve, reward, checkpoint   a Proposal with the verifier's verdict
    solve_tasks.jsonl SolveTask      solve -> grade                 the tasks a student attempted (buffer fill-ins too)
    answers.jsonl     Answer         solve -> grade                 one student completion, parsed
    graded.jsonl      GradedAnswer   grade -> reward                an Answer with the grader's verdict
    rollouts.jsonl    Rollout        reward -> update               one completion with its reward and advantage
    buffer.jsonl      BufferEntry    init, checkpoint -> propose, solve   a valid task kept for references and fill-ins

Stages write these files with `write_rows(path, rows, Model)` and read them with
`read_rows(path, Model)`: every row is checked against its model (unknown keys, missing keys and
wrong types fail, naming the file, the line, the field and the fix), so a change to a row's shape
is made here and caught at the first door it crosses, not three stages later as a KeyError. The
rows themselves stay plain dicts (the pure functions in populora/ take and return them); a row is
written exactly as given, so artifacts are byte-for-byte what they were before these models.

The sandboxed stages (verify, grade) read their input leniently on purpose: a row that is not even
JSON is recorded with a reason (`malformed_row`), never a crash (stages/_sandbox.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from populora.core.io import ArtifactError, iter_jsonl, write_jsonl


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Segment(Row):
    """One piece of a generation (populora/lm/sampling.py): a context piece (`train: false`: the
    prompt, a prefill) or a sampled piece with what the update needs to score it again."""

    text: str
    train: bool
    ids: list[int]
    keep: int | None = None
    logprobs: list[float] | None = None
    sampling: dict | None = None


class Proposal(Row):
    """A teacher's completion parsed into a candidate task (populora/tasks/roles.py `proposal_rows`)."""

    task_id: str
    type: str
    teacher: str
    arm: str
    gen: int
    origin: str
    program: str | None
    inputs: list[str]
    message: str | None
    parse_reason: str | None  # why the completion is no task (`duplicate`, `no_program`, ...); None when parsed
    segments: list[Segment]
    tokens: int
    references: list[str] | None = None  # code_i / code_o: the buffer tasks shown as references
    source_task: str | None = None  # code_f: the buffer task whose program the teacher brings inputs for


class Task(Proposal):
    """A proposal with the verifier's verdict (populora/verifier/validity.py `verify_rows`)."""

    valid: bool
    reason: str | None
    reason_detail: str | None = None
    outputs: list[str]


class BufferEntry(Row):
    """A valid task kept in the arm's buffer (populora/tasks/tasks.py `BUFFER_FIELDS`)."""

    task_id: str
    type: str
    program: str | None
    inputs: list[str]
    outputs: list[str]
    message: str | None
    gen: int | None
    origin: str | None
    teacher: str | None


class SolveTask(BufferEntry):
    """A task as a student saw it (stages/solve.py `TASK_FIELDS`): proposed this generation or a buffer fill-in."""

    author: str | None
    valid: bool


class Answer(Row):
    """A student's completion parsed into an answer (stages/solve.py, populora/tasks/roles.py `solver_jobs`)."""

    answer_id: str
    task_id: str
    type: str
    student: str
    sample: int
    teacher: str | None
    task_origin: str | None
    task_gen: int | None
    examples: list[str]
    answer: str | None
    parse_reason: str | None
    segments: list[Segment]
    tokens: int


class GradedAnswer(Answer):
    """An answer with the grader's verdict (populora/verifier/grading.py `grade_rows`)."""

    correct: bool
    reason: str | None
    reason_detail: str | None = None


class Rollout(Row):
    """One completion to train on (populora/rl/rollouts.py `build_rollouts`): a proposal (`role: propose`)
    or an answer (`role: solve`) with its reward and TRR++ advantage."""

    adapter: str
    role: str
    type: str
    task_id: str
    segments: list[Segment]
    tokens: int
    # None for a valid proposal no student attempted (pairing left its teacher's tasks unplayed):
    # no solve rate, so no reward, no advantage and no gradient (populora/rl/rewards.py)
    reward: float | None
    advantage: float | None
    solve_rate: float | None = None  # propose: the fraction of the students' attempts that were correct
    answer_id: str | None = None  # solve
    correct: bool | None = None  # solve


def _problem(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "the row"
    return f"{where}: {first['msg']}" + (f" ({len(error.errors())} problems)" if len(error.errors()) > 1 else "")


def check_row(row: dict, model: type[Row]) -> dict:
    """`row` when it has `model`'s shape; else ValueError naming the field."""
    try:
        model.model_validate(row)
    except ValidationError as error:
        raise ValueError(f"not a {model.__name__} row: {_problem(error)}") from None
    return row


def write_rows(path: str | Path, rows: Iterable[dict], model: type[Row]) -> None:
    """Write `rows` (JSONL, atomically) after checking each against `model`; a row of the wrong shape
    is a bug in the stage writing it, and fails before anything is written."""
    rows = list(rows)
    for index, row in enumerate(rows):
        try:
            check_row(row, model)
        except ValueError as error:
            raise ValueError(
                f"{path}: row {index} ({row.get('task_id', '?')}) {error}. Fix: the stage writing "
                f"{Path(path).name} must write populora.core.rows.{model.__name__} rows."
            ) from None
    write_jsonl(path, rows)


def read_rows(path: str | Path, model: type[Row]) -> list[dict]:
    """Every row of a JSONL artifact, each checked against `model`."""
    rows = []
    for line, row in enumerate(iter_jsonl(path), start=1):
        try:
            rows.append(check_row(row, model))
        except ValueError as error:
            raise ArtifactError(
                f"{path} line {line}: {error}. Fix: it was written by another version of the "
                "pipeline or edited by hand; rerun the stage that writes it "
                "(snakemake reruns it by itself; dvc: dvc repro -f STAGE)."
            ) from None
    return rows
