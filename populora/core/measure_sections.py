"""The sections of params.yaml that say what measures a run: the benchmarks (`bench`, with CRUXEval's
and LiveCodeBench's settings), the positive control (`control`) and the trackers (`tracking`); the
held-out pool's section (`heldout`) is in `populora.config` for now. As in `populora.core.sections`,
each field's description is its key's help (params.yaml's comment is generated from it) and its
`json_schema_extra` fix says how to mend a wrong value.
"""

from __future__ import annotations

import os
from datetime import date
from typing import Literal, get_args

from pydantic import Field, field_validator, model_validator

from populora.core.sections import (
    MAX_NEW_TOKENS,
    MAX_NEW_TOKENS_FIX,
    MIN_TEMPERATURE,
    Section,
    check_sampling_temperature,
)

# the names bench.benchmarks (and together, raw_base, limits) accept
Benchmark = Literal[
    "humaneval_plus",
    "mbpp_plus",
    "gsm8k",
    "math500",
    "minerva_math",
    "olympiadbench",
    "aime24",
    "aime25",
    "amc23",
    "cruxeval_o",
    "cruxeval_i",
    "livecodebench",
]
BENCHMARKS: tuple[Benchmark, ...] = get_args(Benchmark)
# run when bench.benchmarks is not given: LiveCodeBench needs the hub or a local copy, so it is opt-in
DEFAULT_BENCHMARKS = tuple(name for name in BENCHMARKS if name != "livecodebench")
# run together by default (bench.together): the code and math benchmarks, 2 problems each on the CPU
SMOKE_BENCHMARKS = tuple(name for name in DEFAULT_BENCHMARKS if not name.startswith("cruxeval"))
# bench.limits when not given (a fresh dict per section)
_DEFAULT_LIMITS: dict[Benchmark, int | None] = {"cruxeval_o": 60, "cruxeval_i": 60}


class CruxevalSection(Section):
    """CRUXEval-O/I's prompt and answer budget."""

    prompt: Literal["project", "official"] = Field(
        "project",
        description="project: the students' solver prompt (solve.mode) with worked examples; official: "
        "CRUXEval's own direct prompt.",
    )
    worked_examples: int = Field(
        1, ge=0, description="Worked examples in the project prompt (CRUXEval rows outside the scored slice)."
    )
    max_new_tokens: int = Field(
        48,
        ge=8,
        le=MAX_NEW_TOKENS,
        description="Answer token cap (gold answers: 99% within 40 tokens; a batch decodes until its longest row stops).",
        json_schema_extra={"fix": MAX_NEW_TOKENS_FIX},
    )


class LiveCodeBenchSection(Section):
    """LiveCodeBench's release, contest window and per-test limits."""

    release: str = Field(
        "release_v5",
        pattern=r"^(release_v|v)[1-9][0-9]*$",
        description="Release of livecodebench/code_generation_lite (release_vN: every problem up to vN; vN: only "
        "the problems added in vN); the local copy is <data_dir>/livecodebench/<release>.jsonl.",
    )
    start_date: date | None = Field(
        None,
        description="Score only problems whose contest_date is on or after this ISO date (after the base "
        "model's training cut-off: LiveCodeBench's answer to contamination); null = no lower bound.",
    )
    end_date: date | None = Field(None, description="... and on or before this ISO date; null = no upper bound.")
    timeout_s: float = Field(6.0, gt=0, le=600, description="Wall-clock limit per test case (lcb_runner: 6 s).")
    memory_mb: int = Field(2048, ge=64, description="Address-space limit per test case run.")

    @model_validator(mode="after")
    def _window(self):
        if self.start_date and self.end_date and self.start_date > self.end_date:
            raise ValueError(f"start_date {self.start_date} is after end_date {self.end_date}")
        return self


