"""The sections of params.yaml that say what a run does: each key's type, default, bounds, help (its
field's description: params.yaml's comment above the key is generated from it, `python -m
workflow.render_params`) and, where the help alone does not say how to fix a wrong value, its fix
(`json_schema_extra={"fix": ...}`). `populora.config.Params` gathers them with the sections of what
measures a run (`populora.core.measure_sections`) and checks the keys that depend on each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

TaskType = Literal["code_o", "code_i", "code_f"]
TASK_TYPES: tuple[TaskType, ...] = ("code_o", "code_i", "code_f")
Arm = Literal["population", "baseline"]
ARMS: tuple[Arm, ...] = ("population", "baseline")
EMBEDDED_MODEL = "smollm2"  # populora.lm.model.EMBEDDED_MODEL (that module imports torch)
MAX_TEMPERATURE = 10.0  # above it every token is about equally likely: no use for sampling or PFSP weights
MIN_TEMPERATURE = 0.01  # vLLM samples any temperature in (0, 0.01) at 0.01, so the update would score other odds
MAX_NEW_TOKENS = 32768  # hard cap on every max_new_tokens; propose/solve (and bench on vLLM) also stay below the window

SAMPLING_TEMPERATURE_FIX = (
    f"Use 0 (greedy) or a temperature from {MIN_TEMPERATURE:g} to {MAX_TEMPERATURE:g}; "
    "1.0 samples the model's own distribution, 0.5 to 1.0 is usual."
)
MAX_NEW_TOKENS_FIX = (
    f"Give the new tokens an answer needs, at most {MAX_NEW_TOKENS}; propose and solve, and every "
    "benchmark on vLLM, also stay below update.max_seq_len, with room for the prompt."
)


class Section(BaseModel):
    """A section of params.yaml: unknown keys refused, values frozen once validated."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("arms", "types", check_fields=False)
    @classmethod
    def _each_once(cls, value: tuple) -> tuple:
        """List keys that name things (dag.arms, propose.types): each name may appear once."""
        repeated = sorted({item for item in value if value.count(item) > 1})
        if repeated:
            raise ValueError(f"{', '.join(repeated)} appears more than once; each may appear once")
        return value


class BaseSection(Section):
    """Seeds."""

    seed: int = Field(0, description="Master random seed; every stage derives its own seed from it.")


class ModelSection(Section):
    """The frozen base model: which, in what dtype, on what device."""

    base_model: str = Field(
        "smollm2",
        min_length=1,
        description="'smollm2' for the embedded SmolLM2-135M-Instruct, or any HF model id or local folder.",
        json_schema_extra={
            "fix": "Give an existing local Hugging Face model folder (a relative path is taken from "
            "the directory the pipeline runs in, the project root), a Hugging Face model id such as "
            f"Qwen/Qwen2.5-7B, or {EMBEDDED_MODEL} for the embedded SmolLM2-135M-Instruct."
        },
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description="Weights dtype of sampling and scoring. auto: bfloat16 on a CPU with avx512_bf16 or AMX "
        "(or a GPU with bf16), float32 elsewhere (populora.lm.dtype; the choice is logged and recorded). A study pins "
        "float32 or bfloat16: auto can differ between machine kinds. The update's LoRA weights and AdamW stay float32.",
    )
    device: str = Field(
        "cpu",
        description="'cpu', 'auto' (cuda when present) or 'cuda'. With 'cpu' the model "
        "stages claim no GPU and take model.cpu_threads threads each (the benchmarks one).",
    )
    cpu_threads: int = Field(
        1,
        ge=1,
        le=256,
        description="Threads of one model job of the training chain (propose, solve, update, held-out scoring) when "
        "the model runs on the CPU; the benchmarks take one each, the warm start every core. 1 lets Snakemake run "
        "two arms' chains side by side on two cores (the default run); a run of one arm (a study run) goes one job "
        "after another, so there the machine's core count keeps every core busy (its gain alone is not measured yet: "
        "docs/measurements.md has old code on 1 thread against new code on 2). The count changes the last bits of "
        "float sums, so it is a param.",
    )

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


