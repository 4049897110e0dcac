"""What the warm start buys, in one command: the budget sweep, then the raw base against the warm base.

    python -m populora.warmstart.study --params params.yaml --base-model results/base_model \
        --warm-base results/warm_base --out study/warm-start

1. **Sweep** (`populora.warmstart.sweep`): learning rates x budgets on the train split, each checkpoint and the
   raw base scored on validation programs (`--validation` tasks of the held-out families and unseen
   compositions, `--sweep-samples` answers at temperature 1 and greedy); the best transfer is chosen.
   Skipped with `--phases table`.
2. **Table**: the raw base and the warm base (`--warm-base`, the pipeline's merged model, made with the
   params' `warm_start` budget) per family, greedy and `--samples` answers at temperature 1, on fresh tasks
   of the train families (programs the warm start never trained on) and of the held-out families (a draw
   apart from the sweep's), the paired gain per type with its interval, and the copy/echo baselines and the
   best constant answer beside every score.
3. **CRUXEval-O and -I** (the first `--cruxeval` problems each) raw against warm, with the copy ceiling of -O
   and the echo baseline of -I.

Everything lands under `--out` (`sweep/`, `table.json`, `cruxeval.json`, `results.md`: their tables) and a rerun
reuses what is there.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from populora.core.io import read_json, read_jsonl, write_json, write_jsonl

log = logging.getLogger("warm_start.study")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--overlay", nargs="*", default=[], help="params overlays applied in order")
    parser.add_argument("--base-model", default="results/base_model", help="the raw base (HF folder)")
    parser.add_argument("--warm-base", default="results/warm_base", help="the merged warm base (stages.warm_start)")
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--phases", nargs="+", default=["sweep", "table", "cruxeval"], choices=["sweep", "table", "cruxeval"]
    )
    parser.add_argument("--rates", nargs="+", type=float, default=[3e-4, 1e-3, 3e-3])
    parser.add_argument("--budgets", nargs="+", type=int, default=[200, 400, 800, 1600])
    parser.add_argument("--validation", type=int, default=300, help="validation tasks of the sweep")
    parser.add_argument(
        "--tiebreak",
        nargs="*",
        default=[],
        help="checkpoints (lr<rate>-n<examples>) scored again on a second validation draw, to tell near-ties apart",
    )
    parser.add_argument("--sweep-samples", type=int, default=4)
    parser.add_argument("--table-tasks", type=int, default=24, help="tasks per family and type in the table")
    parser.add_argument("--samples", type=int, default=16, help="answers per task at temperature 1 in the table")
    parser.add_argument("--cruxeval", type=int, default=200)
    parser.add_argument(
        "--max-new-tokens",
        type=int,
        default=48,
        help="answer budget of every scored answer (solve.max_new_tokens; the longest gold answer of "
        "the families takes about 22 tokens)",
    )
    return parser.parse_args(argv)


def load(args: argparse.Namespace, *, cruxeval: int | None = None):
    """The params with the study's answer budget; with `cruxeval`, CRUXEval's first `cruxeval` problems at the
    same budget."""
    from populora.config import load_overlaid

    changes = [{"solve": {"max_new_tokens": args.max_new_tokens}}]
    if cruxeval:
        changes.append(
            {
                "bench": {
                    "limits": {"cruxeval_o": cruxeval, "cruxeval_i": cruxeval},
                    "cruxeval": {"max_new_tokens": args.max_new_tokens},
                }
            }
        )
    return load_overlaid(args.params, args.overlay, *changes)


def validation_tasks(params, out: Path, n: int, sandbox, seeds: list[dict]) -> list[dict]:
    """The sweep's validation tasks (seed 0 of the validation split), with worked examples; kept in out."""
    from populora.heldout.pool import attach_examples
    from populora.verifier.families import verified_tasks

    path = out / "validation_tasks.jsonl"
    if path.is_file():
        return read_jsonl(path)
    counts: Counter = Counter()
    tasks = verified_tasks("validation", n, seed=0, config=params.verify, sandbox=sandbox, counts=counts)
    tasks = attach_examples(tasks, seeds, params.solve.worked_examples, seed=0)
    write_jsonl(path, tasks)
    write_json(out / "validation_counts.json", dict(counts))
    return tasks


