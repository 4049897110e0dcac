"""The CPU study's table and figure, from the runs committed under `study/runs/` (scripts/study.sh).

    python -m populora.report.study_runs study/runs --out study

Each run folder (`<control>-s<seed>/`) holds one arm's results: `run.json` (control, seed, wall
time), `params.yaml`, `metrics.json`, `dynamics/<arm>/summary.json` (accounting) and
`bench/<base|arm>/<benchmark>/<model>.json` (per-problem verdicts, answer diagnostics) and
`bench/<base|arm>/<benchmark>/<model>/answers.json` (which problems each diagnostic holds for),
and `training_answers.json` (the students' training answers per generation and task type:
answers, correct, copies; `python -m populora.bench.diagnostics --training`).

Per control and benchmark (CRUXEval-O/-I):
* per seed: the students' mean pass@1 (the baseline's one adapter is its student), the
  all-benchmarked-members mean beside it, minus the base model on the same problems;
* across seeds: the mean with a 95% Student-t interval (run-to-run drift, not problem sampling);
* between two controls: the difference of students' means with a **two-level bootstrap**: seeds
  resampled within each control, then problems resampled (the same draw for both controls,
  which answer the same problems), `BOOTSTRAP` draws, percentile interval; and each control
  against the base model the same way (the base's verdicts paired problem by problem), which,
  unlike the t-interval of "students - base", has an interval with one seed;
* accounting per adapter (mean over seeds of the run's totals): optimizer steps, trained
  tokens, rollouts with signal, ||B A|| moved; per student and teacher;
* answer diagnostics of the students: truncated, no answer, copies of the input or an
  argument, mean answer tokens, as shares of the problems;
* on CRUXEval, the same for the **gold answer's log-likelihood** (nats summed over its tokens, per
  problem; `per_problem_gold_logprob`), a continuous score that moves before a verdict flips;
* the same scores and comparisons **with copied answers counted wrong** (an answer that copies
  the input or one argument, `populora.bench.diagnostics`), for the base model too: a control
  that only learnt to echo its input scores no higher there. Runs without answers.json leave
  this reading out for their control;
* per run, the students' training answers by generation: how many copy what the task showed
  (code_o: the input or an argument; code_i: the output) and how many of those were right.

Writes `study.md`, `study.json` and `study.png` under `--out`.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from statistics import mean, stdev

import numpy as np
import yaml

from populora.bench.diagnostics import TRAINING_TYPES, copied_ids
from populora.core.io import write_json, write_text
from populora.core.refs import arm_refs
from populora.report import HELDOUT_VERDICTS
from populora.report.study_tables import BENCHES, DEFAULT_TITLE, READ_BENCHES, markdown, plot
from populora.heldout.pool import HELDOUT_TYPES, pool_task_type

BOOTSTRAP = 4000
ACCOUNTING = ("optimizer_steps", "trained_tokens", "rollouts_with_signal", "delta_norm")
DIAGNOSTICS = ("truncated", "no_answer", "copies_input", "copies_argument")


def nocopy(control: str) -> str:
    """The `-nocopy` twin of a control as scripts/study.sh names it (`1t1s-null` -> `1t1s-nocopy-null`)."""
    return control[: -len("-null")] + "-nocopy-null" if control.endswith("-null") else control + "-nocopy"


# the comparisons that answer the study's question (study/README.md: how to read the grid);
# the same again between `-nocopy` controls (no copyable task, no identity seed), never across the
# two: a `-nocopy` study runs at a later commit than the grid it would be compared with
_GRID_COMPARISONS = (("2t2s", "1t1s"), ("2t2s", "baseline"), ("1t1s", "baseline"), ("2t2s", "2t2s-noevo"),
                     ("2t2s", "2t2s-null"), ("1t1s", "1t1s-null"), ("baseline-roles", "baseline"), ("1t1s", "baseline-roles"))
COMPARISONS = _GRID_COMPARISONS + tuple((nocopy(left), nocopy(right)) for left, right in _GRID_COMPARISONS)
_GRID_ORDER = ("baseline", "baseline-roles", "1t1s", "2t2s", "2t2s-noevo", "1t1s-null", "2t2s-null")
CONTROL_ORDER = _GRID_ORDER + tuple(nocopy(control) for control in _GRID_ORDER)


class StudyRunsError(RuntimeError):
    """The run folders cannot be summarised; the message says why."""


def t_interval(values: list[float]) -> tuple[float, float, float] | None:
    """(mean, low, high): the 95% Student-t interval of the mean across seeds (run-to-run drift);
    None with fewer than 2 values."""
    from scipy.stats import t

    if len(values) < 2:
        return None
    centre, sd = mean(values), stdev(values)
    half = float(t.ppf(0.975, len(values) - 1)) * sd / math.sqrt(len(values))
    return round(centre, 6), round(centre - half, 6), round(centre + half, 6)


def load_run(folder: Path) -> dict:
    """One run: control, seed, arm, students and members, per-problem verdicts, accounting, diagnostics."""
    run = json.loads((folder / "run.json").read_text())
    params = yaml.safe_load((folder / "params.yaml").read_text())
    arm = params["dag"]["arms"][0]
    summary = json.loads((folder / "dynamics" / arm / "summary.json").read_text())
    verdicts: dict[str, dict[str, dict[str, int]]] = {}
    copy_free: dict[str, dict[str, dict[str, int]]] = {}
    gold: dict[str, dict[str, dict[str, float]]] = {}  # CRUXEval: the gold answer's log-likelihood per problem
    diagnostics: dict[str, dict[str, dict]] = {}
    for bench in BENCHES:  # the benchmark results; the held-out pool comes from the dynamics below
        results = sorted((folder / "bench" / arm / bench).glob("*.json"))
        base = folder / "bench" / "base" / bench / "base.json"
        for result_file in [*results, *([base] if base.is_file() else [])]:
            result = json.loads(result_file.read_text())
            model = "base" if result_file == base else result["model"]
            verdicts.setdefault(bench, {})[model] = result["per_problem"]
            if isinstance(result.get("per_problem_gold_logprob"), dict):  # absent where the engine scored none (vllm)
                gold.setdefault(bench, {})[model] = {k: float(v) for k, v in result["per_problem_gold_logprob"].items()}
            if model != "base":
                diagnostics.setdefault(bench, {})[model] = result.get("diagnostics") or {}
            answers = result_file.with_suffix("") / "answers.json"
            if answers.is_file():
                copy_free.setdefault(bench, {})[model] = without_copies(result["per_problem"], json.loads(answers.read_text()))
    refs_of = arm_refs(arm, params["population"]["teachers"], params["population"]["students"])
    curve = heldout_generations(folder / "dynamics" / arm / HELDOUT_VERDICTS, refs_of)
    if curve:  # the held-out pool, read as one more benchmark: the final generation's verdicts and the base's
        verdicts["heldout"] = {**curve["generations"][-1], "base": curve["base"]}
    first = next((b for b in READ_BENCHES if b in verdicts), None)
    models = sorted(m for m in verdicts.get(first, {}) if m != "base")
    # the roles as the run's own params assigned them (runs of older code record no role in their results)
    students = [m for m in models if m in {ref.name for ref in refs_of["students"]}]
    # paused_s: time the run spent stopped (SIGSTOP, to time something else on the machine), not running
    wall_s = run["wall_s"] - run.get("paused_s", 0) if run.get("wall_s") is not None else None
    return {"name": folder.name, "control": run["control"], "seed": run["seed"], "wall_s": wall_s,
            "attempts": int(run.get("attempts") or 1), "machine": run.get("machine"), "arm": arm,
            "models": models, "students": students, "verdicts": verdicts, "copy_free": copy_free, "gold": gold,
            "diagnostics": diagnostics, "summary": summary, "training": _read_optional(folder / "training_answers.json"),
            "generations": params["dag"]["generations"], "heldout_curve": curve.get("generations", [])}


def heldout_generations(path: Path, refs: dict) -> dict:
    """The held-out verdicts of a run (`dynamics/<arm>/heldout_verdicts.json`) keyed by model name
    (`population-student0`, as the benchmarks name models): `{"base": {...}, "generations": [{model:
    {task: 0|1}}, ...]}`; empty for runs without a pool."""
    doc = _read_optional(path)
    if not doc.get("base") or not doc.get("generations"):
        return {}
    names = {ref.slot: ref.name for group in refs.values() for ref in group}
    return {"base": doc["base"],
            "generations": [{names.get(slot, slot): table for slot, table in gen.items()} for gen in doc["generations"]]}


def _read_optional(path: Path) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def training_copy_rows(runs: list[dict]) -> list[dict]:
    """Per run and task type, per generation: the students' training answers, those that copy what
    the task showed, and the copies graded right (runs without training_answers.json: none)."""
    rows = []
    for run in runs:
        for task_type in TRAINING_TYPES:
            gens = [counts[task_type] for _, counts in sorted(run["training"].items()) if task_type in counts]
            if gens:
                rows.append({"run": run["name"], "control": run["control"], "type": task_type,
                             **{key: [g[key] for g in gens] for key in ("n", "correct", "copies", "copies_correct")}})
    return rows


def without_copies(per_problem: dict[str, int], flags: dict[str, list[str]]) -> dict[str, int]:
    """The verdicts with every answer that copies the input or one argument counted wrong."""
    copied = copied_ids(flags)
    return {task: int(bool(verdict) and task not in copied) for task, verdict in per_problem.items()}


# what a comparison compares: per-problem verdicts (pass@1), the same with copies counted wrong, and the
# gold answer's log-likelihood (nats summed over its tokens: continuous, so it moves before a verdict does)
SCORES = {"verdicts": "pass@1", "copy_free": "copies wrong", "gold": "gold log-likelihood"}


def _scored(runs: list[dict], bench: str, score: str) -> bool:
    """Whether every run has the verdicts `score` names for `bench`, for its models and the base."""
    return all(bench in r[score] and {"base", *r["models"]} <= set(r[score][bench]) for r in runs)


def _base_mean(run: dict, bench: str, score: str = "verdicts") -> float:
    """The base model's mean verdict on `bench` in one run."""
    return float(np.mean(list(run[score][bench]["base"].values())))