def check_sampling_temperature(value: float) -> float:
    if 0 < value < MIN_TEMPERATURE:
        raise ValueError(
            f"a temperature between 0 and {MIN_TEMPERATURE:g} is neither greedy (0) nor one vLLM "
            f"samples at (it raises it to {MIN_TEMPERATURE:g})"
        )
    return value


class SamplerSection(Section):
    """What samples tokens (the `populora.lm.engines` sampler), not how (temperature etc.: propose and solve)."""

    engine: Literal["hf", "vllm"] = Field(
        "hf",
        description="What samples propose, solve and the CRUXEval/EvalPlus/LiveCodeBench passes: hf = the "
        "project's stacked-LoRA decode loop (the CPU default and the reference), vllm = vLLM with every adapter a "
        "LoRARequest (paged KV cache, continuous batching, prefix caching; install with scripts/setup_vllm_env.sh). "
        "Math benchmarks then use lm-eval's own vllm model.",
    )
    memory_fraction: float = Field(
        0.15,
        gt=0,
        le=1,
        description="vllm: gpu_memory_utilization, the share of the GPU's memory (of host memory "
        "on CPU, where the default 0.92 fails) vLLM reserves for weights and KV cache.",
    )
    max_loras: int | None = Field(
        None, ge=1, description="vllm: adapters resident in one batch; null = every adapter of the pass (members)."
    )
    max_num_seqs: int = Field(256, ge=1, description="vllm: sequences scheduled at once (continuous batching).")
    enforce_eager: bool = Field(True, description="vllm: skip graph capture / compilation (true on CPU and in tests).")
    request_seeds: bool = Field(
        True,
        description="vllm: give every sampled request its own seed, so a rerun on the CPU samples the same "
        "tokens. On a GPU vLLM samples seeded rows on its slower per-request-generator path, and batch composition "
        "changes the numbers anyway: false in the GPU overlays (the engine's seed only). Greedy requests never "
        "carry one.",
    )


class LoraSection(Section):
    """The LoRA adapters every member is (PEFT)."""

    rank: int = Field(8, ge=1, le=512, description="LoRA rank r, shared by every member (operators keep it).")
    alpha: float = Field(16.0, gt=0, description="LoRA alpha (scaling = alpha / rank).")
    dropout: float = Field(0.0, ge=0, lt=1, description="LoRA dropout.")
    target_modules: tuple[str, ...] = Field(
        ("q_proj", "k_proj", "v_proj", "o_proj"), min_length=1, description="Linear module names to adapt."
    )
    init_std: float = Field(
        0.0,
        ge=0,
        description="Std of the initial lora_B noise; 0 = PEFT default (B = 0, every member starts as the base).",
    )


class PopulationSection(Section):
    """The population arm's size (the baseline arm is one adapter in both roles)."""

    teachers: int = Field(
        2,
        ge=1,
        description="Teacher adapters in the population arm (they propose tasks).",
        json_schema_extra={"fix": "At least one teacher is needed; teachers propose the tasks."},
    )
    students: int = Field(
        2,
        ge=1,
        description="Student adapters in the population arm (they solve tasks).",
        json_schema_extra={"fix": "At least one student is needed; students solve the teachers' tasks."},
    )


