"""How far each member moved per optimizer step, and whether children born by evolution keep moving
(issue 47): the per-generation growth of `sum ||B A||_F` (`delta_norm.<slot>` in a run's dynamics,
measured on the checkpoint after evolution) per slot, each step tagged with what happened around it.

    python -m populora.analysis.growth study/learning/runs/2t2s-s0 study/learning/population-v2/2t2s-s0 \
        [--role students] [--json out.json]

A run folder is one `scripts/study.sh` commits (or a results folder's arm: `results` with `--arm`):
`dynamics/<arm>/dynamics.json` gives the norms, `evolution/genNNN.json` (runs from the code of issue 47
on) which slots evolution refilled after generation NNN. The growth of slot s at generation g is
`norm[g][s] - norm[g-1][s]`: one update step of the member s held at the start of g, unless evolution
replaced s after g (then `norm[g][s]` is a newborn child's and the row is `replaced`, not a step). A
step whose member was born by the evolution after g-1 is `after_birth`: the criterion of issue 47 reads
those steps (a child should move as far as its parents do, >= 1.0 on the learning study's budget).
Runs without evolution files (older code) leave `after_birth`/`replaced` unknown (`None`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import median

from populora.core.io import write_json

ROLE_PREFIX = {"students": "student", "teachers": "teacher"}


def step_growth(rows: list[dict], births: dict[int, set[str]] | None, role: str = "students") -> list[dict]:
    """Per generation g >= 1 and slot of `role`: the norm, its growth over g-1 and the step's tags.

    `rows` are a run's dynamics rows (any order; `generation` and `delta_norm.<slot>` read);
    `births[g]` the slots evolution refilled after generation g (None: not recorded).

    >>> rows = [{"generation": 0, "delta_norm.student0": 2.0}, {"generation": 1, "delta_norm.student0": 1.0},
    ...         {"generation": 2, "delta_norm.student0": 2.5}]
    >>> [(r["generation"], r["growth"], r["after_birth"], r["replaced"]) for r in step_growth(rows, {1: {"student0"}})]
    [(1, -1.0, False, True), (2, 1.5, True, False)]
    """
    prefix = f"delta_norm.{ROLE_PREFIX[role]}"
    by_gen = {int(row["generation"]): row for row in rows}
    out = []
    for gen in sorted(by_gen)[1:]:
        before, now = by_gen.get(gen - 1), by_gen[gen]
        if before is None:
            continue
        for key in sorted(k for k in now if k.startswith(prefix)):
            if now[key] is None or before.get(key) is None:
                continue
            slot = key.removeprefix("delta_norm.")
            out.append(
                {
                    "generation": gen,
                    "slot": slot,
                    "norm": round(now[key], 4),
                    "growth": round(now[key] - before[key], 4),
                    "after_birth": None if births is None else slot in births.get(gen - 1, set()),
                    "replaced": None if births is None else slot in births.get(gen, set()),
                }
            )
    return out


def summarize(steps: list[dict]) -> dict:
    """Median and minimum growth of the clean steps (not `replaced`), split by `after_birth`."""

    def stats(values: list[float]) -> dict:
        return {
            "n": len(values),
            "median": round(median(values), 4) if values else None,
            "min": round(min(values), 4) if values else None,
        }

    clean = [s for s in steps if s["replaced"] is not True]
    return {
        "after_birth": stats([s["growth"] for s in clean if s["after_birth"] is True]),
        "other": stats([s["growth"] for s in clean if s["after_birth"] is not True]),
    }


def read_run(folder: Path, arm: str = "population") -> tuple[list[dict], dict[int, set[str]] | None]:
    """A committed run's dynamics rows and births (None where it has no `evolution/` folder)."""
    rows = json.loads((folder / "dynamics" / arm / "dynamics.json").read_text())
    evolution = folder / "evolution"
    if not evolution.is_dir():
        return rows, None
    births = {}
    for path in sorted(evolution.glob("gen*.json")):
        events = json.loads(path.read_text()).get("events", [])
        births[int(path.stem.removeprefix("gen"))] = {event["slot"] for event in events}
    return rows, births


def table(runs: dict[str, list[dict]]) -> str:
    """Markdown: one line per run, generation and slot."""

    def tag(step: dict) -> str:
        if step["replaced"] is None:
            return "?"
        return "replaced after this step" if step["replaced"] else ("child's first step" if step["after_birth"] else "")

    lines = ["| run | generation | slot | sum ‖BA‖_F | growth | step |", "|---|---:|---|---:|---:|---|"]
    for name, steps in runs.items():
        lines += [
            f"| {name} | {s['generation']} | {s['slot']} | {s['norm']:.2f} | {s['growth']:+.2f} | {tag(s)} |"
            for s in steps
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path, help="committed run folders (dynamics/, evolution/)")
    parser.add_argument("--arm", default="population")
    parser.add_argument("--role", default="students", choices=sorted(ROLE_PREFIX))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    steps = {}
    for folder in args.runs:
        rows, births = read_run(folder, args.arm)
        steps[f"{folder.parent.name}/{folder.name}"] = step_growth(rows, births, args.role)
    print(table(steps))
    summary = {name: summarize(s) for name, s in steps.items()}
    print(json.dumps(summary, indent=1))
    if args.json:
        write_json(args.json, {"role": args.role, "steps": steps, "summary": summary})
    return 0


if __name__ == "__main__":
    sys.exit(main())
