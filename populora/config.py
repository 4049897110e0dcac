"""The one validated configuration: `params.yaml` -> frozen pydantic models.

`load_params(path)` is called first by the Snakefile (at parse time), by `workflow.render_dvc`
and by every stage, so a malformed file fails before any model loads. Errors name the key,
what was wrong, and how to fix it:

    params.yaml: population.students: Input should be greater than or equal to 1 (got 0).
      Fix: At least one student is needed; students solve the teachers' tasks.

Check a file by hand with `python -m populora.config params.yaml`.
"""

from __future__ import annotations

import os
import sys
from datetime import date
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

TASK_TYPES = ("code_o", "code_i", "code_f")
ARMS = ("population", "baseline")
EMBEDDED_MODEL = "smollm2"  # populora.lm.model.EMBEDDED_MODEL (that module imports torch)
MAX_TEMPERATURE = 10.0  # above it every token is about equally likely: no use for sampling or PFSP weights
MIN_TEMPERATURE = 0.01  # vLLM samples any temperature in (0, 0.01) at 0.01, so the update would score other odds
MAX_NEW_TOKENS = 32768  # hard cap on every max_new_tokens; propose/solve (and bench on vLLM) also stay below the window


class ParamsError(ValueError):
    """params.yaml is invalid; the message lists every offending key with a fix."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("arms", "types", check_fields=False)
    @classmethod
    def _each_once(cls, value: tuple) -> tuple:
        """List keys that name things (dag.arms, propose.types): each name may appear once."""
        repeated = sorted({item for item in value if value.count(item) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} appears more than once; each may appear once")
        return value


class BaseSection(_Section):
    seed: int = Field(0, description="Master random seed; every stage derives its own seed from it.")


class ModelSection(_Section):
    base_model: str = Field(
        "smollm2",
        min_length=1,
        description="'smollm2' for the embedded SmolLM2-135M-Instruct, or any HF model id or local folder.",
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="Weights dtype of sampling and scoring. auto: bfloat16 on a CPU with avx512_bf16 or AMX "
        "(or a GPU with bf16), float32 elsewhere (populora.lm.dtype; the choice is logged and recorded). A study pins "
        "float32 or bfloat16: auto can differ between machine kinds. The update's LoRA weights and AdamW stay float32.")
    device: str = Field("cpu", description="'cpu', 'auto' (cuda when present) or 'cuda'. With 'cpu' the model "
                        "stages claim no GPU and take one thread each, so Snakemake runs them side by side.")

    @field_validator("base_model")
    @classmethod
    def _local_folder_present(cls, value: str) -> str:
        """A local folder must be there now (resolved as the base_model stage resolves it,
        `populora.core.paths.project_path`); a hub id is only looked up by that stage."""
        if value == EMBEDDED_MODEL:
            return value
        from populora.core.paths import project_path

        folder = project_path(value)
        if folder.exists():
            if not (folder / "config.json").is_file():
                raise ValueError(f"{folder} is not a Hugging Face model folder (no config.json in it)")
        elif looks_like_path(value):
            raise ValueError(f"no folder at {folder}")
        return value


def looks_like_path(value: str) -> bool:
    """A `model.base_model` meant as a local folder, not a hub id (`org/name`): absolute, starting with
    `.` or `~`, more than one `/` deep, or ending in `/`. A bare `org/name` that is not a local folder is
    a hub id."""
    return Path(value).is_absolute() or value.startswith((".", "~", "/")) or value.count("/") > 1 or value.endswith("/")


def _sampling_temperature(value: float) -> float:
    if 0 < value < MIN_TEMPERATURE:
        raise ValueError(f"a temperature between 0 and {MIN_TEMPERATURE:g} is neither greedy (0) nor one vLLM "
                         f"samples at (it raises it to {MIN_TEMPERATURE:g})")
    return value


class SamplerSection(_Section):
    """What samples tokens (the `populora.lm.engines` sampler), not how (temperature etc.: SamplingSection)."""

    engine: Literal["hf", "vllm"] = Field(
        "hf", description="What samples propose, solve and the CRUXEval/EvalPlus/LiveCodeBench passes: hf = the "
        "project's stacked-LoRA decode loop (the CPU default and the reference), vllm = vLLM with every adapter a "
        "LoRARequest (paged KV cache, continuous batching, prefix caching; install with scripts/setup_vllm_env.sh). "
        "Math benchmarks then use lm-eval's own vllm model.")
    memory_fraction: float = Field(
        0.15, gt=0, le=1, description="vllm: gpu_memory_utilization, the share of the GPU's memory (of host memory "
        "on CPU, where the default 0.92 fails) vLLM reserves for weights and KV cache.")
    max_loras: int | None = Field(
        None, ge=1, description="vllm: adapters resident in one batch; null = every adapter of the pass (members).")
    max_num_seqs: int = Field(256, ge=1, description="vllm: sequences scheduled at once (continuous batching).")
    enforce_eager: bool = Field(True, description="vllm: skip graph capture / compilation (true on CPU and in tests).")
    request_seeds: bool = Field(
        True, description="vllm: give every sampled request its own seed, so a rerun on the CPU samples the same "
        "tokens. On a GPU vLLM samples seeded rows on its slower per-request-generator path, and batch composition "
        "changes the numbers anyway: false in the GPU overlays (the engine's seed only). Greedy requests never "
        "carry one.")


class LoraSection(_Section):
    rank: int = Field(8, ge=1, le=512, description="LoRA rank r, shared by every member (operators keep it).")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha (scaling = alpha / rank).")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    target_modules: tuple[str, ...] = Field(
        ("q_proj", "k_proj", "v_proj", "o_proj"), min_length=1, description="Linear module names to adapt."
    )
    init_std: float = Field(
        0.0, ge=0, description="Std of the initial lora_B noise; 0 = PEFT default (B = 0, every member starts as the base)."
    )


class PopulationSection(_Section):
    teachers: int = Field(2, ge=1, description="Teacher adapters in the population arm (they propose tasks).")
    students: int = Field(2, ge=1, description="Student adapters in the population arm (they solve tasks).")


class DagSection(_Section):
    generations: int = Field(3, ge=1, le=999, description="Generations per arm (zero-padded folders gen000...).")
    arms: tuple[Literal["population", "baseline"], ...] = Field(
        ARMS, min_length=1, description="Which arms to run: population and/or baseline."
    )
    update_jobs: int = Field(
        4, ge=1, le=64, description="Update jobs per arm and generation: job k trains the arm's adapters k, k + J, "
        "k + 2J, ... (teachers, then students); J at least the population's size gives one job per adapter, so N "
        "GPUs train N adapters at once. The results do not depend on it (byte for byte on the CPU; on a GPU up to "
        "the kernels' nondeterminism, docs/gpu.md). Rendered into dvc.yaml: re-render after "
        "a change (python -m workflow.render_dvc).")


class BufferSection(_Section):
    seeds: Literal["builtin", "identity"] = Field(
        "builtin", description="identity: AZR's single seed program; builtin: plus a few simple hand-written seeds."
    )
    max_size: int = Field(16384, ge=1, description="Task buffer cap; past it the oldest non-seed tasks are dropped.")


class SamplingSection(_Section):
    temperature: float = Field(0.7, ge=0, le=MAX_TEMPERATURE, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass.")
    max_new_tokens: int = Field(160, ge=1, le=MAX_NEW_TOKENS, description="Cap on generated tokens per segment.")
    batch_size: int = Field(32, ge=1, description="Rows per generate() call (rows of different adapters are mixed).")

    @field_validator("temperature")
    @classmethod
    def _greedy_or_sampled(cls, value: float) -> float:
        return _sampling_temperature(value)


class ProposeSection(SamplingSection):
    mode: Literal["scaffolded", "free_form"] = Field(
        "scaffolded", description="scaffolded: prefill code fences and stop at ``` (small models); free_form: AZR format."
    )
    per_type: int = Field(2, ge=1, description="Proposals per teacher per task type per generation.")
    types: tuple[Literal["code_o", "code_i", "code_f"], ...] = Field(
        TASK_TYPES, min_length=1, description="Task types proposed and solved (AZR: all three; the CPU study trains "
        "code_o and code_i, what CRUXEval-O/I measure).")
    references: int = Field(2, ge=0, description="Reference tasks from the buffer shown in each proposer prompt (AZR K).")
    code_f_inputs: int = Field(10, ge=2, le=10, description="Inputs a code_f proposal must give (first half shown, rest "
                               "hidden; at most 10, what the seed tasks carry).")
    temperature: float = Field(0.6, ge=0, le=MAX_TEMPERATURE, description="Proposer sampling temperature (0 = greedy).")
    max_new_tokens: int = Field(128, ge=1, le=MAX_NEW_TOKENS, description="Cap on generated tokens per proposal "
                                "segment (below update.max_seq_len).")
    reject_duplicates: bool = Field(
        True, description="A code_o/code_i proposal whose normalised program is already in the buffer is invalid "
        "(reason `duplicate`): copying a reference earns a teacher nothing."
    )
    reject_copyable: bool = Field(
        False, description="A code_o/code_i task whose output equals an argument of its input (a disguised "
        "identity: a student solves it by echoing what it is shown) is invalid (reason `copyable`), and the "
        "identity seed stays out of the buffer. AZR keeps them (false)."
    )


class SolveSection(SamplingSection):
    mode: Literal["scaffolded", "free_form"] = Field("scaffolded", description="Answer format, as for propose.mode.")
    tasks_per_type: int = Field(2, ge=1, description="Tasks each student attempts per task type per generation.")
    samples: int = Field(2, ge=1, description="Answers each student samples per task (solve-rate estimate).")
    worked_examples: int = Field(1, ge=0, description="Worked examples from the buffer rotated into solver prompts.")
    fill_in: Literal["newest", "uniform"] = Field(
        "newest", description="Buffer tasks for slots whose teacher has no valid task: newest first, or uniform "
        "over the buffer (AZR).")
    temperature: float = Field(0.5, ge=0, le=MAX_TEMPERATURE, description="Solver sampling temperature (0 = greedy).")
    max_new_tokens: int = Field(96, ge=1, le=MAX_NEW_TOKENS, description="Cap on generated answer tokens (below "
                                "update.max_seq_len).")


class VerifySection(_Section):
    timeout_s: float = Field(
        2.0, gt=0, le=60, description="CPU-time limit (user + system seconds) per program execution: it decides the "
        "verdict timeout, so a busy machine does not change verdicts.")
    wall_timeout_s: float | None = Field(
        None, gt=0, le=600, description="Wall-clock backstop per execution, for programs that sleep or block (also "
        "timeout); null = max(5 x timeout_s, timeout_s + 3 s).")
    memory_mb: int = Field(512, ge=64, description="Address-space limit per execution.")
    max_output_chars: int = Field(2000, ge=16, description="Longer reprs are invalid (output_too_large), never truncated.")
    workers: int = Field(2, ge=1, description="Parallel sandbox workers.")
    # The names are populora.sandbox.LAYERS (tests/test_sandbox.py checks they agree); the default is
    # what an ordinary user gets where unprivileged user namespaces are allowed: all but uid_drop.
    required_layers: tuple[Literal["fs_jail", "ipc_namespace", "mount_namespace", "net_namespace", "seccomp",
                                   "uid_drop"], ...] = Field(
        ("fs_jail", "ipc_namespace", "mount_namespace", "net_namespace", "seccomp"),
        description="Sandbox layers that must be on, else no model code runs (exit code 3): a list of fs_jail, "
        "ipc_namespace, mount_namespace, net_namespace, seccomp, uid_drop, or `all`; [] runs with whatever comes up, "
        "under a loud warning. The default leaves out uid_drop, which only root has.")

    @field_validator("required_layers", mode="before")
    @classmethod
    def _all_layers(cls, value):
        import typing
        names = typing.get_args(typing.get_args(cls.model_fields["required_layers"].annotation)[0])
        if value == "all":
            return names
        value = (value,) if isinstance(value, str) else value
        try:
            unknown = [v for v in value if v not in names]
        except TypeError:
            return value
        if unknown:
            raise ValueError(f"unknown sandbox layers {unknown}")
        return tuple(name for name in names if name in set(value))  # each layer once, in the order of the names

    @model_validator(mode="after")
    def _wall_after_cpu(self):
        if self.wall_timeout_s is not None and self.wall_timeout_s < self.timeout_s:
            raise ValueError(f"wall_timeout_s ({self.wall_timeout_s:g}) is below timeout_s ({self.timeout_s:g}): "
                             "the wall-clock backstop must leave a program at least its CPU time")
        return self


class RewardSection(_Section):
    teacher_mode: Literal["learnability", "zero_sum"] = Field(
        "learnability", description="learnability: 1-p for 0<p<1 else 0 (AZR); zero_sum: 1-p also for p=0."
    )
    advantage_baseline: Literal["trr++", "per_task"] = Field(
        "trr++", description="What an answer's reward is compared with. trr++ (AZR): the mean and std of its "
        "(adapter, role, task type) group, so every answer to an easy task gets A > 0 and every answer to a hard one "
        "A < 0; per_task (RLOO, GRPO's group): the mean of the other answers of the same adapter to the same task, "
        "so only answers better or worse than their siblings carry signal. Proposals (one sample each) keep trr++.")


class UpdateSection(_Section):
    learning_rate: float = Field(1e-4, gt=0, description="AdamW learning rate for LoRA weights.")
    steps: int = Field(1, ge=1, description="Optimizer steps per adapter per generation (each over all its rollouts).")
    micro_batch: int = Field(4, ge=1, description="Sequences per forward/backward (gradient accumulation).")
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_seq_len: int = Field(1024, ge=32, description="Longer prompt+completion sequences are left-truncated.")
    max_tokens_per_micro_batch: int | None = Field(
        4096, ge=32, description="Cap on padded tokens (sequences x longest) per micro-batch; null = only micro_batch caps it."
    )
    gradient_checkpointing: bool = Field(False, description="Recompute activations in the backward pass (less memory, ~30% slower).")
    role_steps: Literal["joint", "per_role"] = Field(
        "joint", description="joint: an adapter's `steps` are over all its rollouts together; per_role: an adapter "
        "in both roles (the baseline) takes `steps` over its proposals and `steps` over its answers, as a teacher "
        "and a student each do (a role-matched baseline).")
    shuffle_advantages: bool = Field(
        False, description="The null control: shuffle advantages within each TRR++ group (adapter, role, type) "
        "before the update: same data and update sizes, no learning signal.")
    importance_cap: float | None = Field(
        None, gt=0, description="Truncated importance sampling (verl's and TRL's TIS): each trained token's weight "
        "times min(exp(update logprob - sampler logprob), cap), for when the sampler's scores differ from the "
        "update's (another engine, bf16 sampling). null: off (the hf engine's scores equal the update's).")
    processes: int = Field(
        1, ge=1, le=64, description="Processes per update job (one GPU each): one adapter's micro-batches are split "
        "over them and their gradients summed (data parallel, through `accelerate launch`); 1 = one process.")
    loss_reduction: Literal["sequence", "token"] = Field(
        "sequence", description="sequence: mean over rollouts of A x the answer's mean token log-prob (every answer "
        "weighs the same, the design's per-sequence statistics); token: every trained token weighs the same (DAPO).")
    diagnostics: bool = Field(
        True, description="After each optimizer step, score the step's tokens again to report how the log-prob of "
        "answers with A > 0 and A < 0 moved (one extra forward pass per step, no backward).")
    mixed_precision: Literal["bf16"] | None = Field(
        None, description="Accelerate's autocast for the update's forward pass: bf16 runs the LoRA and head matmuls "
        "in bfloat16 on a GPU; LoRA weights and optimizer moments stay float32. null: the model's own dtypes.")


class RatingsSection(_Section):
    mu: float = Field(25.0, description="TrueSkill initial mu.")
    sigma: float = Field(25.0 / 3, gt=0, description="TrueSkill initial sigma.")
    beta: float = Field(25.0 / 6, gt=0, description="TrueSkill beta (skill-difference scale).")
    tau: float = Field(25.0 / 300, ge=0, description="TrueSkill dynamics factor.")


class PairingSection(_Section):
    strategy: Literal["pfsp", "round_robin", "pairs"] = Field(
        "pfsp", description="pfsp: favour near-balanced matchups; pairs: teacher k with student k only, each pair "
        "reading only its own tasks (the ensemble control: independent 1T-1S pairs).")
    temperature: float = Field(1.0, gt=0, le=MAX_TEMPERATURE, description="PFSP weighting temperature.")


# Names of populora.population.operators.MUTATIONS and CROSSOVERS (kept here so validating params does not
# import torch; tests/test_config.py checks the two lists agree).
KNOWN_OPERATORS = ("svd_scale_rotate", "gaussian_subset", "mask_components", "gaussian_all", "neftune",
                   "layerwise", "svd_split", "dare", "extrapolate", "fitness_weighted")


class EvolveSection(_Section):
    interval: int = Field(2, ge=1, description="Evolve after every `interval` generations (0-based gen g when (g+1) % interval == 0).")
    replace: int = Field(
        1, ge=0, description="Members replaced per sub-population per evolution event (a sub-population of one is "
        "never replaced)."
    )
    fitness: Literal["auto", "trueskill", "reward"] = Field(
        "auto", description="What ranks members for replacement: auto = teachers by mean reward under the "
        "learnability reward, everything else by conservative TrueSkill; or one rule for both roles."
    )
    operators: dict[str, float] = Field(
        default_factory=lambda: {"svd_scale_rotate": 1.0, "gaussian_subset": 1.0, "layerwise": 1.0, "svd_split": 1.0},
        description="Operator name -> weight in the mix (the probability of each, once normalised; table: docs/design.md).",
    )
    parents: Literal["population", "survivors"] = Field(
        "population", description="Where a crossover's second parent comes from: population = any other member, the one "
        "replaced included (a sub-population of two can cross); survivors = the strongest survivors only (a pool of one "
        "falls back to a mutation)."
    )

    @field_validator("operators")
    @classmethod
    def _positive_mix(cls, value):
        if not value or any(weight < 0 for weight in value.values()) or sum(value.values()) <= 0:
            raise ValueError("needs at least one operator with a positive weight, and no negative weights")
        unknown = sorted(set(value) - set(KNOWN_OPERATORS))
        if unknown:
            raise ValueError(f"unknown operators {unknown}; choose from {', '.join(KNOWN_OPERATORS)}")
        return value


BENCHMARKS = ("humaneval_plus", "mbpp_plus", "gsm8k", "math500", "minerva_math", "olympiadbench", "aime24", "aime25", "amc23",
              "cruxeval_o", "cruxeval_i", "livecodebench")
# run when bench.benchmarks is not given: LiveCodeBench needs the hub or a local copy, so it is opt-in
DEFAULT_BENCHMARKS = tuple(name for name in BENCHMARKS if name != "livecodebench")
# run together by default (bench.together): the code and math benchmarks, 2 problems each on the CPU
SMOKE_BENCHMARKS = tuple(name for name in DEFAULT_BENCHMARKS if not name.startswith("cruxeval"))


class CruxevalSection(_Section):
    prompt: Literal["project", "official"] = Field(
        "project", description="project: the students' solver prompt (solve.mode) with worked examples; official: "
        "CRUXEval's own direct prompt."
    )
    worked_examples: int = Field(1, ge=0, description="Worked examples in the project prompt (CRUXEval rows outside the scored slice).")
    max_new_tokens: int = Field(
        48, ge=8, le=MAX_NEW_TOKENS,
        description="Answer token cap (gold answers: 99% within 40 tokens; a batch decodes until its longest row stops)."
    )


class LiveCodeBenchSection(_Section):
    release: str = Field(
        "release_v5", pattern=r"^(release_v|v)[1-9][0-9]*$",
        description="Release of livecodebench/code_generation_lite (release_vN: every problem up to vN; vN: only "
        "the problems added in vN); the local copy is <data_dir>/livecodebench/<release>.jsonl.")
    start_date: date | None = Field(
        None, description="Score only problems whose contest_date is on or after this ISO date (after the base "
        "model's training cut-off: LiveCodeBench's answer to contamination); null = no lower bound.")
    end_date: date | None = Field(None, description="... and on or before this ISO date; null = no upper bound.")
    timeout_s: float = Field(6.0, gt=0, le=600, description="Wall-clock limit per test case (lcb_runner: 6 s).")
    memory_mb: int = Field(2048, ge=64, description="Address-space limit per test case run.")

    @model_validator(mode="after")
    def _window(self):
        if self.start_date and self.end_date and self.start_date > self.end_date:
            raise ValueError(f"start_date {self.start_date} is after end_date {self.end_date}")
        return self


class BenchSection(_Section):
    benchmarks: tuple[Literal[BENCHMARKS], ...] = Field(
        DEFAULT_BENCHMARKS, min_length=1,
        description="Benchmarks to run for every model (livecodebench only when listed), one at least.")
    # the 2-problem smoke subsets, whose jobs of their own were mostly start-up (docs/benchmarks.md)
    together: tuple[Literal[BENCHMARKS], ...] = Field(
        SMOKE_BENCHMARKS,
        description="Benchmarks (of those in `benchmarks`) run one after another in one job per arm and one for the "
        "base model, the model loaded once; the others get a job each. Ignored with sampler.engine: vllm (an "
        "engine's memory is only given back when its process ends). [] = every benchmark a job of its own.")
    roles: tuple[Literal["students", "teachers"], ...] = Field(
        ("students",), min_length=1,
        description="Which final members of an arm are benchmarked (the baseline's one adapter is both); "
        "the base model always is. Students: the headline compares them with the baseline, and every stacked "
        "member adds its rows to each benchmark pass (teachers doubled the population's cost on 2T-2S).")
    # before data_dir: its validator checks that LiveCodeBench's release is on disk or on the hub
    livecodebench: LiveCodeBenchSection = Field(
        LiveCodeBenchSection(), description="The LiveCodeBench release, contest window (start_date <= end_date, "
        "ISO dates) and per-test limits.")
    data_dir: str | None = Field(
        "../shared/benchmarks",
        description="Offline benchmark folder (evalplus/, math/, cruxeval/); the POPULORA_BENCHMARKS environment "
        "variable overrides it; null = the official downloads.",
    )
    limit: int | None = Field(2, ge=1, description="First N problems per benchmark (CPU subset); null = full sets.")
    limits: dict[Literal[BENCHMARKS], int | None] = Field(
        default_factory=lambda: {"cruxeval_o": 60, "cruxeval_i": 60},
        description="Per-benchmark first-N problems, overriding `limit` (null = the full set).",
    )
    cruxeval: CruxevalSection = CruxevalSection()
    max_new_tokens: int = Field(96, ge=16, le=MAX_NEW_TOKENS, description="Generation cap per benchmark answer.")
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
                f"{', '.join(missing)})")
        return value

    def limit_of(self, benchmark: str) -> int | None:
        """Problems evaluated on `benchmark`: its `limits` entry when present, else `limit`."""
        return self.limits[benchmark] if benchmark in self.limits else self.limit


class ControlSection(_Section):
    """The positive control (`python -m populora.control.positive`): solver-only RL of one adapter on one
    task family, read by nothing else. Its settings of the update, sampler and solver are the params' own."""

    family: str = Field("add", min_length=1, description="Task family of populora/control/families.py (FAMILIES; "
                        "checked by the control before any work, so the pipeline's stages do not import it).")
    steps: int = Field(16, ge=1, description="Training steps: each samples a fresh batch and takes update.steps "
                       "optimizer steps on it.")
    tasks_per_step: int = Field(8, ge=1, description="Training tasks per step (fresh ones every step).")
    samples: int = Field(4, ge=2, description="Answers sampled per training task (the group a per-task baseline "
                         "compares them within).")
    temperature: float = Field(1.0, gt=0, le=2, description="Sampling temperature of the training answers "
                               "(held-out answers are greedy).")
    heldout: int = Field(192, ge=10, description="Held-out tasks, scored greedy; their inputs never appear in training.")
    eval_every: int = Field(4, ge=1, description="Score the held-out pool after every this many steps (and at 0).")
    arms: tuple[Literal["real", "shuffled"], ...] = Field(
        ("real", "shuffled"), min_length=1, description="real: the project's advantages; shuffled: the same "
        "updates with advantages shuffled within their group (the null).")
    seed: int = Field(0, description="Seed of the tasks, the initial adapter and the sampling (shared by the arms).")
    min_gain: float = Field(15.0, description="Pass bar: real minus base and real minus shuffled, in points.")
    max_p: float = Field(0.001, gt=0, lt=1, description="Pass bar: exact McNemar p of both differences.")

    @field_validator("temperature")
    @classmethod
    def _sampled(cls, value: float) -> float:
        return _sampling_temperature(value)