def run_sweep(args, params, sandbox, seeds: list[dict]) -> dict:
    from populora.lm.dtype import resolve_dtype
    from populora.lm.model import load_base
    from populora.tasks.prompts import chat_wrapper
    from populora.verifier.families import verified_tasks
    from populora.warmstart import sweep
    from populora.warmstart.examples import build_examples, encode_example

    out = Path(args.out) / "sweep"
    cfg = params.warm_start
    tasks = verified_tasks("train", max(args.budgets), seed=cfg.seed, config=params.verify, sandbox=sandbox)
    tokenizer, _ = load_base(args.base_model, dtype="float32", device="cpu")
    examples = build_examples(
        tasks, seeds, chat=chat_wrapper(tokenizer), worked_examples=params.solve.worked_examples, seed=cfg.seed
    )
    rows = [encode_example(e, tokenizer) for e in examples]
    dtype, _ = resolve_dtype(cfg.dtype, params.model.device)
    for rate in args.rates:
        sweep.train_run(
            Path(args.base_model),
            rows,
            out,
            rate=rate,
            budgets=sorted(args.budgets),
            cfg=cfg,
            dtype=dtype,
            tokenizer_pad=tokenizer.pad_token_id,
        )
    validation = validation_tasks(params, out, args.validation, sandbox, seeds)
    names = {sweep.checkpoint_name(r, n): out / sweep.run_name(r) / f"n{n}" for r in args.rates for n in args.budgets}
    scores = sweep.score_checkpoints(
        params, Path(args.base_model), out, names, validation, sandbox, samples=args.sweep_samples
    )
    table = sweep.sweep_table(scores, validation, samples=args.sweep_samples)
    chosen = sweep.best(table)
    result = {
        "table": table,
        "chosen": chosen,
        "rates": args.rates,
        "budgets": args.budgets,
        "validation": {
            "tasks": len(validation),
            "by_type": dict(Counter(t["type"] for t in validation)),
            "samples": args.sweep_samples,
        },
        "training": {
            "dtype": dtype,
            "rank": cfg.rank,
            "alpha": cfg.alpha,
            "target_modules": cfg.target_modules,
            "batch_size": cfg.batch_size,
            "warmup_steps": cfg.warmup_steps,
            "seed": cfg.seed,
        },
        "loss_curves": {sweep.run_name(r): read_jsonl(out / sweep.run_name(r) / "steps.jsonl") for r in args.rates},
    }
    write_json(out / "sweep.json", result)
    log.info("sweep: chosen %s", sweep.describe(table, chosen))
    return result


def run_tiebreak(args, params, sandbox, seeds: list[dict]) -> dict:
    """The checkpoints of `--tiebreak` on a second validation draw (seed 1, the first draw's programs left out):
    near-ties of the sweep told apart on twice the tasks."""
    from populora.heldout.pool import attach_examples
    from populora.verifier.families import verified_tasks
    from populora.warmstart import sweep
    from populora.warmstart.measure import score_models
    from populora.warmstart.train import adapter_folder

    out = Path(args.out) / "sweep"
    path = out / "tiebreak_tasks.jsonl"
    if not path.is_file():
        first = {t["program"] for t in read_jsonl(out / "validation_tasks.jsonl")}
        drawn = verified_tasks("validation", args.validation + 100, seed=1, config=params.verify, sandbox=sandbox)
        tasks = [t for t in drawn if t["program"] not in first][: args.validation]
        write_jsonl(path, attach_examples(tasks, seeds, params.solve.worked_examples, seed=1))
    tasks = read_jsonl(path)
    scores = read_json(out / "tiebreak_scores.json") if (out / "tiebreak_scores.json").is_file() else {}
    for name in args.tiebreak:
        if name not in scores:
            rate, budget = name.split("-n")
            folder = adapter_folder(out / rate / f"n{budget}")
            scores[name] = score_models(
                params,
                Path(args.base_model),
                {name: folder},
                tasks,
                sandbox,
                samples=args.sweep_samples,
                seed=1,
                base=False,
            )[name]
            write_json(out / "tiebreak_scores.json", scores)
    result = {"tasks": len(tasks), "seed": 1, "table": sweep.sweep_table(scores, tasks, samples=args.sweep_samples)}
    write_json(out / "tiebreak.json", result)
    return result