def load_runs(root: Path) -> list[dict]:
    folders = sorted(p for p in Path(root).iterdir() if (p / "run.json").is_file()) if Path(root).is_dir() else []
    if not folders:
        raise StudyRunsError(f"no run folders with run.json under {root}. Fix: run scripts/study.sh first.")
    return [load_run(folder) for folder in folders]


def score_matrix(runs: list[dict], bench: str, which: str = "students", score: str = "verdicts") -> tuple[np.ndarray, list[str]]:
    """[seeds, problems] of the per-problem mean verdict over each run's students (or all members);
    `score="copy_free"` counts copied answers wrong."""
    ids = sorted(runs[0][score][bench]["base"] if "base" in runs[0][score][bench]
                 else next(iter(runs[0][score][bench].values())))
    rows = []
    for run in runs:
        models = run["students"] if which == "students" else run["models"]
        table = run[score][bench]
        if any(set(table[m]) != set(ids) for m in models):
            raise StudyRunsError(f"{run['name']}: {bench} was scored on other problems than {runs[0]['name']}")
        rows.append([mean(table[m][i] for m in models) for i in ids])
    return np.array(rows, dtype=float), ids


def two_level_bootstrap(a: np.ndarray, b: np.ndarray, *, draws: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float, float]:
    """(difference, low, high): mean(a) - mean(b) with a 95% percentile interval from resampling
    seeds (rows, independently per side) and then problems (columns, one draw for both sides)."""
    rng = np.random.default_rng(seed)
    n_problems = a.shape[1]
    if b.shape[1] != n_problems:
        raise StudyRunsError("the two controls were scored on different numbers of problems")
    out = np.empty(draws)
    for k in range(draws):
        cols = rng.integers(0, n_problems, n_problems)
        rows_a = rng.integers(0, a.shape[0], a.shape[0])
        rows_b = rng.integers(0, b.shape[0], b.shape[0])
        out[k] = a[np.ix_(rows_a, cols)].mean() - b[np.ix_(rows_b, cols)].mean()
    low, high = np.percentile(out, [2.5, 97.5])
    return round(float(a.mean() - b.mean()), 6), round(float(low), 6), round(float(high), 6)