class HeldoutSection(_Section):
    """The held-out pool (populora/heldout/): verified code_o/code_i tasks made once by the base
    model as teacher, never proposed, solved or trained on, answered greedily by every member at every
    generation (stages.heldout_pool, stages.heldout)."""

    per_type: int = Field(8, ge=0, description="Pool tasks per trained type (code_o, code_i among propose.types); "
                          "0: no pool, nothing scored.")
    seed: int = Field(0, description="Seed of the pool (proposals, worked examples), independent of base.seed so "
                      "that every run of a study shares one pool.")
    max_rounds: int = Field(12, ge=1, description="Rounds of base-model proposals (one batch, propose.batch_size, each) before "
                            "the pool is taken as it is, short (logged and recorded in base.json).")
    roles: tuple[Literal["students", "teachers"], ...] = Field(
        ("students",), min_length=1, description="Whose members answer the pool every generation (the "
        "baseline's one adapter is both): [students, teachers] also scores the teachers, twice the cost of a 2T-2S "
        "generation.")
    samples: int = Field(
        0, ge=0, le=256, description="Answers per pool task at temperature 1 for the continuous measure, the mean pass "
        "rate (heldout.<member>.pass_rate), beside the greedy verdicts; 0: greedy only (each answer costs about as "
        "much as a greedy one).")
    sample_every: int = Field(
        1, ge=1, description="With heldout.samples: the pass rates after generations g with (g + 1) % sample_every == 0 "
        "(a study's endpoint needs them at its last generation: 10 for a 10-generation study).")
    pool_file: str | None = Field(
        "study/learning/heldout_pool.jsonl", description="A pool made before (the pool.jsonl of a heldout_pool stage, e.g. a study's committed "
        "heldout_pool.jsonl) to reuse instead of proposing one: its tasks are verified again, the first per_type of "
        "each type kept, the base model scored on them. The default is SmolLM2-135M's own pool, made by the learning "
        "study (study/learning/). null: the base model proposes the pool (do so for another base model).")

    @field_validator("pool_file")
    @classmethod
    def _pool_file_exists(cls, value: str | None) -> str | None:
        from populora.core.paths import shipped_path

        if value is not None and not shipped_path(value).is_file():
            raise ValueError(f"no such file: {value} (resolved to {shipped_path(value)}); point heldout.pool_file at "
                             "a pool.jsonl written by the heldout_pool stage, or set it to null")
        return value


