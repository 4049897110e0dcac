"""A study across DVC experiments: mean and spread across seeds per arm and ablation, with paired
intervals between the arms, from `dvc exp show --json` (never by re-reading result files by hand).

    dvc exp run --queue -S base.seed=0 -S 'dag.arms=[population]'     # ... one per seed and arm
    dvc queue start && dvc queue status                                # wait until every run succeeded
    python -m populora.report.study --out results/study               # table + figure of the experiments

Experiments are grouped by the arms they ran (`dag.arms`) and by their ablation: every parameter
that differs between the experiments, except `base.seed` and `dag.arms` (`default` when none does).
For every headline key of `results/metrics.json` (populora/report/metrics.py: `bench.<b>.mean`,
`.best`, `.weakest`, `.teachers.mean`, `.base`, side-by-side `.population.*` / `.baseline`, paired
`.diff.*.delta`, and the `avg.<group>.*` aggregates) a group gets n (seeds), mean, standard
deviation, min and max across seeds.

Paired intervals: within an ablation, a population-only and a baseline-only experiment with the
same `base.seed` form a pair; per headline key (`mean`, `best`, `weakest`) the per-seed
differences (population - baseline) get their mean and a 95% Student-t interval over seeds
(needs at least 2 seeds; with few seeds it is wide, as it should be). A run of both arms in one
experiment contributes its own per-problem paired differences (`bench.<b>.diff.*.delta`), whose
across-seed mean and t-interval are reported the same way. An interval that covers 0 is
"no detectable difference".

Writes `study.md` (tables), `study.json` (the same numbers) and `study.png` (per key: one dot per
seed and the mean +- sd per group).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from statistics import mean, stdev

METRICS_FILE = "results/metrics.json"
PARAMS_FILE = "params.yaml"
NOT_ABLATIONS = ("base.seed", "dag.arms")
HEADLINE = re.compile(r"^(bench|avg)\.[^.]+\.(mean|best|weakest|teachers\.mean|base|baseline|population\.(mean|best|weakest)"
                      r"|diff\.[a-z_]+\.delta)$")
PAIRED_KEYS = ("mean", "best", "weakest")
# Two-sided 95% Student-t quantiles by degrees of freedom (1..30); 1.96 beyond.
T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145, 2.131,
       2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


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


def t_interval(values: list[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): 95% Student-t interval of the mean; None with fewer than 2 values."""
    if len(values) < 2:
        return None
    centre, sd = mean(values), stdev(values)
    half = (T95[len(values) - 2] if len(values) - 1 <= len(T95) else 1.96) * sd / math.sqrt(len(values))
    return round(centre, 6), round(centre - half, 6), round(centre + half, 6)


def spread(values: list[float]) -> dict:
    return {"n": len(values), "mean": round(mean(values), 6), "sd": round(stdev(values), 6) if len(values) > 1 else 0.0,
            "min": min(values), "max": max(values)}


def summarize_study(found: list[dict]) -> dict:
    """{"groups": [...], "paired": [...], "ablations": [...]} (see the module docstring)."""
    if not found:
        raise StudyError("no finished experiment with results/metrics.json in `dvc exp show`. Fix: run experiments "
                         "first (dvc exp run / dvc queue start) and wait until they succeed.")
    ablations = ablation_keys(found)
    groups: dict[tuple[str, str], list[dict]] = {}
    for experiment in found:
        groups.setdefault(group_of(experiment, ablations), []).append(experiment)
    rows = []
    for (arms, ablation), members in sorted(groups.items()):
        keys = sorted({k for e in members for k, v in e["metrics"].items() if HEADLINE.match(k) and _is_number(v)})
        for key in keys:
            values = [float(e["metrics"][key]) for e in members if _is_number(e["metrics"].get(key))]
            row = {"arms": arms, "ablation": ablation, "key": key, **spread(values),
                   "seeds": sorted(e["params"].get("base.seed") for e in members if _is_number(e["metrics"].get(key)))}
            if ".diff." in key:
                row["interval"] = t_interval(values)
            rows.append(row)
    paired = []
    for ablation in sorted({a for _, a in groups}):
        population = {e["params"].get("base.seed"): e for e in groups.get(("population", ablation), [])}
        baseline = {e["params"].get("base.seed"): e for e in groups.get(("baseline", ablation), [])}
        seeds = sorted(set(population) & set(baseline), key=str)
        if not seeds:
            continue
        keys = sorted({k for k in population[seeds[0]]["metrics"] if k.rsplit(".", 1)[-1] in PAIRED_KEYS
                       and k.count(".") == 2 and _is_number(population[seeds[0]]["metrics"][k])})
        for key in keys:
            pairs = [(population[s]["metrics"].get(key), baseline[s]["metrics"].get(key)) for s in seeds]
            differences = [float(p) - float(b) for p, b in pairs if _is_number(p) and _is_number(b)]
            if differences:
                paired.append({"ablation": ablation, "key": key, "n": len(differences), "seeds": seeds,
                               "differences": [round(d, 6) for d in differences],
                               "mean": round(mean(differences), 6), "interval": t_interval(differences)})
    return {"ablations": ablations, "experiments": [e["name"] for e in found], "groups": rows, "paired": paired}


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def verdict(interval) -> str:
    if interval is None:
        return "needs >= 2 seeds"
    _, low, high = interval
    return "no detectable difference" if low <= 0 <= high else ("population higher" if low > 0 else "baseline higher")


def markdown(study: dict) -> str:
    lines = ["# Study across DVC experiments", "",
             f"{len(study['experiments'])} experiments: {', '.join(study['experiments'])}.",
             f"Ablation parameters: {', '.join(study['ablations']) or 'none (every experiment differs only by seed / arms)'}.",
             "", "## Mean and spread across seeds", "",
             "| arms | ablation | key | seeds | mean | sd | min | max | 95% t-interval |", "|---|---|---|---|---|---|---|---|---|"]
    for row in study["groups"]:
        interval = row.get("interval")
        shown = "" if interval is None else f"[{interval[1]:+.3f}, {interval[2]:+.3f}]"
        lines.append(f"| {row['arms']} | {row['ablation']} | {row['key']} | {row['n']} | {row['mean']:.3f} | "
                     f"{row['sd']:.3f} | {row['min']:.3f} | {row['max']:.3f} | {shown} |")
    lines += ["", "## Paired by seed: population - baseline", ""]
    if study["paired"]:
        lines += ["| ablation | key | seeds | per-seed differences | mean | 95% t-interval | verdict |",
                  "|---|---|---|---|---|---|---|"]
        for row in study["paired"]:
            interval = row["interval"]
            shown = "-" if interval is None else f"[{interval[1]:+.3f}, {interval[2]:+.3f}]"
            lines.append(f"| {row['ablation']} | {row['key']} | {row['n']} | {', '.join(f'{d:+.3f}' for d in row['differences'])} "
                         f"| {row['mean']:+.3f} | {shown} | {verdict(interval)} |")
    else:
        lines.append("No pairs: run population-only and baseline-only experiments with the same seeds "
                     "(`-S 'dag.arms=[population]'`, `-S 'dag.arms=[baseline]'`).")
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
        study = summarize_study(found)
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
