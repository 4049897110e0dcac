"""A positive control's held-out result beside the best constant: its verdicts split into the tasks the pool's best
constant answer solves and the tasks it does not, each arm against the base (exact McNemar, 95% paired bootstrap).

A gain that stands only on the constant's tasks is a model learning to answer the constant; the tasks it cannot
solve are where the update taught something. The split is read after a run, on its own committed verdicts:

    python -m populora control-split study/positive-control-warm/evidence-3-float32 \\
        --tasks study/positive-control-warm/evidence-3-heldout.jsonl \\
        --baselines study/positive-control-warm/evidence-3-heldout_baselines.json

`--tasks` is the run's held-out tasks in the order it scored them (committed beside each evidence run),
`--baselines` their `python -m populora study-baselines` file; the run folder holds `arms/base.json` and one
`arms/<arm>.json` per trained arm.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def split_rows(golds: list[str], constant: str, base: list[bool], arm: list[bool]) -> dict[str, dict]:
    """Base and arm accuracy, their difference and its tests on all tasks, the constant's and the others.

    >>> rows = split_rows(["0", "1", "2", "0"], "0", [True, False, False, False], [True, True, True, True])
    >>> {name: (row["n"], row["base"], row["arm"], row["arm_only"], row["base_only"]) for name, row in rows.items()}
    {'all': (4, 25.0, 100.0, 3, 0), 'constant solves': (2, 50.0, 100.0, 1, 0), 'constant fails': (2, 0.0, 100.0, 2, 0)}
    """
    from populora.core.stats import mcnemar_exact, paired_bootstrap

    if not len(golds) == len(base) == len(arm):
        raise ValueError(f"{len(golds)} tasks, {len(base)} base and {len(arm)} arm verdicts: not the same tasks")
    groups = {
        "all": range(len(golds)),
        "constant solves": [i for i, gold in enumerate(golds) if gold == constant],
        "constant fails": [i for i, gold in enumerate(golds) if gold != constant],
    }
    rows = {}
    for name, index in groups.items():
        b, a = [base[i] for i in index], [arm[i] for i in index]
        mean, low, high = paired_bootstrap([int(x) - int(y) for x, y in zip(a, b)])
        test = mcnemar_exact(a, b)
        rows[name] = {
            "n": len(index),
            "base": round(100 * sum(b) / len(b), 1) if b else 0.0,
            "arm": round(100 * sum(a) / len(a), 1) if a else 0.0,
            "points": round(100 * mean, 1),
            "interval": [round(100 * low, 1), round(100 * high, 1)],
            "arm_only": test["first_only"],
            "base_only": test["second_only"],
            "p": test["p"],
        }
    return rows


def split_run(run: Path, tasks: Path, baselines: Path) -> dict:
    """Every trained arm at every scored step of a finished control run, split by the best constant."""
    golds = [json.loads(line)["outputs"][0] for line in tasks.read_text().splitlines() if line.strip()]
    (best,) = [by_type["best"] for by_type in json.loads(baselines.read_text())["by_type"].values()]
    solved = sum(gold == best["answer"] for gold in golds)
    if solved != best["correct"]:
        raise SystemExit(
            f"the constant {best['answer']!r} is the gold of {solved} tasks but solves {best['correct']} by the "
            f"grader: {baselines} is not these tasks' baselines (fix: rerun `python -m populora study-baselines {tasks}`)"
        )
    base = [bool(v) for v in json.loads((run / "arms" / "base.json").read_text())["verdicts"]]
    arms = {}
    for path in sorted((run / "arms").glob("*.json")):
        if path.stem != "base":
            heldout = json.loads(path.read_text())["heldout"]
            arms[path.stem] = {
                step: split_rows(golds, best["answer"], base, [bool(v) for v in scored["verdicts"]])
                for step, scored in sorted(heldout.items(), key=lambda item: int(item[0]))
            }
    return {"run": str(run), "constant": best["answer"], "constant_solves": solved, "arms": arms}


def markdown(result: dict) -> str:
    lines = [
        f"Best constant `{result['constant']}` solves {result['constant_solves']} tasks.",
        "",
        "| arm | step | tasks | n | base | arm | arm - base | arm only / base only | exact McNemar p |",
        "| --- | ---: | --- | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for arm, steps in result["arms"].items():
        for step, rows in steps.items():
            for name, r in rows.items():
                low, high = r["interval"]
                lines.append(
                    f"| {arm} | {step} | {name} | {r['n']} | {r['base']:.1f}% | {r['arm']:.1f}% | "
                    f"{r['points']:+.1f} [{low:+.1f}, {high:+.1f}] | {r['arm_only']} / {r['base_only']} | {r['p']:.2g} |"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m populora control-split",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run", type=Path, help="a finished control run's folder (holding arms/)")
    parser.add_argument("--tasks", type=Path, required=True, help="its held-out tasks (jsonl, in scoring order)")
    parser.add_argument("--baselines", type=Path, required=True, help="their study-baselines file")
    parser.add_argument("--json", type=Path, help="also write the split here")
    args = parser.parse_args(argv)
    result = split_run(args.run, args.tasks, args.baselines)
    print(markdown(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
