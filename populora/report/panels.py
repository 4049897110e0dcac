"""The one list of training-dynamics panels, shared by the DVC plots (workflow/plots.py, drawn by
`dvc plots show`) and the PNG figure of the report (populora/report/dynamics.py, `dynamics.png`).

A panel is an id, a title and the fields of `results/<arm>/dynamics.json` it draws (one line per
field in DVC, one subplot per field in the PNG, arms overlaid). Rates have sample sizes in the same
row (`RATE_COUNTS`), so the PNG draws their 95% Wilson bands and the n of every point.
"""

from __future__ import annotations

from dataclasses import dataclass

from populora.core.sections import TASK_TYPES

TYPE_TITLES = {"code_o": "deduction (code_o)", "code_i": "abduction (code_i)", "code_f": "induction (code_f)"}


@dataclass(frozen=True)
class Panel:
    id: str
    title: str
    fields: tuple[str, ...]
    field_titles: tuple[str, ...]  # one subplot title per field in the PNG


PANELS: tuple[Panel, ...] = (
    Panel(
        "heldout",
        "Held-out pool accuracy, greedy (populora/heldout/)",
        ("heldout.students.accuracy", "heldout.teachers.accuracy", "heldout.base.accuracy"),
        ("held-out accuracy, students", "held-out accuracy, teachers", "held-out accuracy, base model"),
    ),
    Panel(
        "solve_rate",
        "Student solve rate per task type",
        tuple(f"{t}.solve_rate" for t in TASK_TYPES),
        tuple(f"solve rate, {TYPE_TITLES[t]}" for t in TASK_TYPES),
    ),
    Panel(
        "validity",
        "Proposal validity rate",
        tuple(f"{t}.validity_rate" for t in TASK_TYPES),
        tuple(f"valid proposals, {TYPE_TITLES[t]}" for t in TASK_TYPES),
    ),
    Panel(
        "rewards",
        "Mean reward per role",
        ("teacher_reward_mean", "student_reward_mean"),
        ("mean proposer (teacher) reward", "mean solver (student) reward"),
    ),
    Panel(
        "complexity",
        "Complexity of valid code_o programs",
        ("code_o.program.ast_depth", "code_o.program.cyclomatic_complexity", "code_o.program.loc"),
        ("AST depth, code_o", "cyclomatic complexity, code_o", "lines of code, code_o"),
    ),
    Panel(
        "diversity",
        "Member diversity per sub-population (populora/population/diversity.py)",
        (
            "diversity.students.weight_distance",
            "diversity.teachers.weight_distance",
            "diversity.students.verdict_agreement",
        ),
        (
            "students' pairwise weight distance, ||dW_i - dW_j|| / mean norm",
            "teachers' pairwise weight distance",
            "students' held-out verdict agreement (1: clones)",
        ),
    ),
    Panel(
        "coverage",
        "Problem-space coverage (compute-matched views first)",
        ("coverage.new_per_proposal", "coverage.matched.distinct_programs", "coverage.distinct_programs"),
        (
            "new distinct programs per proposal",
            "cumulative distinct programs, one adapter's proposals per generation",
            "cumulative distinct programs, all proposals (grows with the number of teachers)",
        ),
    ),
)

# Across arms (one line per arm): (id, field, title).
COMPARISONS: tuple[tuple[str, str, str], ...] = (
    ("validity_rate", "validity_rate", "Proposal validity rate, all types"),
    ("solve_rate", "solve_rate", "Student solve rate, all types"),
    ("heldout", "heldout.students.accuracy", "Students' held-out pool accuracy (greedy)"),
    ("teacher_reward", "teacher_reward_mean", "Mean teacher reward"),
    ("student_reward", "student_reward_mean", "Mean student reward"),
)

# Sample size behind a rate: (successes, n) suffixes of the same row.
RATE_COUNTS = {
    "solve_rate": ("solved", "attempts"),
    "validity_rate": ("valid", "proposals"),
    "accuracy": ("correct", "n"),
}


def sample_size_keys(key: str) -> tuple[str | None, str] | None:
    """`code_o.solve_rate` -> (`code_o.solved`, `code_o.attempts`); `code_o.program.loc` ->
    (None, `code_o.program.n`): complexity is a mean over the valid programs; None when unknown."""
    head, _, tail = key.rpartition(".")
    if head and tail in RATE_COUNTS:
        hits, total = RATE_COUNTS[tail]
        return f"{head}.{hits}", f"{head}.{total}"
    if ".program." in key:  # a mean over the valid programs of that type (populora.rl.generation_metrics)
        return None, f"{key.split('.program.', 1)[0]}.program.n"
    return None
