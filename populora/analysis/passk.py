"""pass@k on the held-out pool, k up to `--samples` (64 by default), for the base model and runs' final
students: does RL widen what is solvable (pass@64 rises) or only sharpen what already was (pass@1 rises,
pass@64 stays or falls)? (issue 51)

    python -m populora.analysis.passk --pool study/pool-v2/pool.jsonl --params params.yaml \
        --run 2t2s-s11=results/population --out results/passk
    python -m populora.analysis.passk --pool study/pool-v2/pool.jsonl --out study/question/passk-base   # the base only

`--run LABEL=PATH` (repeatable): PATH is a checkpoint folder (`results/<arm>/genNNN/checkpoint`) or an
arm's folder (`results/<arm>`: its last generation's checkpoint); its students answer as trained in that
generation (`populora.core.state.trained_adapter_dir`), on the base they were trained on (`--base-model`;
default `results/warm_base` where the run made one, else `results/base_model`; a warm-started run's raw base
is refused), which is also the base member. Each member answers every pool task `--samples`
times at `--temperature` (1.0) with the solver's settings and the pool's own worked examples
(`populora.heldout.scoring.pass_counts`, the machinery of the pool's mean pass rate; the shared-prefix
sampler prefills each task's prompt once per adapter for all its samples), the sandbox grades them, and
pass@k is the unbiased estimate from the n samples (`populora.heldout.scoring.pass_at_k`, Chen et al.
2021) averaged over the pool's tasks; a run's curve is its students' mean. Beside it, what reading nothing
earns (`populora.analysis.baselines`): the best k constants, k answers a task being k different constants
(`best_at_k`, where the baselines have it: `--baselines` a file made with `--ks`, or computed here), else the
best single constant (one constant tried k times is one try).

Cost: members x tasks x samples answers (the base and two students on a 256-task pool at 64 samples:
49,152 answers). `--max-tasks` scores a seeded subsample of the pool, each type in turn.

Writes `<out>/passk.json` (per member and run: pass@k for every k of `--ks`, by task type too; every
task's count of right answers; the baselines; the command) and `<out>/passk.png` (the curves, k on a log
scale, by task type beside).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from pathlib import Path
from statistics import mean
from typing import Any

from populora.core.io import read_jsonl, write_figure, write_json
from populora.core.paths import check_adapter_base, model_base
from populora.core.state import load_state, trained_adapter_dir
from populora.heldout.pool import BASE
from populora.heldout.scoring import pass_at_k_curve

log = logging.getLogger("passk")
DEFAULT_KS = (1, 2, 4, 8, 16, 32, 64)


def checkpoint_of(path: Path) -> Path:
    """A checkpoint folder as given, or an arm folder's last generation's checkpoint."""
    path = Path(path)
    if (path / "state.json").is_file():
        return path
    gens = sorted(p for p in path.glob("gen[0-9][0-9][0-9]") if (p / "checkpoint" / "state.json").is_file())
    if not gens:
        raise ValueError(f"{path} is neither a checkpoint (state.json) nor an arm folder with genNNN/checkpoint")
    return gens[-1] / "checkpoint"


def ks_for(samples: int, ks=DEFAULT_KS) -> list[int]:
    """The ks that `samples` answers can estimate (k <= n), `samples` itself included."""
    return sorted({k for k in ks if 1 <= k <= samples} | {samples})


def subsample(pool: list[dict], max_tasks: int | None, seed: int) -> list[dict]:
    """At most `max_tasks` pool tasks, the types taken in turn (each shuffled with `seed`), in pool order."""
    if not max_tasks or len(pool) <= max_tasks:
        return list(pool)
    rng = random.Random(seed)
    by_type: dict[str, list[str]] = {}
    for task in pool:
        by_type.setdefault(task["type"], []).append(task["task_id"])
    for ids in by_type.values():
        rng.shuffle(ids)
    keep: list[str] = []
    while len(keep) < max_tasks:
        for ids in by_type.values():
            if ids and len(keep) < max_tasks:
                keep.append(ids.pop(0))
    kept = set(keep)
    return [t for t in pool if t["task_id"] in kept]


def curves(
    counts: dict[str, dict[str, int]], pool: list[dict], samples: int, ks: list[int], groups: dict[str, list[str]]
) -> dict:
    """Per member and per group (a run's students: the mean of its members' curves) pass@k, overall and by
    task type: `{"members": {m: {"all": {k: v}, "<type>": {...}}}, "groups": {...}}` (k as text, JSON keys)."""
    types = list(dict.fromkeys(t["type"] for t in pool))
    ids = {"all": [t["task_id"] for t in pool], **{tt: [t["task_id"] for t in pool if t["type"] == tt] for tt in types}}

    def member_curve(member: str) -> dict:
        return {
            part: {str(k): v for k, v in pass_at_k_curve({i: counts[member][i] for i in task_ids}, samples, ks).items()}
            for part, task_ids in ids.items()
        }

    members = {m: member_curve(m) for m in counts}
    grouped = {
        label: {part: {str(k): round(mean(members[m][part][str(k)] for m in names), 6) for k in ks} for part in ids}
        for label, names in groups.items()
        if names
    }
    return {"members": members, "groups": grouped}


def plot_curves(doc: dict, path: Path) -> None:
    """pass@k against k (log scale): the base, every run's students (mean), the best constant; one panel
    for the whole pool and one per task type."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parts = ["all", *doc["types"]]
    fig, axes = plt.subplots(1, len(parts), figsize=(4.6 * len(parts), 4.0), squeeze=False)
    ks = doc["ks"]
    for ax, part in zip(axes[0], parts):
        if BASE in doc["members"]:
            ax.plot(
                ks,
                [100 * doc["members"][BASE][part][str(k)] for k in ks],
                color="tab:red",
                ls="--",
                marker="o",
                ms=3,
                label="base model",
            )
        for label, curve in doc["groups"].items():
            ax.plot(ks, [100 * curve[part][str(k)] for k in ks], marker="o", ms=3, label=f"{label} (students)")
        _pass_at_k_axes(ax, ks, doc.get("baselines") or {}, part, "pass@k (points)")
        n = doc["n_tasks"] if part == "all" else sum(t == part for t in doc["task_types"])
        ax.set_title(
            f"held-out pool, {'all types' if part == 'all' else part} ({n} tasks, n={doc['samples']})", fontsize=9
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    write_figure(path, fig)
    plt.close(fig)


def _pass_at_k_axes(ax, ks: list[int], baselines: dict, part: str, ylabel: str) -> None:
    """A pass@k panel's frame: what reading nothing earns (the best k constants where the baselines have them,
    else the best single constant's line), k on a log2 axis."""
    at_k = [share for k in ks if (share := constant_share_at_k(baselines, part, k)) is not None]
    best = constant_share(baselines, part)
    if len(at_k) == len(ks):
        ax.plot(ks, [100 * share for share in at_k], color="black", ls=":", lw=1.2, label="best k constants")
    elif best is not None:
        ax.axhline(100 * best, color="black", ls=":", lw=1.2, label="best constant answer (k = 1)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_xlabel("k (answers)")
    ax.set_ylabel(ylabel)


def constant_share(baselines: dict, part: str) -> float | None:
    """The best constant answer's share of the pool (one constant per type) or of one type."""
    rows = [v for t, v in baselines.items() if part in ("all", t)]
    if not rows:
        return None
    return sum(v["best"]["correct"] for v in rows) / sum(v["n_tasks"] for v in rows)


def passk(
    params,
    pool: list[dict],
    base_model: Path,
    runs: dict[str, Path],
    *,
    samples: int,
    ks: list[int],
    temperature: float = 1.0,
    seed: int = 0,
    with_base: bool = True,
) -> dict:
    """Answer, grade and estimate (see the module docstring); returns the passk.json document."""
    from populora.heldout.scoring import pass_counts
    from populora.lm.engines import load_sampler
    from populora.verifier import sandbox_for

    adapters: dict[str, Path] = {}
    groups: dict[str, list[str]] = {}
    sources: dict[str, dict] = {}
    for label, path in runs.items():
        checkpoint = checkpoint_of(path)
        state = load_state(checkpoint)
        groups[label] = []
        sources[label] = {
            "checkpoint": str(checkpoint),
            "generation": state.generation,
            "students": list(state.students),
        }
        for slot in state.students:
            name = f"{label}.{slot}"
            adapters[name] = trained_adapter_dir(checkpoint, state, slot)
            groups[label].append(name)
    members = [*adapters, *([None] if with_base else [])]
    if not members:
        raise ValueError("nothing to score: give --run LABEL=PATH, or leave out --no-base")
    log.info(
        "%d members x %d tasks x %d samples: %d answers",
        len(members),
        len(pool),
        samples,
        len(members) * len(pool) * samples,
    )
    with sandbox_for(params.verify) as sandbox:
        tokenizer, model = load_sampler(base_model, adapters, params)
        counts = pass_counts(
            params, model, tokenizer, pool, members, sandbox, samples=samples, temperature=temperature, seed=seed
        )
    return {
        "samples": samples,
        "ks": ks,
        "temperature": temperature,
        "seed": seed,
        "n_tasks": len(pool),
        "types": list(dict.fromkeys(t["type"] for t in pool)),
        "task_types": [t["type"] for t in pool],
        "runs": sources,
        **curves(counts, pool, samples, ks, groups),
        "counts": counts,
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from populora.config import ParamsError
    from populora.verifier import IsolationError

    try:
        doc = _measure(args)
    except (ParamsError, ValueError, OSError, IsolationError) as error:
        print(f"passk: {error}", file=sys.stderr)
        return 1
    doc["pool"] = args.pool
    doc["command"] = "python -m populora.analysis.passk " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "passk.json", doc)
    plot_curves(doc, out / "passk.png")
    print(f"pass@k in {out}/passk.json, passk.png: {_ends_of_curves(doc)}", file=sys.stderr)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pool", required=True, help="the held-out pool (jsonl with worked examples, e.g. pool v2)")
    parser.add_argument("--params", default="params.yaml", help="the run's params (solver, verifier, engine settings)")
    parser.add_argument(
        "--base-model",
        help="the base the runs' adapters were trained on (default: results/warm_base where it exists, else "
        "results/base_model: populora.core.paths.model_base); the base member answers on it",
    )
    parser.add_argument(
        "--run",
        action="append",
        default=[],
        metavar="LABEL=PATH",
        help="a run's final students: a checkpoint folder or results/<arm> (repeatable)",
    )
    parser.add_argument("--samples", type=int, default=64, help="answers per task and member, n (default 64)")
    parser.add_argument("--ks", nargs="+", type=int, default=list(DEFAULT_KS), help="the ks reported (k <= samples)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (and the --max-tasks subsample's)")
    parser.add_argument("--max-tasks", type=int, default=None, help="score a seeded subsample of the pool")
    parser.add_argument("--no-base", action="store_true", help="leave the base model out (scored once elsewhere)")
    parser.add_argument(
        "--baselines", help="the pool's pool_baselines JSON (populora.analysis.baselines); default: computed"
    )
    parser.add_argument("--out", required=True, help="folder for passk.json and passk.png")
    return parser


def _parse_runs(items: list[str]) -> dict[str, Path]:
    """`--run LABEL=PATH` arguments as label -> path; ValueError on one without a label or a path."""
    runs = {}
    for item in items:
        label, sep, path = item.partition("=")
        if not sep or not label or not path:
            raise ValueError(f"--run takes LABEL=PATH, got {item!r}")
        runs[label] = Path(path)
    return runs


def _measure(args: argparse.Namespace) -> dict:
    """The passk.json document of the command line `args`, less the pool's path and the command; the
    arguments are checked before anything is loaded."""
    from populora.analysis.baselines import pool_baselines
    from populora.config import load_params

    if args.samples < 1:
        raise ValueError(f"--samples must be 1 or more, got {args.samples}")
    runs = _parse_runs(args.run)
    params = load_params(args.params)
    whole = read_jsonl(args.pool)
    pool = subsample(whole, args.max_tasks, args.seed)
    if not pool:
        raise ValueError(f"{args.pool} holds no task")
    base_model = Path(args.base_model) if args.base_model else model_base("results")
    check_adapter_base(base_model)
    doc = passk(
        params,
        pool,
        base_model,
        runs,
        samples=args.samples,
        ks=ks_for(args.samples, args.ks),
        temperature=args.temperature,
        seed=args.seed,
        with_base=not args.no_base,
    )
    doc["base_model"] = str(base_model)
    if args.baselines and len(pool) == len(whole):  # the file's figures are the whole pool's
        doc["baselines"] = json.loads(Path(args.baselines).read_text())["by_type"]
    else:
        doc["baselines"] = pool_baselines(pool, params.verify, ks=doc["ks"])
    return doc


def _ends_of_curves(doc: dict) -> dict[str, dict[str, float]]:
    """pass@k at the smallest and the largest k, for the base (where scored) and every run's students: the
    command's one-line summary."""
    shown = {**({BASE: doc["members"][BASE]} if BASE in doc["members"] else {}), **doc["groups"]}
    return {
        name: {f"pass@{k}": curve["all"][str(k)] for k in (doc["ks"][0], doc["ks"][-1])}
        for name, curve in shown.items()
    }


# --- across a study's runs (populora.analysis.comparisons: study.json `passk`, a table and a figure panel) ---------


def constant_share_at_k(baselines: dict, part: str, k: int) -> float | None:
    """The best k constants' share (`best_at_k`, populora.analysis.baselines) of the pool (k per type) or of one
    type; None where the baselines lack k."""
    rows = [v for t, v in baselines.items() if part in ("all", t)]
    if not rows or any(str(k) not in (v.get("best_at_k") or {}) for v in rows):
        return None
    return sum(v["best_at_k"][str(k)]["correct"] for v in rows) / sum(v["n_tasks"] for v in rows)


def with_pool_baselines(summary: dict, pool_baselines: dict) -> dict:
    """`summary` (passk_summary's) with the plan's pool baselines in place of the runs' own where those hold the
    best k constants (`best_at_k`): runs measured before that control existed carry the single constant only."""
    if summary and any("best_at_k" in row for row in pool_baselines.values()):
        return {**summary, "baselines": pool_baselines}
    return summary


def passk_summary(groups: dict[str, list[dict]], pairs=()) -> dict:
    """Per control and k, the final students' pass@k on the pool over the seeds that measured it (mean,
    95% t-interval), the base's curve (from the run that measured it; `bases` by base id where runs measured
    more than one base, and then no single `base`), and between the controls of `pairs`
    Welch's interval at the smallest and the largest k; {} where no run measured pass@k (run records'
    `passk`, `populora.analysis.runs.read_passk`)."""
    from populora.analysis.proposals import summary
    from populora.core.stats import welch_interval

    measured = {c: [r for r in runs if (r.get("passk") or {}).get("students")] for c, runs in groups.items()}
    measured = {c: runs for c, runs in measured.items() if runs}
    if not measured:
        return {}
    every = [r["passk"] for runs in measured.values() for r in runs]
    ks = sorted(set.intersection(*(set(p["ks"]) for p in every)))
    # one curve per base (runs on two machine types trained on two warm bases): a single one is "the base"
    bases = {p.get("base_id"): p["base"]["all"] for p in every if p.get("base")}
    only = next(iter(bases.values())) if len(bases) == 1 else None
    values = {c: {k: [r["passk"]["students"]["all"][str(k)] for r in runs] for k in ks} for c, runs in measured.items()}
    out: dict[str, Any] = {
        "ks": ks,
        "samples": sorted({p["samples"] for p in every}),
        "base": {str(k): only[str(k)] for k in ks} if only else None,
        "bases": {str(i): {str(k): curve[str(k)] for k in ks} for i, curve in bases.items()} if len(bases) > 1 else {},
        "baselines": next((p["baselines"] for p in every if p.get("baselines")), {}),
        "controls": {c: {str(k): summary(v[k]) for k in ks} for c, v in values.items()},
        "comparisons": [],
    }
    for left, right in [(a, b) for a, b in pairs if a in values and b in values]:
        for k in dict.fromkeys([ks[0], ks[-1]]):
            a, b = values[left][k], values[right][k]
            if len(a) >= 2 and len(b) >= 2:
                welch = welch_interval(a, b)
                out["comparisons"].append(
                    {
                        "left": left,
                        "right": right,
                        "k": k,
                        **{key: welch[key] for key in ("delta", "low", "high", "mde")},
                    }
                )
    return out


def passk_table(doc: dict) -> list[str]:
    """study.md's pass@k section: per control and k the final students' pass@k (points, mean [95%
    t-interval] over seeds), the base's and the best constant's beside; then the comparisons."""
    if not doc:
        return []

    def pts(entry) -> str:
        if entry is None:
            return "-"
        if entry.get("low") is None:
            return f"{100 * entry['mean']:.1f} (n={entry['n']})"
        return f"{100 * entry['mean']:.1f} [{100 * entry['low']:.1f}, {100 * entry['high']:.1f}]"

    ks = doc["ks"]
    lines = [
        "## pass@k on the held-out pool",
        "",
        f"The final students' pass@k (unbiased estimate from n = {', '.join(map(str, doc['samples']))} answers per "
        "task at temperature 1, Chen et al. 2021; `python -m populora.analysis.passk`), points, mean over seeds [95% "
        "t-interval]. RL that only sharpens raises pass@1 and leaves pass@k at large k where the base has it; RL that "
        "widens what is solvable raises it too.",
        "",
        "| control | " + " | ".join(f"pass@{k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    if doc.get("base"):
        lines.append("| base model | " + " | ".join(f"{100 * doc['base'][str(k)]:.1f}" for k in ks) + " |")
    for base_id, curve in (doc.get("bases") or {}).items():  # more than one base: each its own row
        lines.append(f"| base model {base_id[:8]} | " + " | ".join(f"{100 * curve[str(k)]:.1f}" for k in ks) + " |")
    baselines = doc.get("baselines") or {}
    at_k = [share for k in ks if (share := constant_share_at_k(baselines, "all", k)) is not None]
    best = constant_share(baselines, "all")
    if len(at_k) == len(ks):
        lines.append("| best k constants | " + " | ".join(f"{100 * share:.1f}" for share in at_k) + " |")
    elif best is not None:
        lines.append("| best constant answer (k = 1) | " + " | ".join([f"{100 * best:.1f}"] * len(ks)) + " |")
    for control, by_k in doc["controls"].items():
        lines.append(f"| {control} | " + " | ".join(pts(by_k[str(k)]) for k in ks) + " |")
    if doc["comparisons"]:
        lines += ["", "| comparison | k | difference [Welch 95% interval] | MDE |", "|---|---|---|---|"]
        for c in doc["comparisons"]:
            lines.append(
                f"| {c['left']} - {c['right']} | {c['k']} | {100 * c['delta']:+.1f} [{100 * c['low']:+.1f}, "
                f"{100 * c['high']:+.1f}] | {100 * c['mde']:.1f} |"
            )
    return lines + [""]


def plot_passk_panel(ax, doc: dict, colors: list[str]) -> None:
    """The study figure's pass@k panel: per control the mean over seeds against k (log scale), the base."""
    ks = doc["ks"]
    if doc.get("base"):
        ax.plot(
            ks, [100 * doc["base"][str(k)] for k in ks], color="tab:red", ls="--", marker="o", ms=3, label="base model"
        )
    for i, (control, by_k) in enumerate(doc["controls"].items()):
        ax.plot(
            ks,
            [100 * by_k[str(k)]["mean"] for k in ks],
            color=colors[i % len(colors)],
            marker="o",
            ms=3,
            lw=2,
            label=control,
        )
    _pass_at_k_axes(ax, ks, doc.get("baselines") or {}, "all", "final students' pass@k (points)")
    ax.set_title("held-out pool: pass@k, mean over seeds", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


if __name__ == "__main__":
    raise SystemExit(main())
