"""Where the offline benchmark files are and which ones a params file needs (no heavy imports).

Kept apart from `populora.bench` so that validating params.yaml (which checks the files exist
before any stage runs) does not make every stage depend on the benchmark code.
"""

from __future__ import annotations

import os
from pathlib import Path

from populora.paths import project_path

# Benchmark name (params.bench.benchmarks) -> evalplus dataset name.
CODE_BENCHMARKS = {"humaneval_plus": "humaneval", "mbpp_plus": "mbpp"}
MATH_BENCHMARKS = ("gsm8k", "math500", "minerva_math", "olympiadbench", "aime24", "aime25", "amc23")
# CRUXEval-O / -I: AZR's in-distribution benchmark (code_o / code_i), graded by the project's verifier.
CRUXEVAL_BENCHMARKS = {"cruxeval_o": "code_o", "cruxeval_i": "code_i"}

# Offline files, relative to the data folder (see ../shared/benchmarks/README.md).
EVALPLUS_FILES = {
    "humaneval_plus": "evalplus/HumanEvalPlus-v0.1.10.jsonl.gz",
    "mbpp_plus": "evalplus/MbppPlus-v0.2.0.jsonl.gz",
}
MATH_FILE = "math/{name}/test.jsonl"
CRUXEVAL_FILE = "cruxeval/cruxeval.jsonl"

# The headline metric of each kind: EvalPlus's "+" score (base and extra tests) and math accuracy.
PRIMARY_METRIC = {"code": "pass@1", "math": "accuracy", "cruxeval": "pass@1"}

DATA_ENV = "POPULORA_BENCHMARKS"


def resolve_data_dir(configured: str | None) -> Path | None:
    """The benchmark folder: $POPULORA_BENCHMARKS if set and non-empty, else `bench.data_dir`;
    None means the official downloads. Relative paths are taken from the working directory
    (stages run from the repository root), or, inside a DVC queue's temporary workspace, from
    the project that queued the experiment (`populora.paths.project_path`)."""
    chosen = os.environ.get(DATA_ENV) or configured
    return project_path(chosen) if chosen else None


def relative_data_file(bench: str) -> str:
    """Where a benchmark's offline file lies inside the data folder."""
    if bench in CRUXEVAL_BENCHMARKS:
        return CRUXEVAL_FILE
    return EVALPLUS_FILES.get(bench) or MATH_FILE.format(name=bench)


def missing_data_files(data_dir: Path, benchmarks) -> list[str]:
    """The offline files (relative paths) of `benchmarks` that `data_dir` lacks; checked when params load."""
    needed = dict.fromkeys(relative_data_file(b) for b in benchmarks)
    return [relative for relative in needed if not (Path(data_dir) / relative).is_file()]
