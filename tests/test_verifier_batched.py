"""Many answers per task graded in one sandbox job (populora/verifier/batched.py): the same verdicts as
`grade_rows` one answer at a time, on generated pool tasks and on a program that times out, and a cache that
spares the sandbox a second time."""

import pytest

from populora.config import VerifySection
from populora.verifier import grade_rows, sandbox_for
from populora.verifier.baselines import SIMPLE_CONSTANTS as SIMPLE_VALUES
from populora.verifier.batched import accepted_answers
from populora.verifier.families import verified_tasks

GARBAGE = ["(", "f(1)", "__import__('os')", "x", "1, 2, 3, 4, 5, 6", "a=1", "*[1]"]


@pytest.fixture(scope="module")
def sandbox():
    with sandbox_for(VerifySection()) as box:
        yield box


def _one_at_a_time(tasks, answers, config, sandbox):
    rows = [{"task_id": t["task_id"], "answer": a} for t in tasks for a in answers[t["task_id"]]]
    graded = grade_rows([{**t, "valid": True} for t in tasks], rows, config, sandbox=sandbox)
    out = {t["task_id"]: [] for t in tasks}
    for row in graded:
        if row["correct"]:
            out[row["task_id"]].append(row["answer"])
    return out


def test_batched_verdicts_equal_the_grader_one_answer_at_a_time(sandbox):
    config = VerifySection()
    tasks = verified_tasks("pool", 40, seed=3, config=config, sandbox=sandbox)
    golds = sorted({t["inputs"][0] for t in tasks} | {t["outputs"][0] for t in tasks})
    answers = {t["task_id"]: [*SIMPLE_VALUES, *golds, *GARBAGE] for t in tasks}
    batched = accepted_answers(tasks, answers, config, sandbox)
    alone = _one_at_a_time(tasks, answers, config, sandbox)
    assert batched == alone
    # the comparison is not empty: both types, and answers accepted beside the gold
    assert {t["type"] for t in tasks} == {"code_o", "code_i"}
    assert sum(len(v) for v in alone.values()) > len(tasks)


def test_a_batch_that_times_out_is_graded_again_one_answer_at_a_time(sandbox):
    config = VerifySection(timeout_s=0.5)
    task = {
        "task_id": "loop",
        "type": "code_i",
        "program": "def f(x):\n    while x == 5:\n        pass\n    return x",
        "inputs": ["3"],
        "outputs": ["3"],
        "message": None,
    }
    answers = {"loop": ["5", "3", "4", "3.0"]}
    assert accepted_answers([task], answers, config, sandbox) == {"loop": ["3", "3.0"]}


def test_the_cache_answers_without_the_sandbox(sandbox):
    config = VerifySection()
    tasks = verified_tasks("pool", 6, seed=5, config=config, sandbox=sandbox)
    answers = {t["task_id"]: ["0", "1", "''", t["inputs"][0], t["outputs"][0]] for t in tasks}
    cache: dict = {}
    first = accepted_answers(tasks, answers, config, sandbox, cache)
    assert cache and all(t["inputs"][0] in first[t["task_id"]] or t["type"] == "code_o" for t in tasks)

    class NoSandbox:
        def submit(self, job):
            raise AssertionError("the cache should have answered")

    assert accepted_answers(tasks, answers, config, NoSandbox(), cache) == first


def test_a_batch_gets_the_time_of_a_few_jobs_not_one_per_answer(sandbox):
    """Hundreds of constants in one job with a budget per answer let one slow constant (a large int handed to a loop)
    hold a job for many minutes; the job gets BATCH_BUDGET_CALLS jobs' time, and its answers are regraded alone."""
    from populora.verifier.batched import BATCH_BUDGET_CALLS

    submitted = []

    class Recording:
        def submit(self, job):
            submitted.append(job)
            return sandbox.submit(job)

        def __getattr__(self, name):
            return getattr(sandbox, name)

    config = VerifySection(timeout_s=0.5)
    task = {
        "task_id": "loop",
        "type": "code_i",
        "program": "def f(x):\n    while x == 5:\n        pass\n    return x",
        "inputs": ["3"],
        "outputs": ["3"],
        "message": None,
    }
    answers = {"loop": ["5", *(str(k) for k in range(6, 206)), "3"]}
    assert accepted_answers([task], answers, config, Recording()) == {"loop": ["3"]}
    batched = [job for job in submitted if len(job.calls) > 1]
    assert batched and all(job.limits.timeout_s <= BATCH_BUDGET_CALLS * 0.5 for job in batched)