def _group(runs: list[dict]) -> dict[str, list[dict]]:
    groups: dict[str, list[dict]] = {}
    for run in sorted(runs, key=lambda r: (r["control"], r["seed"])):
        groups.setdefault(run["control"], []).append(run)
    return dict(sorted(groups.items(), key=lambda kv: (CONTROL_ORDER.index(kv[0]) if kv[0] in CONTROL_ORDER else 99, kv[0])))


def _interval(values: list[float]) -> dict:
    t = t_interval(values)
    return {"n": len(values), "mean": round(mean(values), 6), "sd": round(stdev(values), 6) if len(values) > 1 else None,
            "low": t[1] if t else None, "high": t[2] if t else None, "values": [round(v, 6) for v in values]}


def wall_by_machine(members: list[dict]) -> list[dict]:
    """A control's mean wall time per kind of machine its runs recorded (CPU features; `None`: not recorded):
    runs of one study can be drawn on machines several times apart in speed, whose mean means nothing."""
    kinds: dict = {}
    for run in members:
        if run["wall_s"] is not None:
            kinds.setdefault((run.get("machine") or {}).get("features"), []).append(float(run["wall_s"]))
    return [{"features": features, "n": len(walls), "mean_s": round(mean(walls), 1)} for features, walls in kinds.items()]


