"""The study command: one analysis of a grid of runs, from committed run folders or DVC experiments.

    python -m populora.analysis study/learning/runs --plan study/learning/plan.yaml --out study/learning \
        --title "Second study: does the population help where the students learn?"
    python -m populora.analysis --dvc --out results/study          # the experiments of `dvc exp show` here
    python -m populora.analysis --dvc --exp-json shown.json --repo . --out results/study

Writes study.md (`populora.analysis.tables`), study.json (`populora.analysis.comparisons.summarize`) and study.png
(`populora.analysis.figure`) under --out.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from populora.analysis import plan as study_plan
from populora.analysis.comparisons import COMPARISONS, summarize
from populora.analysis.experiments import StudyError, exp_show, experiment_runs, experiments, read_verdicts
from populora.analysis.figure import plot
from populora.analysis.gate import gate_verdict
from populora.analysis.passk import with_pool_baselines
from populora.analysis.runs import StudyRunsError, load_runs
from populora.analysis.tables import DEFAULT_TITLE, markdown
from populora.core.io import write_json, write_text


def load_study(
    runs: str | None = None,
    *,
    dvc: bool = False,
    repo: str = ".",
    exp_json: str | None = None,
    all_commits: bool = False,
) -> tuple[list[dict], list[tuple], list[str]]:
    """(run records, comparison pairs, notes) from a folder of committed runs or (`dvc`) from DVC
    experiments: the one way runs reach the analyser."""
    if not dvc:
        if runs is None:
            raise StudyRunsError("load_study needs a runs folder, or dvc=True")
        return load_runs(Path(runs)), list(COMPARISONS), []
    shown = json.loads(Path(exp_json).read_text()) if exp_json else exp_show(Path(repo), all_commits)
    found = experiments(shown)
    return experiment_runs(found, read_verdicts(Path(repo), found) if found else {})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="?", help="folder of committed run folders (study/<name>/runs)")
    parser.add_argument("--dvc", action="store_true", help="read DVC experiments (`dvc exp show`) instead")
    parser.add_argument("--repo", default=".", help="with --dvc: the DVC project (default: here)")
    parser.add_argument("-A", "--all-commits", action="store_true", help="with --dvc: experiments of every commit")
    parser.add_argument("--exp-json", help="with --dvc: a saved `dvc exp show --json` output instead of running DVC")
    parser.add_argument("--plan", help="the study's plan.yaml (tuning seeds set apart, departures flagged)")
    parser.add_argument("--out", required=True, help="folder for study.md, study.json, study.png")
    parser.add_argument("--title", default=DEFAULT_TITLE, help=f"study.md's heading (default: {DEFAULT_TITLE!r})")
    args = parser.parse_args(argv)
    if bool(args.runs) == args.dvc:
        parser.error("give a runs folder or --dvc (one of them)")
    try:
        runs, pairs, notes = load_study(
            args.runs, dvc=args.dvc, repo=args.repo, exp_json=args.exp_json, all_commits=args.all_commits
        )
        plan = study_plan.load(args.plan) if args.plan else None
        study = summarize(runs, pairs, plan, notes)
        study["pool_baselines"] = study_plan.pool_baselines(plan, args.plan)
        study["passk"] = with_pool_baselines(study.get("passk") or {}, study["pool_baselines"])
        study["gate"] = gate_verdict(runs, plan)
    except (StudyRunsError, StudyError, study_plan.PlanError, OSError, KeyError, ValueError) as error:
        print(f"study: {error}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "study.json", study)
    write_text(out / "study.md", markdown(study, title=args.title))
    plot(study, out / "study.png")
    print(f"{len(study['runs'])} runs summarised in {out}/study.md, study.json, study.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