TRACKER_PACKAGES = {"tensorboard": "tensorboardX", "wandb": "wandb"}  # tracking.report_to -> the module it needs


class TrackingSection(_Section):
    """Optional experiment trackers fed from the live history (populora/report/trackers.py)."""

    report_to: tuple[Literal["tensorboard", "wandb"], ...] = Field(
        (), description="Trackers that get every generation's figures while the run goes on: tensorboard "
        "(tensorboardX event files under results/tracking/<arm>/tensorboard), wandb (offline, under "
        "results/tracking/<arm>/wandb; needs `pip install wandb`). Empty: none (the live history and "
        "`dvc plots` are always written).")
    project: str = Field("populora", min_length=1, description="The W&B project name of the runs.")

    @field_validator("report_to")
    @classmethod
    def _installed(cls, value: tuple) -> tuple:
        import importlib.util

        missing = [name for name in value if importlib.util.find_spec(TRACKER_PACKAGES[name]) is None]
        if missing:
            raise ValueError(f"{', '.join(missing)} needs the {', '.join(TRACKER_PACKAGES[m] for m in missing)} package, "
                             "which is not installed; pip install it, or leave it out of tracking.report_to")
        return value


class Params(_Section):
    base: BaseSection = BaseSection()
    model: ModelSection = ModelSection()
    lora: LoraSection = LoraSection()
    sampler: SamplerSection = SamplerSection()
    population: PopulationSection = PopulationSection()
    dag: DagSection = DagSection()
    propose: ProposeSection = ProposeSection()
    solve: SolveSection = SolveSection()
    verify: VerifySection = VerifySection()
    buffer: BufferSection = BufferSection()
    reward: RewardSection = RewardSection()
    update: UpdateSection = UpdateSection()
    ratings: RatingsSection = RatingsSection()
    pairing: PairingSection = PairingSection()
    evolve: EvolveSection = EvolveSection()
    bench: BenchSection = BenchSection()
    control: ControlSection = ControlSection()
    heldout: HeldoutSection = HeldoutSection()
    tracking: TrackingSection = TrackingSection()

    @model_validator(mode="after")
    def _cross_checks(self):
        if self.evolve.replace > 0:
            smallest = min(self.population.teachers, self.population.students)
            if "population" in self.dag.arms and self.evolve.replace >= smallest and smallest > 1:
                raise ValueError(
                    f"evolve.replace = {self.evolve.replace} would replace every member of a sub-population of "
                    f"{smallest}; set evolve.replace below min(population.teachers, population.students)"
                )
        copied_types = {"code_o", "code_i"} & set(self.propose.types)
        if self.propose.reject_copyable and self.buffer.seeds == "identity" and copied_types:
            raise ValueError(
                "propose.reject_copyable leaves the identity seed, the only one of buffer.seeds: identity, out of the "
                f"buffer, so {sorted(copied_types)} would start with no task; set buffer.seeds: builtin"
            )
        return self

    @model_validator(mode="after")
    def _token_budgets_fit_the_window(self):
        """Every generated row must fit update.max_seq_len with its prompt: the window a rollout is trained in
        (left-truncated past it) and, on vLLM, the engine's window (max_model_len) for every pass, benchmarks
        included. The hf engine's benchmark passes are not trained and have no window of ours."""
        window = self.update.max_seq_len
        budgets = {"propose.max_new_tokens": self.propose.max_new_tokens,
                   "solve.max_new_tokens": self.solve.max_new_tokens}
        if self.sampler.engine == "vllm":
            budgets |= {"bench.max_new_tokens": self.bench.max_new_tokens,
                        "bench.cruxeval.max_new_tokens": self.bench.cruxeval.max_new_tokens}
        where = ("the window a rollout is trained in and vLLM's max_model_len" if self.sampler.engine == "vllm"
                 else "the window a rollout is trained in (left-truncated past it)")
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "token_budget", f"{budget} new tokens leave no room for the prompt in update.max_seq_len = "
                    f"{window}, {where}",
                    {"fix": f"Lower {key} below update.max_seq_len ({window}), leaving room for the prompt, or "
                     "raise update.max_seq_len (it costs update memory and, on vLLM, KV cache)."}),
                loc=tuple(key.split(".")), input=budget)
            for key, budget in budgets.items() if budget >= window]
        if errors:  # keyed errors, formatted as the fields' own (a plain ValueError here would have no key)
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @model_validator(mode="after")
    def _pairs_are_pairs(self):
        """`pairing.strategy: pairs` needs one teacher per student, and no evolution (a child would carry one
        pair's weights into another's slot)."""
        teachers, students = self.population.teachers, self.population.students
        problems = [] if self.pairing.strategy != "pairs" or "population" not in self.dag.arms else [
            *([("population.teachers", teachers, f"pairing.strategy pairs teacher k with student k, so needs as many "
                f"teachers as students ({students})", "Set population.teachers equal to population.students, or use "
                "pairing.strategy: pfsp.")] if teachers != students else []),
            *([("evolve.replace", self.evolve.replace, "pairing.strategy: pairs keeps the pairs independent, but "
                "evolution would copy one pair's weights into another's slot", "Set evolve.replace: 0 (the ensemble "
                "control has no evolution), or use pairing.strategy: pfsp.")] if self.evolve.replace and teachers > 1 else [])]
        if problems:
            raise ValidationError.from_exception_data(type(self).__name__, [InitErrorDetails(
                type=PydanticCustomError("pairs", problem, {"fix": fix}), loc=tuple(key.split(".")), input=value)
                for key, value, problem, fix in problems])
        return self

    @model_validator(mode="after")
    def _every_role_can_learn(self):
        """Refuse settings under which every advantage of a role is 0 by construction (the run would
        train on nothing): a group of one rollout, or a group whose rollouts are identical, gets A = 0
        (populora.selfplay.advantages). See `cannot_learn` for the cases."""
        errors = [InitErrorDetails(type=PydanticCustomError("cannot_learn", problem, {"fix": fix}),
                                   loc=tuple(key.split(".")), input=value)
                  for key, value, problem, fix in cannot_learn(self)]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