class DagSection(Section):
    """The DAG's shape: generations, arms and update jobs."""

    generations: int = Field(
        3,
        ge=1,
        le=999,
        description="Generations per arm (zero-padded folders gen000...).",
        json_schema_extra={"fix": "Use a whole number of generations, 1 or more."},
    )
    arms: tuple[Arm, ...] = Field(
        ARMS,
        min_length=1,
        description="Which arms to run: population and/or baseline.",
        json_schema_extra={"fix": "List population and/or baseline, each once."},
    )
    update_jobs: int = Field(
        4,
        ge=1,
        le=64,
        description="Update jobs per arm and generation: job k trains the arm's adapters k, k + J, "
        "k + 2J, ... (teachers, then students); J at least the population's size gives one job per adapter, so N "
        "GPUs train N adapters at once. The results do not depend on it (byte for byte on the CPU; on a GPU up to "
        "the kernels' nondeterminism, docs/gpu.md). Rendered into dvc.yaml: re-render after "
        "a change (python -m workflow.render_dvc).",
    )
    update_side_by_side: int = Field(
        1,
        description="On the CPU: how many of an arm's update jobs run at once, each on model.cpu_threads divided by "
        "that many threads (Snakemake schedules them so; capped at the jobs that train an adapter and at "
        "model.cpu_threads). 1: each job takes model.cpu_threads, one after another. Measured on 2 cores (one 2T-2S "
        "generation, docs/measurements.md): 2 side by side on one thread each gained nothing (270.2 against 272.9 s; "
        "an update job runs 1.6-2.0x faster on two threads than on one); under an engine that runs one stage at a "
        "time (DVC) with no OMP_NUM_THREADS set, more than 1 leaves cores idle.",
        json_schema_extra={"fix": "Use a whole number of update jobs, 1 or more."},
    )

    @field_validator("update_side_by_side", mode="before")
    @classmethod
    def _whole_jobs(cls, value: object) -> object:
        # no bool, float or string as a count (pydantic's lax mode would take True or 2.0)
        if not (type(value) is int and value >= 1):
            raise ValueError("expected a whole number of jobs, 1 or more")
        return value


class BufferSection(Section):
    """The task buffer: the seed tasks and its cap."""

    seeds: Literal["builtin", "identity"] = Field(
        "builtin", description="identity: AZR's single seed program; builtin: plus a few simple hand-written seeds."
    )
    max_size: int = Field(16384, ge=1, description="Task buffer cap; past it the oldest non-seed tasks are dropped.")


class SamplingSection(Section):
    temperature: float = Field(0.7, ge=0, le=MAX_TEMPERATURE, description="Sampling temperature (0 = greedy).")
    top_p: float = Field(
        1.0,
        gt=0,
        le=1,
        description="Nucleus sampling mass.",
        json_schema_extra={"fix": "Use a nucleus mass above 0 and at most 1 (1.0 keeps every token)."},
    )
    max_new_tokens: int = Field(160, ge=1, le=MAX_NEW_TOKENS, description="Cap on generated tokens per segment.")
    batch_size: int = Field(32, ge=1, description="Rows per generate() call (rows of different adapters are mixed).")

    @field_validator("temperature")
    @classmethod
    def _greedy_or_sampled(cls, value: float) -> float:
        return check_sampling_temperature(value)


class ProposeSection(SamplingSection):
    """The teachers' proposals: task types, how many, prompts and sampling."""

    mode: Literal["scaffolded", "free_form"] = Field(
        "scaffolded",
        description="scaffolded: prefill code fences and stop at ``` (small models); free_form: AZR format.",
    )
    per_type: int = Field(2, ge=1, description="Proposals per teacher per task type per generation.")
    types: tuple[TaskType, ...] = Field(
        TASK_TYPES,
        min_length=1,
        description="Task types proposed and solved (AZR: all three; the CPU study trains "
        "code_o and code_i, what CRUXEval-O/I measure).",
    )
    references: int = Field(
        2, ge=0, description="Reference tasks from the buffer shown in each proposer prompt (AZR K)."
    )
    code_f_inputs: int = Field(
        10,
        ge=2,
        le=10,
        description="Inputs a code_f proposal must give (first half shown, rest "
        "hidden; at most 10, what the seed tasks carry).",
    )
    temperature: float = Field(
        0.6,
        ge=0,
        le=MAX_TEMPERATURE,
        description="Proposer sampling temperature (0 = greedy).",
        json_schema_extra={"fix": SAMPLING_TEMPERATURE_FIX},
    )
    max_new_tokens: int = Field(
        128,
        ge=1,
        le=MAX_NEW_TOKENS,
        description="Cap on generated tokens per proposal segment (below update.max_seq_len).",
        json_schema_extra={"fix": MAX_NEW_TOKENS_FIX},
    )
    reject_duplicates: bool = Field(
        True,
        description="A code_o/code_i proposal whose normalised program is already in the buffer is invalid "
        "(reason `duplicate`): copying a reference earns a teacher nothing.",
    )
    reject_copyable: bool = Field(
        False,
        description="A code_o/code_i task whose output equals an argument of its input (a disguised "
        "identity: a student solves it by echoing what it is shown) is invalid (reason `copyable`), and the "
        "identity seed stays out of the buffer. AZR keeps them (false).",
    )