def family_tasks_table(params, out: Path, per_family: int, sandbox, seeds: list[dict], trained: set[str]) -> list[dict]:
    """The table's tasks: `per_family` verified tasks of each type and family, fresh programs of the train
    families (none the warm start trained on: `trained`) and of the held-out ones (a validation draw apart from
    the sweep's: another seed, the sweep's programs left out), with worked examples; kept in out."""
    from populora.heldout.pool import attach_examples
    from populora.tasks.families import FAMILIES
    from populora.verifier.families import verified_tasks

    path = out / "table_tasks.jsonl"
    if path.is_file():
        return read_jsonl(path)
    swept = (
        {t["program"] for t in read_jsonl(out / "sweep" / "validation_tasks.jsonl")}
        if (out / "sweep" / "validation_tasks.jsonl").is_file()
        else set()
    )
    tasks = []
    for name, family in sorted(FAMILIES.items()):
        split = "train" if family.split == "train" else "validation"
        drawn = verified_tasks(split, 6 * per_family, seed=1, config=params.verify, sandbox=sandbox, families=[name])
        fresh = [t for t in drawn if t["program"] not in trained and t["program"] not in swept]
        for task_type in ("code_o", "code_i"):
            tasks += [t for t in fresh if t["type"] == task_type][:per_family]
    tasks = attach_examples(tasks, seeds, params.solve.worked_examples, seed=1)
    write_jsonl(path, tasks)
    return tasks


def run_table(args, params, sandbox, seeds: list[dict]) -> dict:
    """The raw base against the warm base per family and type, greedy and at temperature 1, the best constant
    answer beside each score, the paired gain per type over the held-out tasks and over the train families'."""
    from populora.heldout.ruler import best_constant
    from populora.warmstart.measure import paired_gain, score_models, summarize
    from populora.warmstart.run import TASKS_FILE

    out = Path(args.out)
    warm = Path(args.warm_base)
    trained = {t["program"] for t in read_jsonl(warm / TASKS_FILE)} if (warm / TASKS_FILE).is_file() else set()
    tasks = family_tasks_table(params, out, args.table_tasks, sandbox, seeds, trained)
    scores = {}
    for name, folder in (("raw", Path(args.base_model)), ("warm", warm)):
        path = out / "scores" / f"{name}.json"
        if not path.is_file():
            write_json(path, score_models(params, folder, {}, tasks, sandbox, samples=args.samples)["base"])
        scores[name] = read_json(path)
    summary = summarize(scores, tasks, samples=args.samples)
    constants = {}
    for group in summary["raw"]:
        task_type, _, family = group.partition(" ")
        subset = [t for t in tasks if t["type"] == task_type and (not family or t["family"] == family)]
        row = best_constant(subset, params.verify, sandbox)[task_type]
        constants[group] = {k: v for k, v in row.items() if k != "solves"}
    held = [t for t in tasks if t.get("held_out")]
    own = [t for t in tasks if not t.get("held_out")]
    result = {
        "tasks": {"held_out": len(held), "train_families": len(own)},
        "samples": args.samples,
        "summary": summary,
        "best_constant": constants,
        "gain": {
            "held_out": {
                m: paired_gain(scores, held, "warm", "raw", samples=args.samples, measure=m)
                for m in ("pass_rate", "greedy")
            },
            "train_families": {
                m: paired_gain(scores, own, "warm", "raw", samples=args.samples, measure=m)
                for m in ("pass_rate", "greedy")
            },
        },
        "warm_base": str(warm),
        "raw_base": str(args.base_model),
        "warm_start": read_json(warm.parent / "warm_start.json").get("settings")
        if (warm.parent / "warm_start.json").is_file()
        else None,
    }
    write_json(out / "table.json", result)
    return result