def cannot_learn(params: Params) -> list[tuple[str, object, str, str]]:
    """(key, value, problem, fix) for each role whose every advantage is 0 by construction.

    * propose: proposals always use TRR++ groups (adapter, propose, type) of `propose.per_type` rollouts;
      one per group whitens to 0.
    * solve, per_task: groups (adapter, task) of `solve.samples` answers; one per group, or identical
      answers (greedy decoding of one prompt: temperature 0 with no worked examples drawn per sample), give 0.
    * solve, trr++: groups (adapter, solve, type) of slots x samples answers; a student has exactly
      `solve.tasks_per_type` slots in the baseline arm and in a population whose students' slots cover
      its teachers (else pairing adds slots), so 1 x 1, or 1 task with identical answers, gives 0.
    """
    solve, problems = params.solve, []
    identical = solve.temperature == 0 and solve.worked_examples == 0  # every sample of a task gets one prompt, greedy
    if params.propose.per_type < 2:
        problems.append(("propose.per_type", params.propose.per_type,
                         "one proposal per teacher and task type is alone in its TRR++ group (adapter, propose, type), "
                         "so every proposer advantage is 0 and teachers never learn",
                         "Set propose.per_type to 2 or more."))
    if params.reward.advantage_baseline == "per_task" and solve.samples < 2:
        problems.append(("solve.samples", solve.samples,
                         "reward.advantage_baseline: per_task compares an answer with the other answers to its task, "
                         "and with one sample there are none, so every solve advantage is 0",
                         "Set solve.samples to 2 or more, or reward.advantage_baseline: trr++."))
    elif params.reward.advantage_baseline == "per_task" and identical:
        problems.append(("solve.temperature", solve.temperature,
                         "greedy answers (temperature 0, solve.worked_examples 0: one prompt per task) are identical, so "
                         "with reward.advantage_baseline: per_task every solve advantage is 0",
                         "Sample the answers (solve.temperature above 0, e.g. 0.5), draw worked examples per sample "
                         "(solve.worked_examples 1 or more), or use reward.advantage_baseline: trr++."))
    exact_slots = "baseline" in params.dag.arms or (
        params.population.teachers <= params.population.students * solve.tasks_per_type)
    if (params.reward.advantage_baseline == "trr++" and exact_slots and solve.tasks_per_type == 1
            and (solve.samples == 1 or identical)):
        what = "one answer" if solve.samples == 1 else "identical greedy answers (temperature 0, no worked examples)"
        problems.append(("solve.tasks_per_type", solve.tasks_per_type,
                         f"one task per student and type with {what} leaves each TRR++ group (adapter, solve, type) "
                         "without a spread, so every solve advantage is 0",
                         "Set solve.tasks_per_type to 2 or more, or solve.samples to 2 or more with sampled answers "
                         "(solve.temperature above 0)."))
    return problems