class SolveSection(SamplingSection):
    """The students' answers: how many tasks and samples, prompts and sampling."""

    mode: Literal["scaffolded", "free_form"] = Field("scaffolded", description="Answer format, as for propose.mode.")
    tasks_per_type: int = Field(2, ge=1, description="Tasks each student attempts per task type per generation.")
    samples: int = Field(2, ge=1, description="Answers each student samples per task (solve-rate estimate).")
    worked_examples: int = Field(1, ge=0, description="Worked examples from the buffer rotated into solver prompts.")
    fill_in: Literal["newest", "uniform"] = Field(
        "newest",
        description="Buffer tasks for slots whose teacher has no valid task: newest first, or uniform "
        "over the buffer (AZR).",
    )
    temperature: float = Field(
        1.0,
        ge=0,
        le=MAX_TEMPERATURE,
        description="Solver sampling temperature (0 = greedy; "
        "1, the model's own distribution, is what the positive control and the learning study "
        "trained with).",
        json_schema_extra={"fix": SAMPLING_TEMPERATURE_FIX},
    )
    max_new_tokens: int = Field(
        96,
        ge=1,
        le=MAX_NEW_TOKENS,
        description="Cap on generated answer tokens (below update.max_seq_len).",
        json_schema_extra={"fix": MAX_NEW_TOKENS_FIX},
    )


class VerifySection(Section):
    """The sandbox that runs every proposed program and graded answer."""

    timeout_s: float = Field(
        2.0,
        gt=0,
        le=60,
        description="CPU-time limit (user + system seconds) per program execution: it decides the "
        "verdict timeout, so a busy machine does not change verdicts.",
    )
    wall_timeout_s: float | None = Field(
        None,
        gt=0,
        le=600,
        description="Wall-clock backstop per execution, for programs that sleep or block (also "
        "timeout); null = max(5 x timeout_s, timeout_s + 3 s).",
    )
    memory_mb: int = Field(512, ge=64, description="Address-space limit per execution.")
    max_output_chars: int = Field(
        2000, ge=16, description="Longer reprs are invalid (output_too_large), never truncated."
    )
    workers: int = Field(2, ge=1, description="Parallel sandbox workers.")
    # The names are populora.sandbox.LAYERS (tests/test_sandbox.py checks they agree); the default is
    # what an ordinary user gets where unprivileged user namespaces are allowed: all but uid_drop.
    required_layers: tuple[
        Literal["fs_jail", "ipc_namespace", "mount_namespace", "net_namespace", "seccomp", "uid_drop"], ...
    ] = Field(
        ("fs_jail", "ipc_namespace", "mount_namespace", "net_namespace", "seccomp"),
        description="Sandbox layers that must be on, else no model code runs (exit code 3): a list of fs_jail, "
        "ipc_namespace, mount_namespace, net_namespace, seccomp, uid_drop, or `all`; [] runs with whatever comes up, "
        "under a loud warning. The default leaves out uid_drop, which only root has.",
        json_schema_extra={
            "fix": "List sandbox layers among fs_jail, ipc_namespace, mount_namespace, net_namespace, "
            "seccomp, uid_drop, or write `all`; the default (all but uid_drop) is what an ordinary "
            "user gets where user namespaces are allowed."
        },
    )

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
            raise ValueError(
                f"wall_timeout_s ({self.wall_timeout_s:g}) is below timeout_s ({self.timeout_s:g}): "
                "the wall-clock backstop must leave a program at least its CPU time"
            )
        return self


