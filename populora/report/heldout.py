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


def _role_scores(doc: dict, gen: int, role: str, task_ids: list[str], key: str = "generations") -> list[float] | None:
    members = doc.get("roles", {}).get(role) or []
    table = doc[key][gen] if gen < len(doc.get(key) or []) else None
    if not members or not table:
        return None
    return per_task_mean(table, members, task_ids)


def _cell(a: list[float] | None, b: list[float] | None) -> str:
    if a is None or b is None:
        return "-"
    mean, low, high = paired_bootstrap([x - y for x, y in zip(a, b)])
    return f"{100 * mean:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def _pct(values: list[float] | None) -> str:
    return "-" if not values else f"{100 * sum(values) / len(values):.1f}"


def heldout_table(docs: dict[str, dict], *, measure: str = "greedy") -> str:
    """Markdown: one row per generation; each arm's students' score (%) and the base's (the warm base: the frozen
    base of every stage; the raw base before the warm start beside it when it was scored), and the paired
    differences in points with their 95% intervals. `measure`: `greedy` (verdicts) or `pass_rate` (the mean pass
    rate over heldout.samples answers at temperature 1, per task; generations without one are left out). Empty
    when no arm has a pool (or no pass rates)."""
    key, base_key = ("generations", "base") if measure == "greedy" else ("pass_rates", "base_pass_rates")
    docs = {arm: doc for arm, doc in docs.items() if doc.get(base_key)}
    if not docs:
        return ""
    first = next(iter(docs.values()))
    task_ids = sorted(first[base_key])
    base = [float(first[base_key][t]) for t in task_ids]
    raw = first.get("raw_base") if measure == "greedy" else None
    arms = [a for a in (POPULATION, BASELINE) if a in docs] + sorted(set(docs) - {POPULATION, BASELINE})
    header = [
        "generation",
        *(f"{arm} students" for arm in arms),
        "base",
        *(["raw base"] if raw else []),
        *(f"{arm} students - base" for arm in arms),
    ]
    paired = POPULATION in docs and BASELINE in docs
    if paired:
        header.append("population - baseline students")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    generations = max(len(doc.get(key) or []) for doc in docs.values())
    for gen in range(generations):
        students = {arm: _role_scores(docs[arm], gen, "students", task_ids, key) for arm in arms}
        if all(value is None for value in students.values()):
            continue
        cells = [
            str(gen),
            *(_pct(students[arm]) for arm in arms),
            _pct(base),
            *([_pct([float(raw.get(t, 0)) for t in task_ids])] if raw else []),
            *(_cell(students[arm], base) for arm in arms),
        ]
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
    parts = [
        f"{task_type}: the best constant answer `{row['answer']}` {row['correct']}/{row['n']} "
        f"({100 * row['accuracy']:.1f}%), the {kind} baseline {row[f'{kind}_correct']}/{row['n']} "
        f"({100 * row[f'{kind}_accuracy']:.1f}%)"
        for task_type, row in sorted(constant.items())
        for kind in [_baseline_kind(row)]
    ]
    return "Beside these scores, on the same pool: " + "; ".join(parts) + "."


HELDOUT_NOTE = (
    "Held-out pool: verified code_o/code_i tasks never proposed, solved or trained on (populora/heldout/: "
    "heldout.pool_file, e.g. pool v3 from programs the warm start never saw, or proposed by the base), "
    'answered greedily by every member after each generation. "base" is the frozen base every stage '
    'uses (the warm base when warm_start.enabled), "raw base" the model before the warm start. '
    "Accuracy in %; differences in points with 95% paired-bootstrap intervals over the pool's tasks (a "
    "role's score on a task is the mean of its members' verdicts)."
)


def learning_note(docs: dict[str, dict], *, measure: str = "greedy") -> str:
    """A sentence on whether any arm's students ended above the base on the pool: the last generation's paired
    interval (students minus base) excluding 0, or no sign of it (params/learning-demo.yaml is the larger budget
    that showed it, its header gives the figures)."""
    key, base_key = ("generations", "base") if measure == "greedy" else ("pass_rates", "base_pass_rates")
    found = []
    for arm, doc in docs.items():
        if not doc.get(base_key) or not doc.get(key):
            continue
        task_ids = sorted(doc[base_key])
        students = _role_scores(doc, len(doc[key]) - 1, "students", task_ids, key)
        if students is None:
            continue
        _, low, _ = paired_bootstrap([x - float(doc[base_key][t]) for x, t in zip(students, task_ids)])
        found.append((arm, low > 0))
    if not found:
        return ""
    above = [arm for arm, ok in found if ok]
    what = "greedy accuracy" if measure == "greedy" else "pass rate"
    if above:
        return (
            f"Learning shown on the pool ({what}): the students of {', '.join(above)} end above the base, the "
            "95% paired interval excluding 0."
        )
    return (
        f"No learning shown on the pool ({what}): no arm's students end above the base with a 95% paired interval "
        "excluding 0 in this run. params/learning-demo.yaml is a larger budget that showed it (its header gives "
        "the measured gain, the seeds it holds on and its time)."
    )