_SAMPLING_TEMPERATURE_FIX = (f"Use 0 (greedy) or a temperature from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}; "
                             "1.0 samples the model's own distribution, 0.5 to 1.0 is usual.")
_MAX_NEW_TOKENS_FIX = (f"Give the new tokens an answer needs, at most {MAX_NEW_TOKENS}; propose and solve, and every "
                       "benchmark on vLLM, also stay below update.max_seq_len, with room for the prompt.")

# Every fix is a sentence: it starts with a capital letter (tests/test_config.py checks).
_FIXES = {
    "verify.required_layers": "List sandbox layers among fs_jail, ipc_namespace, mount_namespace, net_namespace, "
    "seccomp, uid_drop, or write `all`; the default (all but uid_drop) is what an ordinary user gets where user "
    "namespaces are allowed.",
    "model.base_model": f"Give an existing local Hugging Face model folder (a relative path is taken from the "
    "directory the pipeline runs in, the project root), a Hugging Face model id such as Qwen/Qwen2.5-7B, or "
    f"{EMBEDDED_MODEL} for the embedded SmolLM2-135M-Instruct.",
    "propose.temperature": _SAMPLING_TEMPERATURE_FIX,
    "solve.temperature": _SAMPLING_TEMPERATURE_FIX,
    "control.temperature": f"Use a temperature from {MIN_TEMPERATURE:g} to 2 (1.0 samples the model's own "
    "distribution): the control learns from sampled answers; its held-out answers are greedy already.",
    "pairing.temperature": f"Use a PFSP temperature above 0 and at most {MAX_TEMPERATURE:g}: weights are "
    "f(p) ** (1 / temperature), so 1 keeps f, lower sharpens it, higher flattens it toward uniform.",
    "propose.top_p": "Use a nucleus mass above 0 and at most 1 (1.0 keeps every token).",
    "solve.top_p": "Use a nucleus mass above 0 and at most 1 (1.0 keeps every token).",
    "propose.max_new_tokens": _MAX_NEW_TOKENS_FIX,
    "solve.max_new_tokens": _MAX_NEW_TOKENS_FIX,
    "bench.max_new_tokens": _MAX_NEW_TOKENS_FIX,
    "bench.cruxeval.max_new_tokens": _MAX_NEW_TOKENS_FIX,
    "population.students": "At least one student is needed; students solve the teachers' tasks.",
    "population.teachers": "At least one teacher is needed; teachers propose the tasks.",
    "dag.generations": "Use a whole number of generations, 1 or more.",
    "dag.arms": "List population and/or baseline, each once.",
    "bench.benchmarks": "Name one benchmark at least (the DVC stages bench_summary and report read the folder the "
    "bench stages write, results/bench); for a run judged on the held-out pool alone, keep one cheap benchmark, "
    "e.g. benchmarks: [cruxeval_o] with limits: {cruxeval_o: 10}.",
    "bench.data_dir": "Point bench.data_dir (or the POPULORA_BENCHMARKS environment variable) at the folder holding "
    "evalplus/, math/ and cruxeval/ (see ../shared/benchmarks/README.md), drop the benchmarks whose files are missing "
    "from bench.benchmarks, or set bench.data_dir: null to use the official downloads.",
}