def control_rows(runs: list[dict]) -> list[dict]:
    """Per control: scores per benchmark (students, all members, minus base), accounting, diagnostics."""
    rows = []
    for control, members in _group(runs).items():
        row = {"control": control, "seeds": [r["seed"] for r in members], "arm": members[0]["arm"],
               "wall_s": _interval([float(r["wall_s"]) for r in members if r["wall_s"] is not None] or [math.nan]),
               "wall_by_machine": wall_by_machine(members), "bench": {}, "accounting": {}, "diagnostics": {}}
        for bench in READ_BENCHES:
            if not all(bench in r["verdicts"] for r in members):
                continue
            students, _ = score_matrix(members, bench, "students")
            everyone, _ = score_matrix(members, bench, "members")
            base = _base_mean(members[0], bench)
            row["bench"][bench] = {
                "students": _interval(list(students.mean(axis=1))), "members": _interval(list(everyone.mean(axis=1))),
                "students_minus_base": _interval(list(students.mean(axis=1) - base)), "base": round(base, 6),
                "n_problems": students.shape[1]}
            if _scored(members, bench, "copy_free"):
                free, _ = score_matrix(members, bench, "students", "copy_free")
                free_base = _base_mean(members[0], bench, "copy_free")
                row["bench"][bench]["copy_free"] = {
                    "students": _interval(list(free.mean(axis=1))),
                    "students_minus_base": _interval(list(free.mean(axis=1) - free_base)),
                    "base": round(free_base, 6)}
            if _scored(members, bench, "gold"):
                gold, _ = score_matrix(members, bench, "students", "gold")
                gold_base = _base_mean(members[0], bench, "gold")
                row["bench"][bench]["gold"] = {
                    "students": _interval(list(gold.mean(axis=1))),
                    "students_minus_base": _interval(list(gold.mean(axis=1) - gold_base)), "base": round(gold_base, 6)}
            diag = {key: [] for key in (*DIAGNOSTICS, "mean_answer_tokens")}
            for run in members:
                for model in run["students"]:
                    d = run["diagnostics"].get(bench, {}).get(model) or {}
                    if d.get("n"):
                        for key in DIAGNOSTICS:
                            diag[key].append(d[key] / d["n"])
                        diag["mean_answer_tokens"].append(d["mean_answer_tokens"])
            row["diagnostics"][bench] = {key: round(mean(v), 4) for key, v in diag.items() if v}
        for role in ("students", "teachers"):
            for what in ACCOUNTING:
                values = [r["summary"].get(f"per_adapter.{role}.{what}") for r in members]
                values = [v for v in values if v is not None]
                if values:
                    row["accounting"][f"{role}.{what}"] = round(mean(values), 4)
        rows.append(row)
    return rows


