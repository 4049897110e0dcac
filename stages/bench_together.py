"""Stage bench_together: the benchmarks of `bench.together`, one after another in one job, the model loaded once.

    python -m stages.bench_together --params params.yaml --base-model results/base_model \
        --results results/bench/base/together                                     # the bare base model
    python -m stages.bench_together --params params.yaml --arm population --base-model results/base_model \
        --models results/models/population --results results/bench/population/together   # every member of the arm

The benchmarks of `bench.benchmarks` that are also in `bench.together` (`populora.core.topology.together_benchmarks`;
none with `sampler.engine: vllm`) run here instead of in `stages.bench` jobs of their own: the default's
2-problem code and math subsets, whose jobs were mostly start-up (a process, torch and the harnesses
imported, the model loaded, evalplus's checking worker spawned). Each benchmark runs exactly as
`stages.bench` runs it (`stages.bench.run_one`) and writes what a job of its own writes, under
`--results/<benchmark>/` (`<model>.json`, `<model>/`); the process keeps the model it loaded
(`populora.bench.settings.load_model`) and evalplus's checking worker for the next benchmark.

Resume: each finished benchmark waits in `<results>.partial/<benchmark>/` under a key of what made it
(`populora.bench.partial`: settings, code, base model and adapter files); a rerun after a kill takes back
the finished benchmarks whose key matches, and the one that was running takes back its finished pieces
(`<results>.partial/<benchmark>.partial/`) as a job of its own would. `--results` appears only when every
benchmark succeeded; the partial folder goes then. With no benchmark to run (DVC runs this stage whatever
the group) the folder holds a note and no model is loaded.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from populora.bench import BenchError
from populora.bench.jobs import PARTIAL, TOGETHER_NOTE, run_one, selected_models
from populora.bench.lmeval import TASKS_DIR
from populora.bench.partial import Partial
from populora.bench.settings import settings_for
from populora.core.io import ArtifactError, read_json, replace_dir, staging_dir, write_json
from populora.core.topology import together_benchmarks
from stages._common import setup, stage_parser

KEY = "{bench}.key.json"  # beside a finished benchmark's folder in <results>.partial/


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument(
        "--arm", choices=["population", "baseline"], help="benchmark this arm's members (with --models)"
    )
    parser.add_argument("--base-model", required=True, help="the base model folder")
    parser.add_argument("--models", help="the arm's export folder; without it, the bare base model is benchmarked")
    parser.add_argument("--results", required=True, help="output folder: <benchmark>/<model>.json per benchmark")
    parser.add_argument("--tasks", default=str(TASKS_DIR), help="lm-eval task templates (math benchmarks)")
    args = parser.parse_args(argv)
    params, log = setup(args, "bench_together" if args.models else "bench_base_together")
    grouped = together_benchmarks(params)
    out, keep = Path(args.results), Path(f"{args.results}{PARTIAL}")
    if not grouped:
        tmp = staging_dir(out)
        write_json(
            tmp / TOGETHER_NOTE,
            {
                "benchmarks": [],
                "results": "none: bench.together holds none of bench.benchmarks (or sampler.engine is vllm)",
            },
        )
        replace_dir(tmp, out)
        log.info("no benchmark runs together (bench.together): nothing to do")
        return 0
    try:
        models = selected_models(params, args.arm, args.models)
    except BenchError as error:
        log.error("%s", error)
        return 1
    start = time.perf_counter()
    log.info("%d benchmarks in one job for %s: %s", len(grouped), ", ".join(m.name for m in models), ", ".join(grouped))
    for bench in grouped:
        settings = settings_for(params, bench, tasks_dir=args.tasks)
        done, stamp = keep / bench, keep / KEY.format(bench=bench)
        key = finished_key(settings, Path(args.base_model), models)
        if done.is_dir() and _read_key(stamp) == key:
            log.info("%s: kept from an earlier attempt (%s)", bench, done)
            continue
        stamp.unlink(missing_ok=True)
        if run_one(settings, models, Path(args.base_model), done, log):
            return 1
        write_json(stamp, key)
    tmp = staging_dir(out)
    for bench in grouped:
        shutil.move(keep / bench, tmp / bench)
    replace_dir(tmp, out)
    shutil.rmtree(keep, ignore_errors=True)
    log.info("%d benchmarks for %d model(s) in %.1f s", len(grouped), len(models), time.perf_counter() - start)
    return 0


def finished_key(settings, base_model: Path, models: list) -> dict[str, str]:
    """What a finished benchmark's results depend on: each model's key (`populora.bench.partial.model_key`)."""
    partial = Partial(Path("."), settings, base_model)  # only its keys: nothing is written
    return {model.name: partial.key(model) for model in models}


def _read_key(path: Path) -> dict | None:
    try:
        return read_json(path) if path.is_file() else None
    except ArtifactError:  # cut by a kill: run the benchmark again
        return None


if __name__ == "__main__":
    raise SystemExit(main())