def _format_errors(error: ValidationError, source: str) -> str:
    lines = [f"{source} is invalid:"]
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden":
            section = key.rsplit(".", 1)[0] if "." in key else None
            known = sorted((Params.model_fields if section is None else _section_fields(section)) or [])
            lines.append(f"  {key}: unknown key. Fix: Remove it or use one of: {', '.join(known)}.")
            continue
        message = item["msg"].removeprefix("Value error, ")
        got = f" (got {item.get('input')!r})" if item["loc"] else ""
        fix = (item.get("ctx") or {}).get("fix") or _FIXES.get(key) or _describe(key)
        lines.append(f"  {key}: {message}{got}.{' Fix: ' + fix if fix else ''}")
    return "\n".join(lines)


def _field(key: str):
    """The pydantic field of a dotted key (`lora.rank`, `bench.cruxeval.max_new_tokens`), or None."""
    model, info = Params, None
    for part in key.split("."):
        info = (getattr(model, "model_fields", None) or {}).get(part)
        if info is None:
            return None
        model = info.annotation
    return info


def _section_fields(section: str):
    field = _field(section)
    return getattr(field.annotation, "model_fields", None) if field else None


def lower_first(text: str) -> str:
    """`text` with its first letter lowercased to follow "expected", unless its first word is an acronym
    or a name with capitals inside (LoRA, CPU-time, TrueSkill, PFSP), which keep their case.

    >>> lower_first("Sampling temperature."), lower_first("LoRA rank r."), lower_first("CPU-time limit.")
    ('sampling temperature.', 'LoRA rank r.', 'CPU-time limit.')
    """
    word = text.split(maxsplit=1)[0] if text.strip() else ""
    return text[:1].lower() + text[1:] if word[1:] == word[1:].lower() else text