def run_cruxeval(args, params, out: Path, log) -> dict:
    """CRUXEval-O and -I (the first `--cruxeval` problems) raw and warm, with the copy and echo baselines."""
    from populora.bench.jobs import run_one
    from populora.bench.models import BenchModel
    from populora.bench.settings import settings_for
    from populora.core.refs import BASE_REF

    result = {}
    for bench in ("cruxeval_o", "cruxeval_i"):
        settings = settings_for(params, bench)
        row: dict[str, Any] = {"n": None}
        for name, folder in (("raw", Path(args.base_model)), ("warm", Path(args.warm_base))):
            results = out / "cruxeval" / name / bench
            if not (results / "base.json").is_file():
                if run_one(settings, [BenchModel(BASE_REF)], folder, results, log) != 0:
                    raise RuntimeError(f"{bench} on {folder} failed (see the log)")
            doc = read_json(results / "base.json")
            row[name] = {"correct": doc["correct"], "n": doc["n"], "per_problem": doc["per_problem"]}
            row["n"] = doc["n"]
        baseline = read_json(out / "cruxeval" / "warm" / bench / "base.json")["baseline"]
        row[baseline["kind"]] = baseline["correct"]
        result[bench] = row
    write_json(out / "cruxeval.json", result)
    return result


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


def _gain(row: dict) -> str:
    return f"{row['points']:+.1f} [{row['interval'][0]:+.1f}, {row['interval'][1]:+.1f}]"


