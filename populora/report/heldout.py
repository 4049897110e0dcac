"""The held-out pool in the report: per generation, each arm's students (and teachers) against the
base model and the population's students against the baseline, paired task by task.

`docs` maps an arm to its `results/dynamics/<arm>/heldout_verdicts.json` (stages/dynamics.py):
`{"base": {task_id: 0|1}, "generations": [{member: {task_id: 0|1}}, ...], "roles": {...}}`. A role's
score on a task is the mean verdict of its members, so a 2-student population and a 1-adapter
baseline pair on the same tasks; intervals are the paired bootstrap over tasks
(`populora.core.stats.paired_bootstrap`).
"""

from __future__ import annotations

from populora.core.stats import paired_bootstrap
from populora.heldout.scoring import per_task_mean
from populora.report.metrics import BASELINE, POPULATION


def _role_scores(doc: dict, gen: int, role: str, task_ids: list[str]) -> list[float] | None:
    members = doc.get("roles", {}).get(role) or []
    table = doc["generations"][gen] if gen < len(doc.get("generations", [])) else None
    if not members or table is None:
        return None
    return per_task_mean(table, members, task_ids)


def _cell(a: list[float] | None, b: list[float] | None) -> str:
    if a is None or b is None:
        return "-"
    mean, low, high = paired_bootstrap([x - y for x, y in zip(a, b)])
    return f"{100 * mean:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def _pct(values: list[float] | None) -> str:
    return "-" if not values else f"{100 * sum(values) / len(values):.1f}"


def heldout_table(docs: dict[str, dict]) -> str:
    """Markdown: one row per generation; accuracy (%) of each arm's students and of the base, and
    the paired differences in points with their 95% intervals. Empty when no arm has a pool."""
    docs = {arm: doc for arm, doc in docs.items() if doc.get("base")}
    if not docs:
        return ""
    task_ids = sorted(next(iter(docs.values()))["base"])
    base = [float(next(iter(docs.values()))["base"][t]) for t in task_ids]
    arms = [a for a in (POPULATION, BASELINE) if a in docs] + sorted(set(docs) - {POPULATION, BASELINE})
    header = ["generation", *(f"{arm} students" for arm in arms), "base",
              *(f"{arm} students - base" for arm in arms)]
    paired = POPULATION in docs and BASELINE in docs
    if paired:
        header.append("population - baseline students")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    generations = max(len(doc["generations"]) for doc in docs.values())
    for gen in range(generations):
        students = {arm: _role_scores(docs[arm], gen, "students", task_ids) for arm in arms}
        cells = [str(gen), *(_pct(students[arm]) for arm in arms), _pct(base),
                 *(_cell(students[arm], base) for arm in arms)]
        if paired:
            cells.append(_cell(students[POPULATION], students[BASELINE]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _baseline_kind(row: dict) -> str:
    """`echo` where the row has the echo baseline (code_i: the output handed back), else `copy`."""
    return "echo" if "echo_correct" in row else "copy"


def constant_line(docs: dict[str, dict]) -> str:
    """What a score on the pool stands beside: per type, the best single constant answer's score and the copy
    (code_o) or echo (code_i) baseline's, computed on the pool by the heldout_pool stage (`best_constant` of
    base.json)."""
    constant = next((doc.get("best_constant") for doc in docs.values() if doc.get("best_constant")), None)
    if not constant:
        return ""
    parts = [f"{task_type}: the best constant answer `{row['answer']}` {row['correct']}/{row['n']} "
             f"({100 * row['accuracy']:.1f}%), the {kind} baseline {row[f'{kind}_correct']}/{row['n']} "
             f"({100 * row[f'{kind}_accuracy']:.1f}%)" for task_type, row in sorted(constant.items())
             for kind in [_baseline_kind(row)]]
    return "Beside these scores, on the same pool: " + "; ".join(parts) + "."


HELDOUT_NOTE = ("Held-out pool: verified code_o/code_i tasks made once by the base model as teacher, never "
                "proposed, solved or trained on (populora/heldout/), answered greedily by every member "
                "after each generation. Accuracy in %; differences in points with 95% paired-bootstrap intervals over "
                "the pool's tasks (a role's score on a task is the mean of its members' verdicts).")