class BenchSection(Section):
    """The benchmarks every final member (and the base model) is scored on."""

    benchmarks: tuple[Benchmark, ...] = Field(
        DEFAULT_BENCHMARKS,
        min_length=1,
        description="Benchmarks to run for every model (livecodebench only when listed), one at least.",
        json_schema_extra={
            "fix": "Name one benchmark at least (the DVC stages bench_summary and report read the "
            "folder the bench stages write, results/bench); for a run judged on the held-out pool "
            "alone, keep one cheap benchmark, e.g. benchmarks: [cruxeval_o] with limits: "
            "{cruxeval_o: 10}."
        },
    )
    # the 2-problem smoke subsets, whose jobs of their own were mostly start-up (docs/benchmarks.md)
    together: tuple[Benchmark, ...] = Field(
        SMOKE_BENCHMARKS,
        description="Benchmarks (of those in `benchmarks`) run one after another in one job per arm and one for the "
        "base model, the model loaded once; the others get a job each. Ignored with sampler.engine: vllm (an "
        "engine's memory is only given back when its process ends). [] = every benchmark a job of its own.",
    )
    raw_base: tuple[Benchmark, ...] = Field(
        ("cruxeval_o", "cruxeval_i"),
        description="Benchmarks (of those in `benchmarks` with a job of their own) the raw base, the model before "
        "the warm start, is scored on too, beside the base, in the base's job (warm_start.enabled only; its result "
        "rides in base.json as raw_base). [] = none.",
    )
    roles: tuple[Literal["students", "teachers"], ...] = Field(
        ("students",),
        min_length=1,
        description="Which final members of an arm are benchmarked (the baseline's one adapter is both); "
        "the base model always is. Students: the headline compares them with the baseline, and every stacked "
        "member adds its rows to each benchmark pass (teachers doubled the population's cost on 2T-2S).",
    )
    # before data_dir: its validator checks that LiveCodeBench's release is on disk or on the hub
    livecodebench: LiveCodeBenchSection = Field(
        LiveCodeBenchSection(),
        description="The LiveCodeBench release, contest window (start_date <= end_date, "
        "ISO dates) and per-test limits.",
    )
    data_dir: str | None = Field(
        "../shared/benchmarks",
        description="Offline benchmark folder (evalplus/, math/, cruxeval/); the POPULORA_BENCHMARKS environment "
        "variable overrides it; null = the official downloads.",
        json_schema_extra={
            "fix": "Point bench.data_dir (or the POPULORA_BENCHMARKS environment variable) at the "
            "folder holding evalplus/, math/ and cruxeval/ (see ../shared/benchmarks/README.md), drop "
            "the benchmarks whose files are missing from bench.benchmarks, or set bench.data_dir: null "
            "to use the official downloads."
        },
    )
    limit: int | None = Field(2, ge=1, description="First N problems per benchmark (CPU subset); null = full sets.")
    limits: dict[Benchmark, int | None] = Field(
        default_factory=lambda: _DEFAULT_LIMITS.copy(),
        description="Per-benchmark first-N problems, overriding `limit` (null = the full set).",
    )
    cruxeval: CruxevalSection = CruxevalSection()
    max_new_tokens: int = Field(
        96,
        ge=16,
        le=MAX_NEW_TOKENS,
        description="Generation cap per benchmark answer.",
        json_schema_extra={"fix": MAX_NEW_TOKENS_FIX},
    )
    batch_size: int = Field(16, ge=1, description="Prompts per generate call.")

    @field_validator("limits")
    @classmethod
    def _positive_limits(cls, value):
        bad = sorted(name for name, limit in value.items() if limit is not None and limit < 1)
        if bad:
            raise ValueError(f"limits of {', '.join(bad)} must be 1 or more (or null for the full set)")
        return value

    @field_validator("data_dir")
    @classmethod
    def _data_present(cls, value, info):
        """Missing benchmark files fail here, before any stage runs (not at the first bench job)."""
        from populora.core.benchmark_data import (
            DATA_ENV,
            livecodebench_unavailable,
            missing_data_files,
            resolve_data_dir,
        )

        folder = resolve_data_dir(value)
        benchmarks = info.data.get("benchmarks", ())
        missing = missing_data_files(folder, benchmarks) if folder is not None else []
        if "livecodebench" in benchmarks and "livecodebench" in info.data:  # a local copy, else the hub
            unavailable = livecodebench_unavailable(folder, info.data["livecodebench"].release)
            missing += [unavailable] if unavailable else []
        if missing:
            where = f"{DATA_ENV}={os.environ[DATA_ENV]}" if os.environ.get(DATA_ENV) else f"bench.data_dir = {value}"
            raise ValueError(
                f"benchmark data not found ({where}, resolved to {folder or 'the official downloads'}; missing "
                f"{', '.join(missing)})"
            )
        return value

    def limit_of(self, benchmark: str) -> int | None:
        """Problems evaluated on `benchmark`: its `limits` entry when present, else `limit`."""
        return self.limits[benchmark] if benchmark in self.limits else self.limit


