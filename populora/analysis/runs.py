"""The committed runs of a study, read into the analyser's run records (`populora.analysis.comparisons`).

    python -m populora.analysis study/learning/runs --plan study/learning/plan.yaml --out study/learning

Each run folder (`<control>-s<seed>/`, written by scripts/study.sh) holds one arm's results: `run.json`
(control, seed, wall time), `params.yaml`, `dynamics/<arm>/{summary,dynamics,heldout_verdicts}.json`
(accounting, the per-generation rows, the held-out pool's verdicts), `bench/<base|arm>/<benchmark>/<model>.json`
(per-problem verdicts, answer diagnostics, the gold answer's log-likelihood) with `<model>/answers.json`
(which problems each diagnostic holds for), and `training_answers.json` (the students' training answers
per generation and task type). `populora.analysis.experiments` makes the same records from `dvc exp show`.

A run record: name, control, seed, arm, models and students, `verdicts` / `copy_free` / `gold`
({benchmark: {model: {problem: score}}}, the held-out pool as the benchmark `heldout`: its last
generation), `heldout_curve` (per generation {model: verdicts}), `summary`, `rows` (dynamics.json),
`diagnostics`, `training`, `params` (flat), wall time and machine, `passk` (pass@k of the final students on the
pool, where the study measured it: `passk/passk.json`). Missing parts are empty.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from populora.bench.diagnostics import copied_ids
from populora.core.benchmark_data import TOGETHER
from populora.core.refs import arm_refs
from populora.report import DYNAMICS_SUMMARY, DYNAMICS_TABLE, HELDOUT_VERDICTS

BENCHES = ("cruxeval_o", "cruxeval_i")  # the benchmarks the study reads, in table order
READ_BENCHES = ("heldout", *BENCHES)  # the held-out pool (a run's final generation, where it has one) first


class StudyRunsError(RuntimeError):
    """The run folders cannot be summarised; the message says why."""


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


def empty_run(name: str, control: str, seed: int, arm: str, students: list[str], models: list[str]) -> dict:
    """A run record with nothing measured yet (the fields every reader may look up)."""
    return {
        "name": name,
        "control": control,
        "seed": seed,
        "arm": arm,
        "models": models,
        "students": students,
        "verdicts": {},
        "copy_free": {},
        "gold": {},
        "pass_rate": {},
        "diagnostics": {},
        "summary": {},
        "rows": [],
        "training": {},
        "params": {},
        "wall_s": None,
        "attempts": 1,
        "machine": None,
        "heldout_curve": [],
        "generations": None,
        "passk": {},
    }


def load_run(folder: Path) -> dict:
    """One committed run folder as a run record (see the module docstring)."""
    run = json.loads((folder / "run.json").read_text())
    params = yaml.safe_load((folder / "params.yaml").read_text())
    arm = params["dag"]["arms"][0]
    dynamics = folder / "dynamics" / arm
    tables = _bench_tables(folder, arm)  # the held-out pool comes from the dynamics below
    refs_of = arm_refs(arm, params["population"]["teachers"], params["population"]["students"])
    curve = heldout_generations(dynamics / HELDOUT_VERDICTS, refs_of)
    pass_rate = _add_heldout(tables["verdicts"], curve)
    models, students = _models_and_students(tables["verdicts"], refs_of)
    rows = _read_optional(dynamics / DYNAMICS_TABLE)
    return {
        **empty_run(folder.name, run["control"], run["seed"], arm, students, models),
        "wall_s": _wall_s(run),
        "attempts": int(run.get("attempts") or 1),
        "machine": run.get("machine"),
        **tables,
        "pass_rate": pass_rate,
        "summary": _read_optional(dynamics / DYNAMICS_SUMMARY),
        "rows": rows if isinstance(rows, list) else [],
        "training": _read_optional(folder / "training_answers.json"),
        "params": flatten(params),
        "generations": params["dag"]["generations"],
        "heldout_curve": curve.get("generations", []),
        "passk": read_passk(folder / "passk" / "passk.json"),
    }


def _bench_dirs(folder: Path, arm: str, bench: str) -> tuple[Path, Path]:
    """The folders holding the arm's and the base's results of `bench`: a job of its own, or the together job
    (bench.together)."""
    own = [folder / "bench" / side / bench for side in (arm, "base")]
    arm_dir, base_dir = (
        path if path.is_dir() and not (path / "_together.json").is_file() else path.parent / TOGETHER / bench
        for path in own
    )
    return arm_dir, base_dir


def _bench_tables(folder: Path, arm: str) -> dict[str, dict]:
    """The benchmark results of a run folder as the record's `verdicts`, `copy_free`, `gold` and `diagnostics`
    ({benchmark: {model: ...}}; the base model as `base`, with no diagnostics)."""
    verdicts: dict[str, dict[str, dict[str, int]]] = {}
    copy_free: dict[str, dict[str, dict[str, int]]] = {}
    gold: dict[str, dict[str, dict[str, float]]] = {}
    diagnostics: dict[str, dict[str, dict]] = {}
    for bench in BENCHES:
        arm_dir, base_dir = _bench_dirs(folder, arm, bench)
        # `_*.json` are notes, not results
        results = sorted(path for path in arm_dir.glob("*.json") if not path.name.startswith("_"))
        base = base_dir / "base.json"
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
                copy_free.setdefault(bench, {})[model] = without_copies(
                    result["per_problem"], json.loads(answers.read_text())
                )
    return {"verdicts": verdicts, "copy_free": copy_free, "gold": gold, "diagnostics": diagnostics}


def _add_heldout(verdicts: dict, curve: dict) -> dict[str, dict[str, dict[str, float]]]:
    """Add the held-out pool to `verdicts` as one more benchmark, `heldout` (the final generation's verdicts and
    the base's), and return its pass rates over `heldout.samples` answers at T=1 (the primary endpoint) as
    {"heldout": {model: {task: rate}}}; {} where the run has no pool or no pass rates."""
    pass_rate: dict[str, dict[str, dict[str, float]]] = {}
    if curve:
        verdicts["heldout"] = {**curve["generations"][-1], "base": curve["base"]}
        if curve.get("pass_rates"):
            pass_rate["heldout"] = {**curve["pass_rates"][-1], "base": curve["base_pass_rates"]}
    return pass_rate


def _models_and_students(verdicts: dict, refs_of: dict) -> tuple[list[str], list[str]]:
    """The run's models (all but the base, as the first benchmark read names them, sorted) and which of them
    are students."""
    first = next((b for b in READ_BENCHES if b in verdicts), None)
    models = sorted(m for m in (verdicts[first] if first is not None else {}) if m != "base")
    # the roles as the run's own params assigned them (runs of older code record no role in their results)
    students = [m for m in models if m in {ref.name for ref in refs_of["students"]}]
    return models, students


def _wall_s(run: dict) -> float | None:
    """The run's wall time less the time it spent paused (`paused_s`: stopped by SIGSTOP, to time something
    else on the machine, not running); None where not recorded."""
    return run["wall_s"] - run.get("paused_s", 0) if run.get("wall_s") is not None else None


def read_passk(path: Path) -> dict:
    """A run's pass@k on the pool (`passk/passk.json`, `populora.analysis.passk`, scripts/study.sh STUDY_PASSK):
    `{"samples", "ks", "students": {part: {k: value}}, "base": {...} or None, "base_id"}`; {} where not measured.
    `base_id`: which base the figures' base curve is (its DVC hash, `passk/base_id` beside them; None where absent):
    each machine type makes a warm base of its own."""
    doc = _read_optional(path)
    if not doc.get("groups"):
        return {}
    base_id = path.parent / "base_id"
    return {
        "samples": doc["samples"],
        "ks": doc["ks"],
        "students": next(iter(doc["groups"].values())),
        "base": (doc.get("members") or {}).get("base"),
        "base_id": base_id.read_text().strip() if base_id.is_file() else None,
        "baselines": doc.get("baselines") or {},
    }


def heldout_generations(path: Path, refs: dict) -> dict:
    """The held-out verdicts of a run (`dynamics/<arm>/heldout_verdicts.json`) keyed by model name
    (`population-student0`, as the benchmarks name models): `{"base": {...}, "generations": [{model:
    {task: 0|1}}, ...]}`, and where the final generation was sampled at temperature 1 `base_pass_rates` and
    `pass_rates` alike ({task: rate}); empty for runs without a pool."""
    doc = _read_optional(path)
    if not doc.get("base") or not doc.get("generations"):
        return {}
    names = {ref.slot: ref.name for group in refs.values() for ref in group}
    out = {
        "base": doc["base"],
        "generations": [{names.get(slot, slot): table for slot, table in gen.items()} for gen in doc["generations"]],
    }
    rates = doc.get("pass_rates") or []
    if doc.get("base_pass_rates") and rates and rates[-1]:  # the final generation was sampled at temperature 1
        out["base_pass_rates"] = doc["base_pass_rates"]
        out["pass_rates"] = [{names.get(slot, slot): table for slot, table in gen.items()} for gen in rates]
    return out


def _read_optional(path: Path):
    return json.loads(path.read_text()) if path.is_file() else {}


def without_copies(per_problem: dict[str, int], flags: dict[str, list[str]]) -> dict[str, int]:
    """The verdicts with every answer that copies the input or one argument counted wrong."""
    copied = copied_ids(flags)
    return {task: int(bool(verdict) and task not in copied) for task, verdict in per_problem.items()}


def load_runs(root: Path) -> list[dict]:
    """Every run folder (one with run.json) under `root`, in name order."""
    folders = sorted(p for p in Path(root).iterdir() if (p / "run.json").is_file()) if Path(root).is_dir() else []
    if not folders:
        raise StudyRunsError(f"no run folders with run.json under {root}. Fix: run scripts/study.sh first.")
    return [load_run(folder) for folder in folders]
