"""Task logic on top of the sandbox: validity of proposals and grading of answers (AZR code_o/i/f).

    rows = verify_rows([{"task_id": "t1", "type": "code_o", "program": "def f(a):\n    return a",
                         "inputs": ["'Hello world'"], "message": None}])
    rows[0]["valid"], rows[0]["outputs"]            # True, ["'Hello world'"]
    graded = grade_rows(rows, [{"task_id": "t1", "answer": "'Hello world'"}])   # correct: True

    config = params.verify                          # the `verify` section: limits, workers, required_layers
    with sandbox_for(config) as box:                # reuse one worker pool across calls
        verify_rows(rows, config, sandbox=box); grade_rows(tasks, answers, config, sandbox=box)

Modules, by concern:
  * rules.py    the static AST rules (forbidden modules/builtins/attributes, value expressions);
  * validity.py verify_rows: static rules, then two executions (VERIFY_REASONS);
  * grading.py  grade_rows: one grader per task type, GRADERS (GRADE_REASONS);
  * baselines.py the copy and echo answers (what reads only what a task shows), graded;
  * families.py verified tasks of a split of the task families (populora/tasks/): the warm start's and the pool's;
  * pool.py     the sandbox helper both share: limits from the `verify` section (the one source
                of their defaults), the pool, verify.required_layers (IsolationError).
Seed rows live with the other task data in populora.tasks.tasks.

Verify reasons: VERIFY_REASONS; grade reasons: GRADE_REASONS (null when correct). Output rows
also carry "reason_detail" (human-readable: exception type and message, which input, ...).
"""

from populora.verifier.grading import GRADE_REASONS, GRADERS, grade_rows
from populora.verifier.pool import (
    IsolationError,
    ensure_isolation,
    isolation_report,
    limits_of,
    log_layers,
    open_sandbox,
    sandbox_for,
    verify_config,
)
from populora.verifier.rules import (
    FORBIDDEN_ATTRIBUTES,
    FORBIDDEN_MODULES,
    FORBIDDEN_NAMES,
    MAX_INPUT_CHARS,
    MAX_PROGRAM_CHARS,
    static_check,
)
from populora.verifier.validity import VERIFY_REASONS, judge_runs, verify_rows

__all__ = [
    "FORBIDDEN_ATTRIBUTES",
    "FORBIDDEN_MODULES",
    "FORBIDDEN_NAMES",
    "GRADERS",
    "GRADE_REASONS",
    "MAX_INPUT_CHARS",
    "MAX_PROGRAM_CHARS",
    "VERIFY_REASONS",
    "IsolationError",
    "ensure_isolation",
    "grade_rows",
    "isolation_report",
    "judge_runs",
    "limits_of",
    "log_layers",
    "open_sandbox",
    "sandbox_for",
    "static_check",
    "verify_config",
    "verify_rows",
]