class ControlSection(Section):
    """The positive control (`python -m populora.control.positive`): solver-only RL of one adapter on one
    task family, read by nothing else. Its settings of the update, sampler and solver are the params' own."""

    family: str = Field(
        "list_then_arith",
        min_length=1,
        description="Task family of populora/tasks/families.py (FAMILIES; "
        "checked by the control before any work, so the pipeline's stages do not import it).",
    )
    steps: int = Field(
        16, ge=1, description="Training steps: each samples a fresh batch and takes update.steps optimizer steps on it."
    )
    tasks_per_step: int = Field(8, ge=1, description="Training tasks per step (fresh ones every step).")
    samples: int = Field(
        4, ge=2, description="Answers sampled per training task (the group a per-task baseline compares them within)."
    )
    temperature: float = Field(
        1.0,
        gt=0,
        le=2,
        description="Sampling temperature of the training answers (held-out answers are greedy).",
        json_schema_extra={
            "fix": f"Use a temperature from {MIN_TEMPERATURE:g} to 2 (1.0 "
            "samples the model's own distribution): the control learns from "
            "sampled answers; its held-out answers are greedy already."
        },
    )
    heldout: int = Field(
        192, ge=10, description="Held-out tasks, scored greedy; their inputs never appear in training."
    )
    eval_every: int = Field(4, ge=1, description="Score the held-out pool after every this many steps (and at 0).")
    arms: tuple[Literal["real", "shuffled"], ...] = Field(
        ("real", "shuffled"),
        min_length=1,
        description="real: the project's advantages; shuffled: the same "
        "updates with advantages shuffled within their group (the null).",
    )
    seed: int = Field(0, description="Seed of the tasks, the initial adapter and the sampling (shared by the arms).")
    min_gain: float = Field(15.0, description="Pass bar: real minus base and real minus shuffled, in points.")
    max_p: float = Field(0.001, gt=0, lt=1, description="Pass bar: exact McNemar p of both differences.")

    @field_validator("temperature")
    @classmethod
    def _sampled(cls, value: float) -> float:
        return check_sampling_temperature(value)


TRACKER_PACKAGES = {"tensorboard": "tensorboardX", "wandb": "wandb"}  # tracking.report_to -> the module it needs


class TrackingSection(Section):
    """Optional experiment trackers fed from the live history (populora/report/trackers.py)."""

    report_to: tuple[Literal["tensorboard", "wandb"], ...] = Field(
        (),
        description="Trackers that get every generation's figures while the run goes on: tensorboard "
        "(tensorboardX event files under results/tracking/<arm>/tensorboard), wandb (offline, under "
        "results/tracking/<arm>/wandb; needs `pip install wandb`). Empty: none (the live history and "
        "`dvc plots` are always written).",
    )
    project: str = Field("populora", min_length=1, description="The W&B project name of the runs.")

    @field_validator("report_to")
    @classmethod
    def _installed(cls, value: tuple) -> tuple:
        import importlib.util

        missing = [name for name in value if importlib.util.find_spec(TRACKER_PACKAGES[name]) is None]
        if missing:
            raise ValueError(
                f"{', '.join(missing)} needs the {', '.join(TRACKER_PACKAGES[m] for m in missing)} package, "
                "which is not installed; pip install it, or leave it out of tracking.report_to"
            )
        return value