class RewardSection(Section):
    """Rewards and advantages (docs/design.md, "Rewards"; the knobs' TRL and verl names: "The update's knobs")."""

    teacher_mode: Literal["learnability", "zero_sum"] = Field(
        "learnability", description="learnability: 1-p for 0<p<1 else 0 (AZR); zero_sum: 1-p also for p=0."
    )
    advantage_baseline: Literal["trr++", "per_task"] = Field(
        "per_task",
        description="What an answer's reward is compared with. per_task (RLOO; GRPO's group): the mean "
        "of the other answers of the same adapter to the same task, so only answers better or worse than their "
        "siblings carry signal (what the positive control and the learning study validated); trr++ (AZR): the mean "
        "of its (adapter, role, task type) group, so every answer to an easy task gets A > 0 and every answer to a "
        "hard one A < 0. Proposals (one sample each) are always whitened TRR++.",
    )
    scale_rewards: Literal["group", "batch", "none"] = Field(
        "none",
        description="What an answer's advantage is divided by (TRL's scale_rewards): group, the std of the "
        "rewards of its baseline's group (AZR's TRR++ is trr++ with group); batch, the std of its adapter's answers' "
        "rewards; none, nothing (Dr. GRPO: dividing by the std up-weights the groups whose rewards barely differ; "
        "RLOO is per_task with none).",
    )


class WarmStartSection(Section):
    """The warm start (populora/warmstart/, stages.warm_start): a supervised LoRA fine-tune of the base model on
    verified code_o/code_i tasks of the train task families (populora/tasks/families.py), in the solver's exact
    prompt and answer format, merged into the frozen base every later stage uses (results/warm_base). A departure
    from zero data: on for the embedded 135M model, which otherwise solves almost nothing a constant cannot; off
    at paper scale. The budget was chosen by the sweep of study/warm-start/ on held-out programs (transfer, not
    fit)."""

    enabled: bool = Field(
        True,
        description="Fine-tune the base before self-play; false: results/warm_base is the "
        "base itself (hard links, no training).",
    )
    examples: int = Field(
        200,
        ge=1,
        description="Training examples: verified tasks of the train split, each seen "
        "once, in the generator's order (a shorter budget is a prefix of a longer one).",
    )
    learning_rate: float = Field(
        3e-3, gt=0, description="AdamW learning rate of the LoRA weights (constant after the warm-up)."
    )
    warmup_steps: int = Field(10, ge=0, description="Optimizer steps of linear learning-rate warm-up.")
    batch_size: int = Field(16, ge=1, description="Examples per optimizer step.")
    micro_batch: int = Field(8, ge=1, description="Examples per forward/backward (gradient accumulation).")
    rank: int = Field(16, ge=1, le=512, description="LoRA rank of the warm start's adapter (merged away afterwards).")
    alpha: float = Field(32.0, gt=0, description="LoRA alpha of the warm start's adapter.")
    target_modules: tuple[str, ...] = Field(
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        min_length=1,
        description="Linear modules the warm start adapts.",
    )
    types: tuple[Literal["code_o", "code_i"], ...] = Field(
        ("code_o", "code_i"), min_length=1, description="Task types trained on."
    )
    seed: int = Field(
        0,
        description="Seed of the tasks, the worked examples and the adapter, independent of "
        "base.seed: every run of a study starts from the same warm base.",
    )
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto",
        description="Dtype of the base while the adapter trains (as model.dtype; the adapter and its AdamW "
        "moments stay float32); the merged model keeps the base's own dtype.",
    )


