"""Stage bench: one benchmark for the bare base model, or for every final member of an arm.

    python -m stages.bench --params params.yaml --bench cruxeval_o --base-model results/base_model \
        --results results/bench/base/cruxeval_o                                   # the bare base model
    python -m stages.bench --params params.yaml --arm population --bench cruxeval_o \
        --base-model results/base_model --models results/models/population \
        --results results/bench/population/cruxeval_o                             # every member of the arm

EvalPlus for HumanEval+/MBPP+, lm-eval for the math suite (`--tasks`, default
`workflow/lm_eval_tasks`, holds its task templates), CRUXEval-O / -I graded by the project's
sandboxed verifier (populora/bench/cruxeval.py), LiveCodeBench (opt-in) with its own prompt and every
test case in the same sandbox (populora/bench/livecodebench*.py). The members of an arm share one generation pass
on every benchmark (stacked adapters, each row through its member's). `--models`
is an export folder (`<slot>/model.json` + `<slot>/adapter/`); each model is the frozen base plus
that adapter, greedy. `bench.limits[<bench>]`, else `bench.limit`, = N evaluates the first N
problems in file order (null: all). Only the members of the roles in `bench.roles` are benchmarked (default: students).
A benchmark of `bench.together` runs in the together job (stages/bench_together.py, which calls `run_one`
here): given a job of its own (DVC's matrix runs every one), this stage writes a note and loads nothing.
`--results` gets, per model (`base`, `population-teacher0`, ...):

* `<model>.json`: `{"model", "arm", "slot", "role", "benchmark", "n", "correct", "interval", "per_problem", "metrics",
  "limit", "wall_s", ...}`; metrics are `pass@1` (= `plus_pass@1`, base and extra tests),
  `base_pass@1`, `plus_pass@1` for HumanEval+/MBPP+, `accuracy` for math and `pass@1` for CRUXEval and
  LiveCodeBench, all fractions in [0, 1]; `correct` counts the problems solved (the primary metric's numerator),
  `interval` is its 95% Wilson interval (`{"method": "wilson", "low", "high"}`; lm-eval's own
  `stderr` is kept beside it for math), and `per_problem` maps each problem id to 1/0 in file order
  (what the summary's paired differences between models are computed from);
* `<model>/`: `samples.jsonl` (one row per problem: model input, generation, sanitized solution or
  extracted answer, verdict) and `harness/` (evalplus's `samples.jsonl` and, named and shaped as
  `evalplus.evaluate` writes it beside its samples, `samples_eval_results.json`, or lm-eval's
  results.json, per-sample log and the rendered task YAMLs).

The folder appears only when every model's benchmark succeeded (staged, then moved into place); a
missing data file, an adapter that does not load or a harness error exits non-zero with a message
that names the file or model and the fix, leaving earlier results untouched.

A job that is killed (a SLURM time-out, SIGKILL, a failure) keeps what it finished in
`<results>.partial/`, under a key of everything that made it (the benchmark's settings, the
project's code, the base model's and each adapter's files: `populora.bench.partial`), and a rerun
takes it back: CRUXEval, EvalPlus and LiveCodeBench generate in pieces of problems, each piece
kept as it finishes, so the rerun generates only the other pieces, in the batches an uninterrupted
run would have used; lm-eval keeps every finished request in its own request cache (`use_cache`:
the bare base, batch by batch), and the stacked members' pass keeps every member's generations
batch by batch. With `sampler.engine: vllm` the math benchmarks (lm-eval's vllm model, one process
per model) run model by model and each finished model is kept whole; lm-eval hands vLLM all of a
model's requests at once, so its request cache there fills only when that model's generation
ends. The folder goes once the results are in place. Progress (generation, grading, checks) is a bar on a terminal and a
plain log line every 30 s elsewhere (`populora.core.progress`).
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from populora.bench import BenchError
from populora.bench.lmeval import TASKS_DIR
from populora.bench.models import base_model_entry, exported_models
from populora.bench.partial import Partial
from populora.bench.settings import settings_for
from populora.config import benchmarked_refs, runs_together
from populora.core.io import read_json, replace_dir, staging_dir, write_json
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument("--arm", choices=["population", "baseline"], help="benchmark this arm's members (with --models)")
    parser.add_argument("--bench", required=True, help="a benchmark of params.bench.benchmarks")
    parser.add_argument("--base-model", required=True, help="the base model folder")
    parser.add_argument("--models", help="the arm's export folder; without it, the bare base model is benchmarked")
    parser.add_argument("--results", required=True, help="output folder: <model>.json and <model>/ per model")
    parser.add_argument("--tasks", default=str(TASKS_DIR), help="lm-eval task templates (math benchmarks)")
    args = parser.parse_args(argv)
    params, log = setup(args, "bench")
    if runs_together(params, args.bench):  # DVC's matrix runs every (arm, benchmark): a note, no model
        tmp = staging_dir(args.results)
        write_json(tmp / TOGETHER_NOTE, {"benchmark": args.bench, "results": "in the together job's folder "
                                         "(bench.together: one job for the group, the model loaded once)"})
        replace_dir(tmp, args.results)
        log.info("%s runs in the together job (bench.together): nothing to do here", args.bench)
        return 0
    try:
        models = selected_models(params, args.arm, args.models)
    except BenchError as error:
        log.error("%s", error)
        return 1
    return run_one(settings_for(params, args.bench, tasks_dir=args.tasks), models, Path(args.base_model),
                   Path(args.results), log)


TOGETHER_NOTE = "_together.json"  # an underscore: never a model's name (base, <arm>-<slot>)


def selected_models(params, arm: str | None, models_dir: str | None) -> list:
    """The bare base model (no `models_dir`), or the arm's exported members of the roles in bench.roles."""
    if not models_dir:
        return [base_model_entry()]
    wanted = set(benchmarked_refs(params, arm))
    return [model for model in exported_models(Path(models_dir)) if model.ref in wanted]


