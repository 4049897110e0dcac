"""A study across DVC experiments, with the statistics of the committed CPU study
(`populora.report.study_runs`): mean across seeds with a 95% t-interval per arm and ablation, and
population minus baseline by a two-level bootstrap over seeds and problems.

    dvc exp run --queue -S 'base.seed=0,1,2' -S 'dag.arms=[population],[baseline]'   # seeds x arms
    dvc queue start && dvc queue status                                # wait until every run succeeded
    python -m populora.report.study --out results/study               # table + figure of the experiments

Experiments come from `dvc exp show --json` and are grouped by the arms they ran (`dag.arms`) and
by their ablation: every parameter that differs between the experiments, except `base.seed` and
`dag.arms` (`default` when none does). For every key of `results/headline.json`, the run's DVC
metrics (populora/report/headline.py: per group `code`, `math`, `cruxeval`, `overall` the students'
`mean`, `best`, `weakest`, the `base`, `baseline` and differences; the held-out pool; the last solve
rate) a group gets n (seeds), mean, standard deviation, min, max and the mean's 95%
Student-t interval across seeds (`study_runs.t_interval`; needs 2 seeds).

Between arms: within an ablation, the population-only experiments against the baseline-only ones,
per benchmark, the difference of the students' mean pass@1 (the baseline's adapter is its student)
with `study_runs.comparison`: the two-level bootstrap (seeds resampled within each arm, then
problems, one draw for both sides), on the per-problem verdicts of each experiment's
`results/bench/<arm>/<benchmark>/<model>.json`, read from the experiment's commit through DVC
(`dvc.api.DVCFileSystem`). An interval that covers 0 is "no detectable difference".

Writes `study.md` (tables), `study.json` (the same numbers) and `study.png` (per key: one dot per
seed and the mean +- sd per group).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path
from statistics import mean, stdev

from populora.core.refs import arm_refs
from populora.report.study_runs import StudyRunsError, comparison, t_interval

METRICS_FILE = "results/headline.json"  # the DVC metrics of a run (workflow/dag.py HEADLINE)
BENCH_DIR = "results/bench"  # <arm>/<benchmark>/<model>.json, as workflow/dag.py writes them
PARAMS_FILE = "params.yaml"
NOT_ABLATIONS = ("base.seed", "dag.arms")


class StudyError(RuntimeError):
    """The experiments cannot be summarised; the message says why and what to do."""


def flatten(tree: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists become tuples (hashable, comparable)."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = tuple(value) if isinstance(value, list) else value
    return out


def experiments(shown: list[dict]) -> list[dict]:
    """Finished experiments of `dvc exp show --json`: {name, rev, params (flat), metrics (flat)};
    queued, running and failed ones (no metrics) are left out."""
    found = []
    for commit in shown:
        for exp_range in commit.get("experiments") or []:
            revs = exp_range.get("revs") or []
            if not revs:
                continue
            state = revs[0]
            data = state.get("data") or {}
            metrics = ((data.get("metrics") or {}).get(METRICS_FILE) or {}).get("data")
            params = ((data.get("params") or {}).get(PARAMS_FILE) or {}).get("data")
            if not metrics or not params or state.get("error"):
                continue
            found.append({"name": exp_range.get("name") or state.get("name") or state["rev"][:7], "rev": state["rev"],
                          "params": flatten(params), "metrics": flatten(metrics)})
    return found


def _label(value) -> str:
    return "+".join(map(str, value)) if isinstance(value, tuple) else str(value)


def ablation_keys(found: list[dict]) -> list[str]:
    """Parameters that differ between experiments (seed and arms aside)."""
    keys = sorted({k for e in found for k in e["params"]} - set(NOT_ABLATIONS))
    return [k for k in keys if len({repr(e["params"].get(k)) for e in found}) > 1]


def group_of(experiment: dict, ablations: list[str]) -> tuple[str, str]:
    arms = _label(experiment["params"].get("dag.arms", ("?",)))
    ablation = ", ".join(f"{k}={_label(experiment['params'].get(k))}" for k in ablations) or "default"
    return arms, ablation


def spread(values: list[float]) -> dict:
    return {"n": len(values), "mean": round(mean(values), 6), "sd": round(stdev(values), 6) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def students_of(experiment: dict) -> tuple[str, list[str]]:
    """The arm a one-arm experiment ran and its students' model names (the baseline's one adapter)."""
    params = experiment["params"]
    arm = params["dag.arms"][0]
    refs = arm_refs(arm, int(params.get("population.teachers", 1)), int(params.get("population.students", 1)))
    return arm, [ref.name for ref in refs["students"]]


def experiment_verdicts(repo: Path, experiment: dict) -> dict[str, dict[str, dict[str, int]]]:
    """{benchmark: {student: per-problem verdicts}} of a one-arm experiment, read from its commit
    through DVC (the results are DVC outputs, kept in the cache of the project that ran it)."""
    from dvc.api import DVCFileSystem

    arm, students = students_of(experiment)
    fs = DVCFileSystem(str(repo), rev=experiment["rev"])
    verdicts: dict[str, dict[str, dict[str, int]]] = {}
    for bench in experiment["params"].get("bench.benchmarks", ()):
        for model in students:
            path = f"{BENCH_DIR}/{arm}/{bench}/{model}.json"
            if fs.exists(path):
                verdicts.setdefault(bench, {})[model] = json.loads(fs.read_text(path))["per_problem"]
    return verdicts


def arm_comparisons(groups: dict[tuple[str, str], list[dict]], verdicts: dict[str, dict]) -> tuple[list[dict], list[str]]:
    """Per ablation and benchmark: population minus baseline (`study_runs.comparison`) over the
    experiments whose verdicts are known; and a note for every pair that could not be compared."""
    rows, notes = [], []
    for ablation in sorted({a for _, a in groups}):
        sides = {arm: [e for e in groups.get((arm, ablation), []) if verdicts.get(e["name"])]
                 for arm in ("population", "baseline")}
        if not (groups.get(("population", ablation)) and groups.get(("baseline", ablation))):
            continue
        if not all(sides.values()):
            notes.append(f"{ablation}: no per-problem verdicts to compare (run with --repo at the DVC project)")
            continue
        runs = {arm: [{"name": e["name"], "students": students_of(e)[1], "models": students_of(e)[1],
                       "verdicts": verdicts[e["name"]]} for e in members] for arm, members in sides.items()}
        benches = sorted(set.intersection(*(set(r["verdicts"]) for side in runs.values() for r in side)))
        for bench in benches:
            if any(set(r["students"]) - set(r["verdicts"][bench]) for side in runs.values() for r in side):
                notes.append(f"{ablation} {bench}: a student's result is missing")
                continue
            try:
                rows.append({"ablation": ablation, **comparison("population", "baseline", runs["population"],
                                                                  runs["baseline"], bench)})
            except StudyRunsError as error:
                notes.append(f"{ablation} {bench}: {error}")
    return rows, notes


def summarize_study(found: list[dict], verdicts: dict[str, dict] | None = None) -> dict:
    """{"groups": [...], "comparisons": [...], "ablations": [...]} (see the module docstring);
    `verdicts`: experiment name -> `experiment_verdicts` (none: the comparisons are left out)."""
    if not found:
        raise StudyError("no finished experiment with results/headline.json in `dvc exp show`. Fix: run experiments "
                         "first (dvc exp run / dvc queue start) and wait until they succeed.")
    ablations = ablation_keys(found)
    groups: dict[tuple[str, str], list[dict]] = {}
    for experiment in found:
        groups.setdefault(group_of(experiment, ablations), []).append(experiment)
    rows = []
    for (arms, ablation), members in sorted(groups.items()):
        keys = sorted({k for e in members for k, v in e["metrics"].items() if _is_number(v)})
        for key in keys:
            values = [float(e["metrics"][key]) for e in members if _is_number(e["metrics"].get(key))]
            rows.append({"arms": arms, "ablation": ablation, "key": key, **spread(values), "interval": t_interval(values),
                         "seeds": sorted(e["params"].get("base.seed") for e in members
                                         if _is_number(e["metrics"].get(key)))})
    compared, notes = arm_comparisons(groups, verdicts or {})
    return {"ablations": ablations, "experiments": [e["name"] for e in found], "groups": rows,
            "comparisons": compared, "notes": notes}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def markdown(study: dict) -> str:
    lines = ["# Study across DVC experiments", "",
             f"{len(study['experiments'])} experiments: {', '.join(study['experiments'])}.",
             f"Ablation parameters: {', '.join(study['ablations']) or 'none (every experiment differs only by seed / arms)'}.",
             "Statistics as in the committed CPU study (populora/report/study_runs.py).",
             "", "## Mean and spread across seeds", "",
             "| arms | ablation | key | seeds | mean | sd | min | max | 95% t-interval |", "|---|---|---|---|---|---|---|---|---|"]
    for row in study["groups"]:
        interval = row.get("interval")
        shown = "" if interval is None else f"[{interval[1]:+.3f}, {interval[2]:+.3f}]"
        lines.append(f"| {row['arms']} | {row['ablation']} | {row['key']} | {row['n']} | {row['mean']:.3f} | "
                     f"{row['sd']:.3f} | {row['min']:.3f} | {row['max']:.3f} | {shown} |")
    lines += ["", "## Population - baseline (two-level bootstrap: seeds, then problems)", ""]
    if study["comparisons"]:
        lines += ["| ablation | benchmark | seeds (population v baseline) | students' pass@1 difference | 95% interval | verdict |",
                  "|---|---|---|---|---|---|"]
        for row in study["comparisons"]:
            lines.append(f"| {row['ablation']} | {row['bench']} | {row['seeds'][0]} v {row['seeds'][1]} | "
                         f"{row['delta']:+.3f} | [{row['low']:+.3f}, {row['high']:+.3f}] | {row['verdict']} |")
    else:
        lines.append("No comparison: run population-only and baseline-only experiments of the same ablation "
                     "(`-S 'dag.arms=[population]'`, `-S 'dag.arms=[baseline]'`).")
    lines += [f"* {note}" for note in study.get("notes", [])]
    return "\n".join(lines) + "\n"


def plot(study: dict, found: list[dict], path: Path, max_keys: int = 6) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ranked = sorted({r["key"] for r in study["groups"] if r["key"].endswith((".mean", ".baseline", ".delta"))},
                    key=lambda k: (not k.startswith("avg.overall"), k))[:max_keys] or ["(none)"]
    fig, axes = plt.subplots(1, len(ranked), figsize=(4.2 * len(ranked), 4.2), squeeze=False)
    for ax, key in zip(axes[0], ranked):
        rows = [r for r in study["groups"] if r["key"] == key]
        for x, row in enumerate(rows):
            values = [float(e["metrics"][key]) for e in found if group_of(e, study["ablations"]) == (row["arms"], row["ablation"])
                      and _is_number(e["metrics"].get(key))]
            ax.scatter([x] * len(values), values, color="0.4", s=14, zorder=3)
            ax.errorbar([x], [row["mean"]], yerr=[row["sd"]], fmt="o", color="tab:blue", capsize=4, zorder=4)
        ax.set_xticks(range(len(rows)), [f"{r['arms']}\n{r['ablation']}" for r in rows], fontsize=7, rotation=20)
        ax.set_title(key, fontsize=9)
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle("Across seeds: dots = seeds, mean +- sd per arm and ablation")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def exp_show(repo: Path, all_commits: bool) -> list[dict]:
    """`dvc exp show --json` of the repository (every commit with `-A`)."""
    command = ["dvc", "exp", "show", "--json", *(["-A"] if all_commits else [])]
    done = subprocess.run(command, cwd=repo, capture_output=True, text=True)
    if done.returncode != 0:
        raise StudyError(f"`{' '.join(command)}` failed in {repo}: {done.stderr.strip()[-500:]}. Fix: run from a DVC "
                         "project with experiments (dvc exp run ...).")
    return json.loads(done.stdout)


def read_verdicts(repo: Path, found: list[dict]) -> dict[str, dict]:
    """`experiment_verdicts` of every one-arm experiment whose results DVC can still read."""
    verdicts = {}
    for experiment in found:
        if len(experiment["params"].get("dag.arms", ())) != 1:
            continue  # a run of both arms compares them itself (its `.diff.*` keys)
        try:
            verdicts[experiment["name"]] = experiment_verdicts(repo, experiment)
        except Exception as error:  # noqa: BLE001  (DVC raises many kinds: no project, no such rev, no cache)
            print(f"study: {experiment['name']}: its per-problem verdicts are not readable through DVC "
                  f"({type(error).__name__}: {error}); left out of the comparisons", file=sys.stderr)
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for study.md, study.json and study.png")
    parser.add_argument("--repo", default=".", help="the DVC project (default: here)")
    parser.add_argument("-A", "--all-commits", action="store_true", help="experiments of every commit")
    parser.add_argument("--exp-json", help="read this saved `dvc exp show --json` output instead of running DVC")
    args = parser.parse_args(argv)
    try:
        shown = json.loads(Path(args.exp_json).read_text()) if args.exp_json else exp_show(Path(args.repo), args.all_commits)
        found = experiments(shown)
        study = summarize_study(found, read_verdicts(Path(args.repo), found) if found else {})
    except (StudyError, OSError, json.JSONDecodeError) as error:
        print(f"study: {error}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "study.json").write_text(json.dumps(study, indent=1, sort_keys=True) + "\n")
    (out / "study.md").write_text(markdown(study))
    plot(study, found, out / "study.png")
    print(f"study of {len(found)} experiments written to {out}/study.md, study.json, study.png", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