def _describe(key: str) -> str:
    info = _field(key)
    return f"Expected {lower_first(info.description)}" if info and info.description else ""


def parse_params(raw: dict | None, source: str = "params.yaml") -> Params:
    """Validate a params mapping; raise ParamsError naming each bad key and its fix."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(f"{source} must be a YAML mapping of sections (base, model, lora, ...), got {type(raw).__name__}")
    try:
        return Params.model_validate(raw)
    except ValidationError as error:
        raise ParamsError(_format_errors(error, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path} not found. Fix: Run from the repository root or pass --params PATH.")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ParamsError(f"{path} is not valid YAML: {error}") from None
    return parse_params(raw, str(path))


def members_of_arm(params: Params, arm: str) -> dict[str, list[str]]:
    """Slot names per role (`populora.core.refs.arm_slots`). Slots are stable names (adapter folders, benchmark
    stages); the member occupying a slot can change when evolution replaces it (lineage records who is where)."""
    from populora.core.refs import arm_slots

    return arm_slots(arm, params.population.teachers, params.population.students)


def slots_of_arm(params: Params, arm: str) -> list[str]:
    roles = members_of_arm(params, arm)
    return list(dict.fromkeys(roles["teachers"] + roles["students"]))


def update_part_slots(params: Params, arm: str, part: int) -> list[str]:
    """The slots update job `part` of an arm trains: every `dag.update_jobs`-th slot from the `part`-th
    (empty when the arm has fewer slots than jobs: the baseline's one adapter is job 0's)."""
    return slots_of_arm(params, arm)[part :: params.dag.update_jobs]


def benchmarked_refs(params: Params, arm: str) -> list:
    """The `populora.core.refs.ModelRef`s of an arm whose final members are benchmarked: the slots of the
    roles in `bench.roles`, each once (the baseline's solo adapter plays both roles)."""
    from populora.core.refs import arm_refs

    refs = arm_refs(arm, params.population.teachers, params.population.students)
    return list(dict.fromkeys(ref for role in params.bench.roles for ref in refs[role]))


def runs_together(params: Params, benchmark: str) -> bool:
    """Whether `benchmark` runs in the together job (one per arm and one for the base model) rather than a job of
    its own: it is in `bench.together`, and the engine is not vllm (one engine per process)."""
    return params.sampler.engine != "vllm" and benchmark in params.bench.together


def together_benchmarks(params: Params) -> list[str]:
    """The benchmarks of `bench.benchmarks` that run in the together job, in their order there."""
    return [name for name in params.bench.benchmarks if runs_together(params, name)]


def own_job_benchmarks(params: Params) -> list[str]:
    """The benchmarks of `bench.benchmarks` that run in a job of their own per arm (and for the base model)."""
    grouped = together_benchmarks(params)
    return [name for name in params.bench.benchmarks if name not in grouped]


def benchmarked_models(params: Params) -> dict[str, list]:
    """Benchmarked models (`ModelRef`s) per result folder of `results/bench`: the bare base under `base`,
    and per arm of `dag.arms` its final members of `bench.roles` (`population-student0`, ..., `baseline-solo`)."""
    from populora.core.refs import BASE_REF

    return {"base": [BASE_REF], **{arm: benchmarked_refs(params, arm) for arm in params.dag.arms}}


def merge(base: dict, overlay: dict) -> dict:
    """Overlay values onto a params mapping, section by section (lists and scalars are replaced).

    >>> merge({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}})
    {'a': {'x': 1, 'y': 3}}
    """
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return merged


def main(argv: list[str] | None = None) -> int:
    """`python -m populora.config [PARAMS]` validates; `--overlay FILE` (repeatable, applied in order)
    prints PARAMS merged with the overlays."""
    import argparse

    parser = argparse.ArgumentParser(description="Validate params.yaml, or merge overlays into it.")
    parser.add_argument("params", nargs="?", default="params.yaml")
    parser.add_argument("--overlay", action="append", default=[],
                        help="YAML overlay (e.g. params/gpu-paper.yaml), repeatable: later ones win; "
                             "the merged file goes to stdout")
    args = parser.parse_args(argv)
    try:
        if args.overlay:
            raw = yaml.safe_load(Path(args.params).read_text())
            for overlay in args.overlay:
                raw = merge(raw, yaml.safe_load(Path(overlay).read_text()) or {})
            parse_params(raw, " + ".join([args.params, *args.overlay]))
            print(yaml.safe_dump(raw, sort_keys=False), end="")
            return 0
        load_params(args.params)
    except ParamsError as error:
        print(error, file=sys.stderr)
        return 2
    print(f"{args.params}: OK", file=sys.stderr)
    return 0

if __name__ == "__main__":
    raise SystemExit(main())
