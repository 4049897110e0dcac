"""Where the offline benchmark files are and which ones a params file needs (no heavy imports).

Kept apart from `populora.bench` so that validating params.yaml (which checks the files exist
before any stage runs) does not make every stage depend on the benchmark code.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from populora.core.paths import project_path

# Benchmark name (params.bench.benchmarks) -> evalplus dataset name.
CODE_BENCHMARKS = {"humaneval_plus": "humaneval", "mbpp_plus": "mbpp"}
MATH_BENCHMARKS = ("gsm8k", "math500", "minerva_math", "olympiadbench", "aime24", "aime25", "amc23")
# CRUXEval-O / -I: AZR's in-distribution benchmark (code_o / code_i), graded by the project's verifier.
CRUXEVAL_BENCHMARKS = {"cruxeval_o": "code_o", "cruxeval_i": "code_i"}
# LiveCodeBench (code generation): scored with HumanEval+ / MBPP+ in the code group; opt-in (needs the hub
# or a local copy of the release).
LIVECODEBENCH_BENCHMARKS = ("livecodebench",)
LIVECODEBENCH_HUB = "livecodebench/code_generation_lite"  # the official release on the Hugging Face hub
# The folder, beside the per-benchmark ones of results/bench/<base|arm>/, where the benchmarks of bench.together
# are written (<together>/<benchmark>/<model>.json): no benchmark's name
TOGETHER = "together"


def result_folder(benchmark: str, together) -> str:
    """Where a benchmark's results are, inside results/bench/<base|arm>/: `<benchmark>`, or `together/<benchmark>`
    when it is one of `together` (`populora.core.topology.together_benchmarks`: those run in one job)."""
    return f"{TOGETHER}/{benchmark}" if benchmark in together else benchmark


# Offline files, relative to the data folder (see ../shared/benchmarks/README.md).
EVALPLUS_FILES = {
    "humaneval_plus": "evalplus/HumanEvalPlus-v0.1.10.jsonl.gz",
    "mbpp_plus": "evalplus/MbppPlus-v0.2.0.jsonl.gz",
}
MATH_FILE = "math/{name}/test.jsonl"
CRUXEVAL_FILE = "cruxeval/cruxeval.jsonl"
LIVECODEBENCH_FILE = "livecodebench/{release}.jsonl"  # the release's rows, official schema, one per line

# The headline metric of each kind: EvalPlus's "+" score (base and extra tests) and math accuracy.
PRIMARY_METRIC = {"code": "pass@1", "math": "accuracy", "cruxeval": "pass@1"}  # LiveCodeBench is "code"

DATA_ENV = "POPULORA_BENCHMARKS"


def resolve_data_dir(configured: str | None) -> Path | None:
    """The benchmark folder: $POPULORA_BENCHMARKS if set and non-empty, else `bench.data_dir`;
    None means the official downloads. Relative paths are taken from the working directory
    (stages run from the repository root), or, inside a DVC queue's temporary workspace, from
    the project that queued the experiment (`populora.core.paths.project_path`)."""
    chosen = os.environ.get(DATA_ENV) or configured
    return project_path(chosen) if chosen else None


def relative_data_file(bench: str) -> str:
    """Where a benchmark's offline file lies inside the data folder."""
    if bench in CRUXEVAL_BENCHMARKS:
        return CRUXEVAL_FILE
    if bench in LIVECODEBENCH_BENCHMARKS:
        raise ValueError("LiveCodeBench's file depends on its release: use livecodebench_file(release)")
    return EVALPLUS_FILES.get(bench) or MATH_FILE.format(name=bench)


def missing_data_files(data_dir: Path, benchmarks) -> list[str]:
    """The offline files (relative paths) of `benchmarks` that `data_dir` lacks; checked when params load.
    LiveCodeBench is left to `livecodebench_unavailable` (its release may come from the hub instead)."""
    needed = dict.fromkeys(relative_data_file(b) for b in benchmarks if b not in LIVECODEBENCH_BENCHMARKS)
    return [relative for relative in needed if not (Path(data_dir) / relative).is_file()]


def livecodebench_file(release: str) -> str:
    """Where a LiveCodeBench release lies inside the data folder."""
    return LIVECODEBENCH_FILE.format(release=release)


@functools.cache
def hub_unreachable() -> str | None:
    """None when the Hugging Face hub answers for LiveCodeBench's dataset (one HEAD request, 5 s, once per
    process), else why not."""
    if any(
        os.environ.get(name, "").lower() in ("1", "true", "yes") for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    ):
        return "HF_HUB_OFFLINE / HF_DATASETS_OFFLINE is set"
    import urllib.request  # here: it loads http and ssl, which validating params needs only for LiveCodeBench

    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    request = urllib.request.Request(f"{endpoint}/api/datasets/{LIVECODEBENCH_HUB}", method="HEAD")
    try:
        with urllib.request.urlopen(request, timeout=5):  # the hub's https endpoint
            return None
    except OSError as error:  # URLError, HTTPError, timeouts
        return f"{endpoint} did not answer: {error}"


def livecodebench_unavailable(data_dir: Path | None, release: str) -> str | None:
    """None when the release can be read (a local copy under `data_dir`, else the hub), else what is
    missing and the fix (for the params check)."""
    relative = livecodebench_file(release)
    if data_dir is not None and (Path(data_dir) / relative).is_file():
        return None
    reason = hub_unreachable()
    if reason is None:
        return None
    local = f"no {relative} in the data folder" if data_dir is not None else "no data folder"
    return (
        f"{relative} (LiveCodeBench {release}: {local}, and the hub is unreachable: {reason}; put a copy of "
        f"{LIVECODEBENCH_HUB} {release} in the official schema at <data folder>/{relative}, run where the hub "
        "is reachable, or drop livecodebench from bench.benchmarks)"
    )