class UpdateSection(Section):
    """The LoRA-only REINFORCE update of each adapter (populora/rl/update.py)."""

    learning_rate: float = Field(1e-4, gt=0, description="AdamW learning rate for LoRA weights.")
    steps: int = Field(
        1,
        ge=1,
        description="Optimizer steps per adapter per generation (each over all its rollouts, or over a share of them: step_rollouts).",
    )
    micro_batch: int = Field(
        8,
        ge=1,
        description="Sequences per forward/backward (gradient accumulation). 8, the "
        "answers a student samples per task (solve.samples): with share_prompts a task's prompt is "
        "then computed once, not once per micro-batch that holds some of its answers (1.2x the "
        "update's tokens/s of 4 in bfloat16 on the CPU, docs/measurements.md).",
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Gradient clipping norm.")
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_seq_len: int = Field(1024, ge=32, description="Longer prompt+completion sequences are left-truncated.")
    max_tokens_per_micro_batch: int | None = Field(
        4096,
        ge=32,
        description="Cap on the tokens a micro-batch feeds (sequences x longest, or a shared prompt or prefix once plus "
        "sequences x longest rest under share_prompts); null = only micro_batch caps it.",
    )
    gradient_checkpointing: bool = Field(
        False, description="Recompute activations in the backward pass (less memory, ~30% slower)."
    )
    share_prompts: bool = Field(
        True,
        description="The answers of one prompt share its forward (its keys and values computed once, with "
        "gradients, in each micro-batch that holds them; micro-batches keep a prompt's answers together, "
        "micro_batch answers each): the same loss and gradients, a prompt computed once instead of once per answer. "
        "Answers whose prompts differ (each draws its own worked example) share the prefix their prompts begin with "
        "(the instruction) the same way, micro-batches grouping them by it; where a prompt's answers are few, they go "
        "in with the others if that feeds fewer tokens. Off under gradient_checkpointing (Transformers keeps no "
        "cache there).",
    )
    role_steps: Literal["joint", "per_role"] = Field(
        "joint",
        description="joint: an adapter's `steps` are over all its rollouts together; per_role: an adapter "
        "in both roles (the baseline) takes `steps` over its proposals and `steps` over its answers, as a teacher "
        "and a student each do (a role-matched baseline).",
    )
    step_rollouts: Literal["all", "split"] = Field(
        "all",
        description="all: each of the `steps` optimizer steps is over all the adapter's rollouts (epochs: every "
        "rollout trained on `steps` times); split: the rollouts are dealt out by task into `steps` disjoint shares, "
        "one optimizer step on each (minibatches: every rollout trained on once, so a pair at a population's total "
        "budget spends what the population's members do).",
    )
    shuffle_advantages: bool = Field(
        False,
        description="The null control: shuffle advantages within each TRR++ group (adapter, role, type) "
        "before the update: same data and update sizes, no learning signal.",
    )
    importance_sampling_mode: Literal["auto", "none", "token_truncate", "sequence_mask"] = Field(
        "none",
        description="Importance correction for when the sampler's scores differ from the update's (TRL's "
        "vllm_importance_sampling_mode): token_truncate weighs each trained token min(exp(update logprob - sampler "
        "logprob), cap) (TIS); sequence_mask weighs each sequence's tokens by its sequence ratio, or 0 above the cap; "
        "none: no correction, the default: with it the positive control passes in float32 and bfloat16 alike, where "
        "with the correction on bfloat16 failed (study/positive-control-warm/); auto: token_truncate when "
        "model.dtype resolves to bfloat16 or float16 (the sampler's scores differ from the float32 LoRA update's by "
        "rounding), none in float32. The vLLM overlays set token_truncate (vLLM's kernels score differently).",
    )
    importance_sampling_cap: float = Field(
        2.0,
        ge=1,
        description="The cap C of the importance correction (TRL's vllm_importance_sampling_cap, verl's "
        "rollout_is_threshold): token_truncate clips each token's ratio at C, sequence_mask drops a sequence whose "
        "ratio exceeds C.",
    )
    processes: int = Field(
        1,
        ge=1,
        le=64,
        description="Processes per update job (one GPU each): one adapter's micro-batches are split "
        "over them and their gradients summed (data parallel, through `accelerate launch`); 1 = one process.",
    )
    loss_type: Literal["sequence", "token", "constant"] = Field(
        "sequence",
        description="How the loss normalises over tokens (TRL's loss_type, verl's loss_agg_mode): "
        "sequence, the mean over rollouts of A x the answer's mean token log-prob (every answer weighs the same; "
        "GRPO); token, every trained token of the batch weighs the same (DAPO); constant, each token weighs A / "
        "(rollouts x update.max_seq_len) whatever its answer's length or the batch's (Dr. GRPO).",
    )
    normalize: Literal["signal", "batch"] = Field(
        "signal",
        description="Over how many rollouts the loss averages: signal, the rollouts with a nonzero advantage (the "
        "others carry no gradient and are left out, so a step on 8 such rollouts moves as far as one on 96); "
        "batch, every rollout of the adapter's batch (GRPO's mean over the group's completions, zeros included), "
        "so a step shrinks with the share of rollouts that carry signal (with loss_type token, the weights are scaled by "
        "that share, not recounted over the tokens of the rollouts left out). Per role under role_steps per_role.",
    )
    diagnostics: bool = Field(
        True,
        description="After each optimizer step, score the step's tokens again to report how the log-prob of "
        "answers with A > 0 and A < 0 moved (one extra forward pass per step, no backward).",
    )
    mixed_precision: Literal["bf16"] | None = Field(
        None,
        description="Accelerate's autocast for the update's forward pass: bf16 runs the LoRA and head matmuls "
        "in bfloat16 on a GPU; LoRA weights and optimizer moments stay float32. null: the model's own dtypes.",
    )


class RatingsSection(Section):
    """TrueSkill ratings of the members, from the students' attempts on their teachers' tasks."""

    mu: float = Field(25.0, description="TrueSkill initial mu.")
    sigma: float = Field(25.0 / 3, gt=0, description="TrueSkill initial sigma.")
    beta: float = Field(25.0 / 6, gt=0, description="TrueSkill beta (skill-difference scale).")
    tau: float = Field(25.0 / 300, ge=0, description="TrueSkill dynamics factor.")


class PairingSection(Section):
    """Which teacher's tasks each student solves."""

    strategy: Literal["pfsp", "round_robin", "pairs"] = Field(
        "pfsp",
        description="pfsp: favour near-balanced matchups; pairs: teacher k with student k only, each pair "
        "reading only its own tasks (the ensemble control: independent 1T-1S pairs).",
    )
    temperature: float = Field(
        1.0,
        gt=0,
        le=MAX_TEMPERATURE,
        description="PFSP weighting temperature.",
        json_schema_extra={
            "fix": f"Use a PFSP temperature above 0 and at most "
            f"{MAX_TEMPERATURE:g}: weights are f(p) ** (1 / temperature), so 1 "
            "keeps f, lower sharpens it, higher flattens it toward uniform."
        },
    )


# Names of populora.population.operators.MUTATIONS and CROSSOVERS (kept here so validating params does not
# import torch; tests/test_config.py checks the two lists agree).
KNOWN_OPERATORS = (
    "svd_scale_rotate",
    "gaussian_subset",
    "mask_components",
    "gaussian_all",
    "neftune",
    "layerwise",
    "svd_split",
    "dare",
    "extrapolate",
    "fitness_weighted",
)


class EvolveSection(Section):
    """Evolution: which members are replaced, how often, by which operators' children."""

    interval: int = Field(
        2, ge=1, description="Evolve after every `interval` generations (0-based gen g when (g+1) % interval == 0)."
    )
    replace: int = Field(
        1,
        ge=0,
        description="Members replaced per sub-population per evolution event (a sub-population of one is "
        "never replaced).",
    )
    fitness: Literal["auto", "trueskill", "reward"] = Field(
        "auto",
        description="What ranks members for replacement: auto = teachers by mean reward under the "
        "learnability reward, everything else by conservative TrueSkill; or one rule for both roles.",
    )
    operators: dict[str, float] = Field(
        default_factory=lambda: {"svd_scale_rotate": 1.0, "gaussian_subset": 1.0, "layerwise": 1.0, "svd_split": 1.0},
        description="Operator name -> weight in the mix (the probability of each, once normalised; table: docs/design.md).",
    )
    parents: Literal["population", "survivors"] = Field(
        "population",
        description="Where a crossover's second parent comes from: population = any other member, the one "
        "replaced included (a sub-population of two can cross); survivors = the strongest survivors only (a pool of one "
        "falls back to a mutation).",
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