def base_matrix(runs: list[dict], bench: str, score: str = "verdicts") -> np.ndarray:
    """[runs, problems] of the base model's verdicts on `bench` as each run recorded them (the same
    model and prompts: rows that agree, so resampling them changes nothing), problems in
    `score_matrix`'s order."""
    ids = sorted(runs[0][score][bench]["base"])
    return np.array([[run[score][bench]["base"][i] for i in ids] for run in runs], dtype=float)


def comparison(left: str, right: str, left_runs: list[dict], right_runs: list[dict], bench: str,
               score: str = "verdicts") -> dict:
    """`left` minus `right` on `bench`: the difference of the students' mean pass@1 with the
    two-level bootstrap interval (seeds within each side, then problems); also what
    `populora.report.study` reports between the arms of DVC experiments. `right="base"`: the
    control's students against the bare base model on the same problems (paired by problem)."""
    a, _ = score_matrix(left_runs, bench, score=score)
    b = base_matrix(right_runs, bench, score) if right == "base" else score_matrix(right_runs, bench, score=score)[0]
    delta, low, high = two_level_bootstrap(a, b)
    return {"left": left, "right": right, "bench": bench, "score": SCORES[score],
            "seeds": [a.shape[0], b.shape[0]], "delta": delta, "low": low, "high": high,
            "verdict": "no detectable difference" if low <= 0 <= high else (f"{left} higher" if low > 0 else f"{right} higher")}


def comparisons(runs: list[dict]) -> list[dict]:
    """Every pair of COMPARISONS whose controls both ran, then every control against the base model."""
    groups = _group(runs)
    out = []
    pairs = [(left, right) for left, right in COMPARISONS if left in groups and right in groups]
    for left, right in pairs + [(control, "base") for control in groups]:
        # against the base: its verdicts come with every run of the control
        right_runs = groups[left] if right == "base" else groups[right]
        both = groups[left] + right_runs
        for score in SCORES:
            for bench in READ_BENCHES:
                if not all(bench in r["verdicts"] for r in both):
                    continue
                if score != "verdicts" and not _scored(both, bench, score):
                    continue
                out.append(comparison(left, right, groups[left], right_runs, bench, score))
    return out


def run_rows(runs: list[dict]) -> list[dict]:
    """Per run: the students' mean score per benchmark (raw and with copies counted wrong), the
    students' copying share, the accounting per role (the run's totals per adapter), wall time and
    the machine it was taken on (where the run recorded it);
    first a row for the base model (the same in every run)."""
    rows = []
    for run in [runs[0], *runs] if runs else []:
        is_base = not rows
        row = {"run": "base" if is_base else run["name"], "control": None if is_base else run["control"],
               "seed": None if is_base else run["seed"], "wall_s": None if is_base else run["wall_s"],
               "attempts": None if is_base else run.get("attempts", 1),
               "machine": None if is_base else run["machine"], "bench": {}}
        models = ["base"] if is_base else run["students"]
        for bench in READ_BENCHES:
            if bench not in run["verdicts"]:
                continue
            entry = {"pass@1": round(float(np.mean([np.mean(list(run["verdicts"][bench][m].values())) for m in models])), 6)}
            if all(m in run["copy_free"].get(bench, {}) for m in models):
                entry["copies_wrong"] = round(float(np.mean([np.mean(list(run["copy_free"][bench][m].values()))
                                                             for m in models])), 6)
            if not is_base:
                diag = [run["diagnostics"].get(bench, {}).get(m) or {} for m in models]
                for key in ("copies_input", "copies_argument"):
                    shares = [d[key] / d["n"] for d in diag if d.get("n")]
                    if shares:
                        entry[key] = round(mean(shares), 6)
            row["bench"][bench] = entry
        if not is_base:
            row["accounting"] = {role: {what: run["summary"].get(f"per_adapter.{role}.{what}") for what in ACCOUNTING}
                                 for role in ("students", "teachers")}
        rows.append(row)
    return rows