def run_one(settings, models: list, base_model: Path, results: Path, log) -> int:
    """One benchmark for `models`: `<results>/<model>.json` and `<model>/`, in place only when every model
    succeeded; finished work kept in `<results>.partial/` for a rerun. 0, or 1 after a BenchError."""
    start = time.perf_counter()
    tmp = staging_dir(results)
    log.info("benchmarking %s on %s (limit %s, max_new_tokens %d)", ", ".join(m.name for m in models),
             settings.benchmark, settings.limit, settings.max_new_tokens)
    try:
        if settings.sampler.name == "vllm" and settings.runner == "lm_eval":
            # lm-eval's vllm model runs each model in a process of its own anyway: keep each finished one.
            # Our engine serves every model at once: one engine started and freed per model leaked host
            # memory in vLLM's CPU build (the vLLM lane's bench jobs ran out of KV-cache memory, 2026-11-25)
            results_of = run_resumable(settings, models, base_model, tmp, results, log)
        else:  # hf: every member in one stacked pass; finished problems kept in <results>.partial/
            partial = Partial(Path(f"{results}{PARTIAL}"), settings, base_model)
            results_of = run_benchmark(settings, models, base_model, tmp, log, partial=partial)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, BenchError):
            log.error("%s on %s failed: %s", ", ".join(m.name for m in models), settings.benchmark, error)
            return 1
        raise
    wall_s = round(time.perf_counter() - start, 1)
    for name, result in results_of.items():
        result.update(benchmark=settings.benchmark, limit=settings.limit, max_new_tokens=settings.max_new_tokens,
                      wall_s=wall_s)
        write_json(tmp / f"{name}.json", result)
        log.info("%s on %s: %s, %d/%d correct (95%% Wilson %.3f-%.3f)", name, settings.benchmark, result["metrics"],
                 result["correct"], result["n"], result["interval"]["low"], result["interval"]["high"])
    replace_dir(tmp, results)
    shutil.rmtree(f"{results}{PARTIAL}", ignore_errors=True)
    log.info("%d model(s) on %s in %.1f s", len(results_of), settings.benchmark, wall_s)
    return 0


PARTIAL = ".partial"  # beside --results: what an earlier attempt finished (populora.bench.partial)


def run_benchmark(*args, **kwargs) -> dict[str, dict]:
    """`populora.bench.runners.run_benchmark`, imported on first use: the note of a grouped benchmark's own job
    (DVC runs every one) needs neither torch nor the harnesses."""
    from populora.bench.runners import run_benchmark as run

    return run(*args, **kwargs)


def run_resumable(settings, models, base_model: Path, out: Path, results: Path, log) -> dict[str, dict]:
    """`run_benchmark` one model at a time, each finished model kept in `<results>.partial/` (its result
    and folder) under a key; a model whose key matches is taken back instead of run again, and the
    one that was running takes back its finished requests (lm-eval's request cache)."""
    keep = Path(f"{results}{PARTIAL}")
    keep.mkdir(parents=True, exist_ok=True)
    partial = Partial(keep, settings, base_model)
    done = {}
    for model in models:
        key, saved = partial.key(model), keep / f"{model.name}.json"
        record = read_json(saved) if saved.is_file() else {}
        if record.get("key") == key and (keep / model.name).is_dir():
            log.info("%s on %s: kept from an earlier attempt (%s)", model.name, settings.benchmark, keep)
            done[model.name] = record["result"]
        else:
            shutil.rmtree(keep / model.name, ignore_errors=True)
            done.update(run_benchmark(settings, [model], base_model, keep, log, partial=partial))
            write_json(saved, {"key": key, "result": done[model.name]})
        shutil.copytree(keep / model.name, out / model.name)
    return done


if __name__ == "__main__":
    raise SystemExit(main())
