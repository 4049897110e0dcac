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

from pathlib import Path

from populora.bench import BenchError
from populora.bench.jobs import TOGETHER_NOTE, run_one, run_one_apart, selected_models
from populora.bench.lmeval import TASKS_DIR
from populora.bench.settings import settings_for
from populora.core.io import replace_dir, staging_dir, write_json
from populora.core.refs import BASE_REF
from populora.core.topology import runs_together
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument(
        "--arm", choices=["population", "baseline"], help="benchmark this arm's members (with --models)"
    )
    parser.add_argument("--bench", required=True, help="a benchmark of params.bench.benchmarks")
    parser.add_argument("--base-model", required=True, help="the base model folder")
    parser.add_argument("--models", help="the arm's export folder; without it, the bare base model is benchmarked")
    parser.add_argument(
        "--raw-base",
        help="the raw base (before the warm start): with the base, on a benchmark of "
        "bench.raw_base, scored too and written into the base's result as raw_base",
    )
    parser.add_argument("--results", required=True, help="output folder: <model>.json and <model>/ per model")
    parser.add_argument("--tasks", default=str(TASKS_DIR), help="lm-eval task templates (math benchmarks)")
    args = parser.parse_args(argv)
    params, log = setup(args, "bench" if args.models else "bench_base")  # the DAG's two entries of this stage
    if runs_together(params, args.bench):  # DVC's matrix runs every (arm, benchmark): a note, no model
        tmp = staging_dir(args.results)
        write_json(
            tmp / TOGETHER_NOTE,
            {
                "benchmark": args.bench,
                "results": "in the together job's folder "
                "(bench.together: one job for the group, the model loaded once)",
            },
        )
        replace_dir(tmp, args.results)
        log.info("%s runs in the together job (bench.together): nothing to do here", args.bench)
        return 0
    try:
        models = selected_models(params, args.arm, args.models)
    except BenchError as error:
        log.error("%s", error)
        return 1
    settings = settings_for(params, args.bench, tasks_dir=args.tasks)
    raw = args.raw_base and not args.models and params.warm_start.enabled and args.bench in params.bench.raw_base
    if raw:  # the raw base first, aside; its result joins the base's below
        aside = Path(f"{args.results}.raw_base")
        # vLLM: in a process of its own, so that its engine's memory is free for the base's (run_one_apart)
        run = run_one_apart if settings.sampler.name == "vllm" else run_one
        if run(settings, models, Path(args.raw_base), aside, log) != 0:
            return 1
    code = run_one(settings, models, Path(args.base_model), Path(args.results), log)
    if raw and code == 0:
        attach_raw_base(Path(args.results), aside)
        log.info("raw base on %s beside the base in %s", args.bench, args.results)
    return code


def attach_raw_base(results: Path, aside: Path) -> None:
    """The raw base's result (`aside`, as run_one wrote it) into the base's: `raw_base` in base.json (the
    figures and per-problem verdicts) and its samples under `raw_base/`; `aside` removed."""
    import shutil

    from populora.core.io import read_json

    base, raw = read_json(results / f"{BASE_REF.name}.json"), read_json(aside / f"{BASE_REF.name}.json")
    keep = ("n", "correct", "interval", "metrics", "per_problem", "diagnostics", "wall_s", "generation_s")
    write_json(results / f"{BASE_REF.name}.json", {**base, "raw_base": {k: raw[k] for k in keep if k in raw}})
    if (aside / BASE_REF.name).is_dir():
        shutil.move(str(aside / BASE_REF.name), str(results / "raw_base"))
    shutil.rmtree(aside, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