def curve_matrix(runs: list[dict], gen: int, ids: list[str] | None = None) -> np.ndarray:
    """[seeds, tasks] of the students' mean held-out verdict after generation `gen` (on `ids`: every task)."""
    ids = ids if ids is not None else sorted(runs[0]["verdicts"]["heldout"]["base"])
    return np.array([[mean(run["heldout_curve"][gen][m][i] for m in run["students"]) for i in ids] for run in runs], dtype=float)


def heldout_curves(runs: list[dict]) -> dict:
    """The learning curves on the held-out pool: per control and generation the students' accuracy per
    seed (mean and t-interval), the base's, and per generation the comparisons of COMPARISONS and each
    control against the base (two-level bootstrap). Empty when no run has a pool."""
    groups = {c: rs for c, rs in _group(runs).items() if all(r["heldout_curve"] for r in rs)}
    if not groups:
        return {}
    base = next(iter(groups.values()))[0]["verdicts"]["heldout"]["base"]
    out = {"base": round(float(np.mean(list(base.values()))), 6), "n_tasks": len(base), "controls": {}, "comparisons": []}
    for control, members in groups.items():
        gens = min(len(r["heldout_curve"]) for r in members)
        out["controls"][control] = [_interval(list(curve_matrix(members, g).mean(axis=1))) for g in range(gens)]
    out["by_type"] = curves_by_type(groups, base, {c: len(points) for c, points in out["controls"].items()})
    base_rows = np.array([[base[i] for i in sorted(base)]], dtype=float)
    pairs = [(left, right) for left, right in COMPARISONS if left in groups and right in groups]
    for left, right in pairs + [(control, "base") for control in groups]:
        gens = len(out["controls"][left]) if right == "base" else min(len(out["controls"][left]), len(out["controls"][right]))
        for g in range(gens):
            delta, low, high = two_level_bootstrap(curve_matrix(groups[left], g),
                                                   base_rows if right == "base" else curve_matrix(groups[right], g))
            out["comparisons"].append({"left": left, "right": right, "generation": g, "delta": delta, "low": low,
                                       "high": high})
    return out


def curves_by_type(groups: dict[str, list[dict]], base: dict[str, int], gens: dict[str, int]) -> dict:
    """The learning curves split by the pool's task types (`code_o`, `code_i`): per type its task count,
    the base's accuracy and per control the students' accuracy per generation (mean and t-interval over
    seeds). A type at the floor for every model carries no signal, which the pooled curve hides."""
    out = {}
    for task_type in [t for t in HELDOUT_TYPES if t in {pool_task_type(i) for i in base}]:
        ids = sorted(t for t in base if pool_task_type(t) == task_type)
        out[task_type] = {"n_tasks": len(ids), "base": round(float(np.mean([base[t] for t in ids])), 6),
                          "controls": {control: [_interval(list(curve_matrix(members, g, ids).mean(axis=1)))
                                                 for g in range(gens[control])] for control, members in groups.items()}}
    return out


def summarize(runs: list[dict]) -> dict:
    return {"runs": [r["name"] for r in runs], "controls": control_rows(runs), "comparisons": comparisons(runs),
            "per_run": run_rows(runs), "training_copies": training_copy_rows(runs), "heldout_curves": heldout_curves(runs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", help="folder of run folders (study/runs)")
    parser.add_argument("--out", required=True, help="folder for study.md, study.json, study.png")
    parser.add_argument("--title", default=DEFAULT_TITLE, help=f"study.md's heading (default: {DEFAULT_TITLE!r})")
    args = parser.parse_args(argv)
    try:
        study = summarize(load_runs(Path(args.runs)))
    except (StudyRunsError, OSError, KeyError, ValueError) as error:
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
