"""Benchmarks of the final models: EvalPlus for code, lm-evaluation-harness for math, CRUXEval, LiveCodeBench.

Every benchmarked model (the bare base, each final member of each arm) runs every benchmark of
`params.bench.benchmarks`, in a job per benchmark (`python -m stages.bench --bench B ...`) or, for those of
`bench.together`, one after another in one job (`python -m stages.bench_together ...`, the model loaded once).
This package holds one module per benchmark family, each with its loading, prompts, generation
pass (`run`) and scoring, and what they share:

* `evalplus`       HumanEval+ / MBPP+: evalplus's instruct prompt and sanitizer, batched generation,
                   scoring with evalplus's own `check_correctness` on the selected subset;
* `lmeval`         the math suite: the task files of `workflow/lm_eval_tasks/` run as shipped with
                   `lm_eval.simple_evaluate`; `math_grading` holds its answer extraction and equivalence
                   (also imported by the tasks' own hooks, `workflow/lm_eval_tasks/utils.py`);
* `cruxeval`       CRUXEval-O / -I (code_o / code_i) with the students' solver prompt or the official one,
                   graded by the project's sandboxed verifier;
* `livecodebench`  LiveCodeBench code generation (opt-in): the release from the hub or a local copy, the
                   official prompt and code extraction; `livecodebench_grading` runs every test case in the
                   verifier's sandbox and compares outputs as lcb_runner does;
* `runners`        the literal table from a family to its `run`, and `run_benchmark`;
* `models`         the benchmarked models: the bare base, an arm's exported members;
* `settings`       one benchmark's settings, resolved once from params (`settings_for`);
* `partial`        what a killed bench job keeps in `<results>.partial/` and a rerun takes back;
* `stats`          Wilson intervals per result, paired-bootstrap intervals of differences;
* `diagnostics`    answer diagnostics (truncated, no answer, copies of the input or an argument);
* the flat `results/metrics.json`, the report and its figures are in `populora.report`.

Data: `bench.data_dir` (default `../shared/benchmarks`, overridden by the `POPULORA_BENCHMARKS`
environment variable) holds `evalplus/*.jsonl.gz`, `math/<name>/test.jsonl` and
`cruxeval/cruxeval.jsonl` (and, for LiveCodeBench, `livecodebench/<release>.jsonl`, else the hub);
null means the official downloads. Missing files fail when params.yaml is validated, before any stage runs.
`bench.limit = N` evaluates the first N problems in file order; `bench.limits` overrides it per
benchmark (CRUXEval runs on a larger subset than the others).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from populora.core.benchmark_data import (  # noqa: F401  (re-exported: the benchmark catalogue)
    CODE_BENCHMARKS,
    CRUXEVAL_BENCHMARKS,
    CRUXEVAL_FILE,
    DATA_ENV,
    EVALPLUS_FILES,
    LIVECODEBENCH_BENCHMARKS,
    LIVECODEBENCH_FILE,
    LIVECODEBENCH_HUB,
    MATH_BENCHMARKS,
    MATH_FILE,
    PRIMARY_METRIC,
    livecodebench_file,
    missing_data_files,
    relative_data_file,
    resolve_data_dir,
)


class BenchError(RuntimeError):
    """A benchmark could not run; the message names the file or model and the fix."""


def benchmark_kind(name: str) -> str:
    """The benchmark's group: code (HumanEval+, MBPP+, LiveCodeBench: AZR's code average), math, cruxeval."""
    if name in CODE_BENCHMARKS or name in LIVECODEBENCH_BENCHMARKS:
        return "code"
    if name in MATH_BENCHMARKS:
        return "math"
    if name in CRUXEVAL_BENCHMARKS:
        return "cruxeval"
    raise BenchError(
        f"unknown benchmark {name!r}. Fix: use one of "
        f"{', '.join([*CODE_BENCHMARKS, *LIVECODEBENCH_BENCHMARKS, *MATH_BENCHMARKS, *CRUXEVAL_BENCHMARKS])}."
    )


def primary_metric(name: str) -> str:
    return PRIMARY_METRIC[benchmark_kind(name)]


def data_file(data_dir: Path, bench: str) -> Path:
    """The offline file of one benchmark; a clear error when it is missing."""
    path = Path(data_dir) / relative_data_file(bench)
    if not path.is_file():
        raise BenchError(
            f"benchmark file for {bench} not found: {path}. Fix: point bench.data_dir in params.yaml "
            f"(or the {DATA_ENV} environment variable) at the folder holding evalplus/ and math/ "
            "(see ../shared/benchmarks/README.md), or set bench.data_dir: null to use the official downloads."
        )
    return path


def data_source(data_dir: Path | None, relative: str, official: str) -> str:
    """Where a benchmark's rows came from, as a result records it: the file inside the benchmark folder and the
    first 16 hex digits of its sha256, the same on every machine (the folder's own path is not: a result naming it
    differed between two clones of one study), or `official` where the rows were downloaded (`data_dir` None)."""
    if data_dir is None:
        return official
    digest = hashlib.sha256((Path(data_dir) / relative).read_bytes()).hexdigest()
    return f"{relative} sha256:{digest[:16]}"