def sweep_markdown(sweep: dict) -> list[str]:
    table, chosen = sweep["table"], sweep["chosen"]
    lines = [
        "## The budget sweep",
        "",
        f"Learning rates x budgets on the train split, scored on {sweep['validation']['tasks']} validation tasks "
        f"({', '.join(f'{n} {t}' for t, n in sorted(sweep['validation']['by_type'].items()))}: held-out families "
        f"and unseen compositions, programs the warm start never saw, copy- and echo-solved tasks excluded), "
        f"greedy and {sweep['validation']['samples']} answers at temperature 1 (%). The highest mean pass rate over "
        f"the two types (transfer, not the lowest training loss), whatever the budget: **{chosen}**.",
        "",
        "| model | code_o greedy | code_o pass rate | code_i greedy | code_i pass rate | mean pass rate |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in table.items():
        mark = " (highest)" if name == chosen else ""
        lines.append(
            f"| {name}{mark} | {_pct(row['code_o.greedy'])} | {_pct(row['code_o.pass_rate'])} | "
            f"{_pct(row['code_i.greedy'])} | {_pct(row['code_i.pass_rate'])} | {_pct(row['mean_pass_rate'])} |"
        )
    return lines + [""]


def tiebreak_markdown(tiebreak: dict, sweep: dict) -> list[str]:
    lines = [
        f"Near-ties scored again on a second validation draw ({tiebreak['tasks']} tasks, seed {tiebreak['seed']}, "
        "none of the first draw's programs); the mean over both draws decides:",
        "",
        "| model | first draw | second draw | mean |",
        "|---|---:|---:|---:|",
    ]
    for name, row in tiebreak["table"].items():
        first = sweep["table"][name]["mean_pass_rate"]
        lines.append(
            f"| {name} | {_pct(first)} | {_pct(row['mean_pass_rate'])} | {_pct((first + row['mean_pass_rate']) / 2)} |"
        )
    return lines + [""]


def table_markdown(table: dict) -> list[str]:
    summary, constants, samples = table["summary"], table["best_constant"], table["samples"]
    lines = [
        "## Raw base against warm base, per family",
        "",
        f"Fresh tasks ({table['tasks']['held_out']} of held-out families, {table['tasks']['train_families']} of the "
        f"warm start's own families on programs it never trained on), greedy and the pass rate over {samples} "
        "answers at temperature 1 (%). Beside each: the best single constant answer on those tasks; the copy "
        "(code_o) and echo (code_i) baselines solve none of them by construction (such tasks are left out).",
        "",
        "| type, family | n | raw greedy | warm greedy | raw pass rate | warm pass rate | best constant |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for group, raw in summary["raw"].items():
        warm, const = summary["warm"][group], constants[group]
        lines.append(
            f"| {group} | {raw['n']} | {_pct(raw['greedy'])} | {_pct(warm['greedy'])} | "
            f"{_pct(raw['pass_rate'])} | {_pct(warm['pass_rate'])} | {_pct(const['accuracy'])} "
            f"(`{const['answer']}`) |"
        )
    lines += [
        "",
        "Warm minus raw, in points, 95% paired bootstrap over tasks:",
        "",
        "| tasks | type | pass rate | greedy |",
        "|---|---|---:|---:|",
    ]
    for part, label in (
        ("held_out", "held-out families (never trained on)"),
        ("train_families", "train families, new programs"),
    ):
        for task_type, row in table["gain"][part]["pass_rate"].items():
            lines.append(
                f"| {label} | {task_type} | {_gain(row)} | {_gain(table['gain'][part]['greedy'][task_type])} |"
            )
    return lines + [""]


def cruxeval_markdown(cruxeval: dict) -> list[str]:
    lines = [
        "## CRUXEval",
        "",
        "Greedy, the project's solver prompt with one worked example; beside the scores, the "
        "copy baseline of CRUXEval-O and the echo baseline of CRUXEval-I (graded in the sandbox).",
        "",
        "| benchmark | n | raw base | warm base | warm - raw (95% paired bootstrap) | copy / echo baseline |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    from populora.core.stats import paired_bootstrap

    for bench, row in cruxeval.items():
        ids = list(row["raw"]["per_problem"])
        mean, low, high = paired_bootstrap([row["warm"]["per_problem"][t] - row["raw"]["per_problem"][t] for t in ids])
        baseline = row.get("copy", row.get("echo"))
        lines.append(
            f"| {bench} | {row['n']} | {row['raw']['correct']} | {row['warm']['correct']} | "
            f"{100 * mean:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}] | {baseline} |"
        )
    return lines + [""]


def write_results(out: Path, command: str) -> Path:
    """`results.md` (tables only; the study's README.md says what they show) from what the phases wrote."""
    from populora.core.io import write_text

    lines = [
        "# What the warm start buys",
        "",
        "Written by `python -m populora.warmstart.study` from `sweep/sweep.json`, `table.json` and "
        f"`cruxeval.json` (command: `{command}`).",
        "",
    ]
    if (out / "sweep" / "sweep.json").is_file():
        lines += sweep_markdown(read_json(out / "sweep" / "sweep.json"))
    if (out / "sweep" / "tiebreak.json").is_file():
        lines += tiebreak_markdown(read_json(out / "sweep" / "tiebreak.json"), read_json(out / "sweep" / "sweep.json"))
    if (out / "table.json").is_file():
        lines += table_markdown(read_json(out / "table.json"))
    if (out / "cruxeval.json").is_file():
        lines += cruxeval_markdown(read_json(out / "cruxeval.json"))
    write_text(out / "results.md", "\n".join(lines))
    return out / "results.md"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)
    params = load(args)
    from populora.heldout.pool import worked_example_seeds
    from populora.verifier import open_sandbox

    sandbox = open_sandbox(params.verify, log)
    try:
        seeds = worked_example_seeds(params, sandbox)
        if "sweep" in args.phases:
            run_sweep(args, params, sandbox, seeds)
        if "sweep" in args.phases and args.tiebreak:
            run_tiebreak(args, params, sandbox, seeds)
        if "table" in args.phases:
            run_table(args, params, sandbox, seeds)
    finally:
        sandbox.close()
    if "cruxeval" in args.phases:
        run_cruxeval(args, load(args, cruxeval=args.cruxeval), Path(args.out), log)
    write_results(
        Path(args.out), "python -m populora.warmstart.study " + " ".join(argv if argv is not None else sys.argv[1:])
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
