"""One run's held-out learning curve against the base model, generation by generation, with the
paired statistics a candidate budget is judged by (issue 34: students above the base, interval
excluding 0).

    python -m populora.report.heldout_curve study/learning/budgets/b-lr1e3/1t1s-s0/dynamics/population/heldout_verdicts.json

Reads `heldout_verdicts.json` (written by the dynamics stage: the base model's verdicts and, per
generation, every scored member's, task by task) and prints, per generation, the students' mean
accuracy (all types and per type), the per-task paired bootstrap of students minus base (95%
percentile interval, in points) and the exact McNemar test of each student against the base.
`--json` writes the same rows to a file.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from statistics import mean

from populora.core.stats import mcnemar_exact, paired_bootstrap


def curve_rows(doc: dict, role: str = "students") -> list[dict]:
    """Per generation: accuracy of `role`'s members (mean over members) overall and per task type, the
    paired bootstrap of (members' mean - base) per task, and McNemar per member against the base."""
    base = doc["base"]
    ids = sorted(base)
    types = sorted({task.split("-")[1] for task in ids})
    members = doc.get("roles", {}).get(role) or sorted(doc["generations"][-1])  # the last is always scored
    rows = [
        {
            "generation": "base",
            "accuracy": mean(base[t] for t in ids),
            **{f"{kind}.accuracy": mean(base[t] for t in ids if t.split("-")[1] == kind) for kind in types},
        }
    ]
    for gen, table in enumerate(doc["generations"]):
        if not table:  # not scored after this generation (heldout.every)
            continue
        score = {t: mean(table[m].get(t, 0) for m in members) for t in ids}
        diff, low, high = paired_bootstrap([score[t] - base[t] for t in ids])
        rows.append(
            {
                "generation": gen,
                "accuracy": mean(score.values()),
                **{f"{kind}.accuracy": mean(score[t] for t in ids if t.split("-")[1] == kind) for kind in types},
                "minus_base": diff,
                "minus_base_low": low,
                "minus_base_high": high,
                "mcnemar": {
                    m: mcnemar_exact([table[m].get(t, 0) for t in ids], [base[t] for t in ids]) for m in members
                },
            }
        )
    return rows


def born_rows(doc: dict, role: str = "students") -> list[dict]:
    """Each child evolution made after a generation, as its own point beside its parents: its accuracy,
    its parents' (the members they were, as trained that generation) and the tasks where it differs from
    its first parent. `heldout_verdicts.json`'s `born` (absent in runs made before it was kept: [])."""
    base = doc["base"]
    ids = sorted(base)
    members = set(doc.get("roles", {}).get(role) or [])
    rows = []
    generations_members = doc.get("members") or [{} for _ in doc["generations"]]
    for gen, (table, born) in enumerate(zip(doc["generations"], doc.get("born") or [])):
        slot_of = {member: slot for slot, member in generations_members[gen].items()}  # who each slot held, as trained
        for slot, child in sorted(born.items()):
            if members and slot not in members:
                continue
            verdicts = child["verdicts"]
            parents = [slot_of[p] for p in child.get("parents", []) if p in slot_of]
            rows.append(
                {
                    "generation": gen,
                    "slot": slot,
                    "member": child["member"],
                    "operator": child.get("operator"),
                    "accuracy": mean(verdicts.get(t, 0) for t in ids),
                    "parents": {p: mean(table.get(p, {}).get(t, 0) for t in ids) for p in parents if p in table},
                    "differs_from_first_parent": sum(
                        verdicts.get(t, 0) != table.get(parents[0], {}).get(t, 0) for t in ids
                    )
                    if parents and parents[0] in table
                    else None,
                }
            )
    return rows


def render(rows: list[dict]) -> str:
    types = [key.split(".")[0] for key in rows[0] if key.endswith(".accuracy")]
    head = [
        "generation",
        "accuracy %",
        *[f"{kind} %" for kind in types],
        "minus base (points, 95% CI)",
        "McNemar: gained / lost, p",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [
            str(row["generation"]),
            f"{100 * row['accuracy']:.1f}",
            *[f"{100 * row[f'{kind}.accuracy']:.1f}" for kind in types],
        ]
        if row["generation"] == "base":
            cells += ["", ""]
        else:
            cells.append(
                f"{100 * row['minus_base']:+.1f} [{100 * row['minus_base_low']:+.1f}, "
                f"{100 * row['minus_base_high']:+.1f}]"
            )
            cells.append(
                "; ".join(
                    f"{m}: {t['first_only']} / {t['second_only']}, p = {t['p']:.3g}" for m, t in row["mcnemar"].items()
                )
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("verdicts", help="a run's dynamics/<arm>/heldout_verdicts.json")
    parser.add_argument("--role", default="students")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    doc = json.loads(Path(args.verdicts).read_text())
    if not doc.get("base") or not doc.get("generations"):
        parser.error(f"{args.verdicts} holds no held-out verdicts (a run without a pool)")
    rows = curve_rows(doc, args.role)
    print(render(rows))
    for child in born_rows(doc, args.role):
        print(
            f"born after generation {child['generation']}: {child['slot']} ({child['operator']}) "
            f"{100 * child['accuracy']:.1f}%, parents {', '.join(f'{p} {100 * a:.1f}%' for p, a in child['parents'].items())}; "
            f"differs from its first parent on {child['differs_from_first_parent']} tasks"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
