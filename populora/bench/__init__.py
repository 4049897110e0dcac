"""Benchmarks of the final models: EvalPlus for code, lm-evaluation-harness for math.

Every benchmarked model (the bare base, each final member of each arm) runs every benchmark of
`params.bench.benchmarks` in its own stage, `python -m stages.bench --model M --bench B ...`.
This package holds the pieces:

* `codegen`        greedy batched generation with evalplus's instruct prompt and sanitizer;
* `evalplus_eval`  problem loading (offline file or official download) and scoring with evalplus's
                   own `check_correctness` on expected outputs of the selected subset;
* `math_grading`   answer extraction and equivalence for the math suite (used by the lm-eval tasks);
* `lmeval_runner`  renders the task YAMLs of `workflow/lm_eval_tasks/` and runs `lm_eval.simple_evaluate`;
* `summary`        the flat `results/metrics.json` (population mean/best/weakest, baseline, base);
* `report`         the Markdown report with figures.

Data: `bench.data_dir` (default `../shared/benchmarks`, overridden by the `POPULORA_BENCHMARKS`
environment variable) holds `evalplus/*.jsonl.gz` and `math/<name>/test.jsonl`; null means the
official downloads. `bench.limit = N` evaluates the first N problems in file order.
"""

from __future__ import annotations

import os
from pathlib import Path

# Benchmark name (params.bench.benchmarks) -> evalplus dataset name.
CODE_BENCHMARKS = {"humaneval_plus": "humaneval", "mbpp_plus": "mbpp"}
MATH_BENCHMARKS = ("gsm8k", "math500", "minerva_math", "olympiadbench", "aime24", "aime25", "amc23")

# Offline files, relative to the data folder (see ../shared/benchmarks/README.md).
EVALPLUS_FILES = {
    "humaneval_plus": "evalplus/HumanEvalPlus-v0.1.10.jsonl.gz",
    "mbpp_plus": "evalplus/MbppPlus-v0.2.0.jsonl.gz",
}
MATH_FILE = "math/{name}/test.jsonl"

# The headline metric of each kind: EvalPlus's "+" score (base and extra tests) and math accuracy.
PRIMARY_METRIC = {"code": "pass@1", "math": "accuracy"}

DATA_ENV = "POPULORA_BENCHMARKS"


class BenchError(RuntimeError):
    """A benchmark could not run; the message names the file or model and the fix."""


def benchmark_kind(name: str) -> str:
    if name in CODE_BENCHMARKS:
        return "code"
    if name in MATH_BENCHMARKS:
        return "math"
    raise BenchError(f"unknown benchmark {name!r}. Fix: use one of {', '.join([*CODE_BENCHMARKS, *MATH_BENCHMARKS])}.")


def primary_metric(name: str) -> str:
    return PRIMARY_METRIC[benchmark_kind(name)]


def resolve_data_dir(configured: str | None) -> Path | None:
    """The benchmark folder: $POPULORA_BENCHMARKS if set and non-empty, else `bench.data_dir`;
    None means the official downloads. Relative paths are taken from the working directory
    (stages run from the repository root)."""
    chosen = os.environ.get(DATA_ENV) or configured
    return Path(chosen).resolve() if chosen else None


def data_file(data_dir: Path, bench: str) -> Path:
    """The offline file of one benchmark; a clear error when it is missing."""
    relative = EVALPLUS_FILES.get(bench) or MATH_FILE.format(name=bench)
    path = Path(data_dir) / relative
    if not path.is_file():
        raise BenchError(
            f"benchmark file for {bench} not found: {path}. Fix: point bench.data_dir in params.yaml "
            f"(or the {DATA_ENV} environment variable) at the folder holding evalplus/ and math/ "
            "(see ../shared/benchmarks/README.md), or set bench.data_dir: null to use the official downloads."
        )
    return path
