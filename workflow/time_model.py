"""How long each job of a GPU run takes, from params: the SLURM `runtime` the Snakefile gives every
cluster job, and the arithmetic behind docs/gpu.md ("A GPU in ten minutes", "The paper overlay's time
model").

    python -m workflow.time_model params.yaml --overlay params/gpu-paper.yaml   # every job, and one GPU's total

A job's estimate = its cold start (the process and its imports; the weights read to the GPU; per vLLM
engine its start-up and, with `sampler.enforce_eager: false`, torch.compile and CUDA-graph capture)
+ its work: prefill and decode (every row to its token cap, so an upper bound), sandboxed runs
(verify and grade: every run to `verify.timeout_s`, an upper bound; the benchmarks' grading: a typical
cost per answer) or the update's FLOPs. A job's SLURM runtime is MARGIN x the estimate + SLACK_MIN
minutes. Nothing here is measured: the rates are the ASSUMED constants below, for one H100 80 GB;
replace one with a measurement (perf/measured/) and every figure follows. With
`model.device: cpu` there is no estimate: the profile's default runtime applies.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

# ---- ASSUMED rates: one H100 80 GB SXM (not measured: no GPU was lent to the builds of this project) ----
GPU_BYTES = 80e9  # the card's memory (of which sampler.memory_fraction goes to vLLM)
HBM_BYTES_S = 2.0e12  # decode reads the weights and the batch's KV cache every step: 60% of 3.35 TB/s
FLOP_S = 4.0e14  # prefill and the update: bf16 FLOP/s, 40% of the 989 TFLOP/s dense peak
LORA_SLOWDOWN = 1.3  # a decode step with LoRA slots over the base model's
OVERHEAD = (0.65, 2e9)  # vLLM's memory beside weights and KV cache (activations, LoRA slots, CUDA graphs):
# bytes per parameter (~5 GB at 7B), at least 2 GB
READ_BYTES_S = 1.0e9  # weights from disk (a shared file system) to the device
HUB_BYTES_S = 1.0e8  # base_model: the download from the hub
PROCESS_S = 15  # a stage process: Python, torch, transformers and the project imported
LOCAL_S = 10  # a local rule (pair, reward, evolve, checkpoint, ...): no model, light imports
VLLM_IMPORT_S = 10  # + vLLM's imports, in a process that starts an engine
ENGINE_S = 10  # a vLLM engine: memory profiling, KV cache allocation, LoRA slots
GRAPHS_S = 45  # torch.compile + CUDA-graph capture (enforce_eager: false), compile cache cold
GRAPHS_CACHED_S = 10  # the same with vLLM's compile cache warm (a later engine of the same model, same node)
GRADE_S = {"code": 2.0, "cruxeval": 0.5, "livecodebench": 20.0, "math": 0.0}  # CPU s per answer, typical
PROMPT = {"propose": 500, "per_reference": 250, "solve": 800, "per_example": 400, "bench": 1000}  # tokens
SCAFFOLD_STEPS = 3  # scaffolded plans: generated segments per row (free_form: 1)
MARGIN, SLACK_MIN = 1.5, 10
POOL_ACCEPTED = 0.25  # share of a heldout_pool round's proposals that enter the pool (8 of 32 on the CPU)


# ---- model shapes: parameters, layers, KV heads, head size (the hub's config.json of each) ----
@dataclass(frozen=True)
class Shape:
    params: float
    layers: int
    kv_heads: int
    head_dim: int


SHAPES = {
    "qwen/qwen2.5-7b": Shape(7.62e9, 28, 4, 128),
    "qwen/qwen2.5-0.5b": Shape(0.494e9, 24, 2, 64),
    "smollm2": Shape(0.135e9, 30, 3, 64),
}
# problems per benchmark: the records of ../shared/benchmarks' files; LiveCodeBench release_v5: 880
SIZES = {
    "humaneval_plus": 164,
    "mbpp_plus": 378,
    "gsm8k": 1319,
    "math500": 500,
    "minerva_math": 272,
    "olympiadbench": 675,
    "aime24": 30,
    "aime25": 30,
    "amc23": 40,
    "cruxeval_o": 800,
    "cruxeval_i": 800,
    "livecodebench": 880,
}
KIND = {
    "humaneval_plus": "code",
    "mbpp_plus": "code",
    "cruxeval_o": "cruxeval",
    "cruxeval_i": "cruxeval",
    "livecodebench": "livecodebench",
}  # the others: math (lm-eval)


def shape_of(base_model: str) -> Shape:
    """The shape of a known base (an -Instruct variant shares its base's), a local folder's config.json,
    else Qwen2.5-7B's (the largest the project runs: an upper bound)."""
    key = base_model.lower().removesuffix("-instruct")
    if key in SHAPES:
        return SHAPES[key]
    config = Path(base_model) / "config.json"
    if config.is_file():
        c = json.loads(config.read_text())
        hidden, heads, inter = c["hidden_size"], c["num_attention_heads"], c["intermediate_size"]
        head_dim = c.get("head_dim") or hidden // heads
        kv = c.get("num_key_value_heads", heads)
        per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter
        embed = c["vocab_size"] * hidden * (1 if c.get("tie_word_embeddings") else 2)
        return Shape(c["num_hidden_layers"] * per_layer + embed, c["num_hidden_layers"], kv, head_dim)
    return SHAPES["qwen/qwen2.5-7b"]


class Model:
    """Bytes and rates of `params.model` on the assumed GPU."""

    def __init__(self, params):
        self.p, self.shape = params, shape_of(params.model.base_model)
        self.bytes_per = 4 if params.model.dtype == "float32" else 2
        self.weights = self.shape.params * self.bytes_per
        self.kv = 2 * self.shape.layers * self.shape.kv_heads * self.shape.head_dim * self.bytes_per  # per token

    def start_s(self, engines: int = 1, cached: bool = False) -> float:
        """A process with `engines` model loads (vLLM engines with the vllm sampler)."""
        one = self.weights / READ_BYTES_S
        if self.p.sampler.engine != "vllm":
            return PROCESS_S + engines * one
        one += ENGINE_S + (0 if self.p.sampler.enforce_eager else GRAPHS_CACHED_S if cached else GRAPHS_S)
        return PROCESS_S + VLLM_IMPORT_S + engines * one

    def in_flight(self, context: int, batch_size: int) -> int:
        """Rows decoded at once: vLLM's KV cache (memory_fraction) over `max_num_seqs`; hf's batch."""
        if self.p.sampler.engine != "vllm":
            return batch_size
        kv_bytes = (
            self.p.sampler.memory_fraction * GPU_BYTES
            - self.weights
            - max(OVERHEAD[0] * self.shape.params, OVERHEAD[1])
        )
        return max(1, min(self.p.sampler.max_num_seqs, int(kv_bytes // (context * self.kv))))

    def generate_s(self, rows: int, prompt: int, new: int, batch_size: int, adapters: bool = True) -> float:
        """Prefill + decode of `rows` rows, each to its cap (the window: update.max_seq_len with vLLM)."""
        if self.p.sampler.engine == "vllm":
            new = max(0, min(new, self.p.update.max_seq_len - prompt))
        prefill = rows * prompt * 2 * self.shape.params / FLOP_S
        wave, decode, left = self.in_flight(prompt + new, batch_size), 0.0, rows
        while left > 0:
            batch = min(wave, left)
            step = (self.weights + batch * (prompt + new / 2) * self.kv) / HBM_BYTES_S
            decode += new * step * (LORA_SLOWDOWN if adapters else 1)
            left -= batch
        return prefill + decode

    def train_s(self, tokens: float) -> float:
        flop_per_token = (6 if self.p.update.gradient_checkpointing else 4) * self.shape.params
        return tokens * flop_per_token / FLOP_S


def _roles(params, arm: str) -> dict[str, list[str]]:
    from populora.core.topology import members_of_arm

    return members_of_arm(params, arm)


def _plan(cfg, prompt: int) -> tuple[int, int]:
    """(prompt tokens, generated tokens per row) of a propose/solve section."""
    return prompt, cfg.max_new_tokens * (1 if cfg.mode == "free_form" else SCAFFOLD_STEPS)


@dataclass(frozen=True)
class _Work:
    """The rows a generation of an arm makes: prompt and generated tokens per propose and solve row, and,
    for a job of an arm, its roles and the proposals and answers of one generation (None without an arm)."""

    p_prompt: int
    p_new: int
    s_prompt: int
    s_new: int
    roles: dict[str, list[str]] | None = None
    proposals: int | None = None
    answers: int | None = None


def _work_of(params, arm: str | None) -> _Work:
    prop, solve = params.propose, params.solve
    p_prompt, p_new = _plan(prop, PROMPT["propose"] + PROMPT["per_reference"] * prop.references)
    s_prompt, s_new = _plan(solve, PROMPT["solve"] + PROMPT["per_example"] * solve.worked_examples)
    if not arm:
        return _Work(p_prompt, p_new, s_prompt, s_new)
    roles = _roles(params, arm)
    proposals = len(roles["teachers"]) * prop.per_type * len(prop.types)
    answers = len(roles["students"]) * solve.tasks_per_type * len(prop.types) * solve.samples
    return _Work(p_prompt, p_new, s_prompt, s_new, roles, proposals, answers)


def job_seconds(stage: str, params, item: dict) -> float | None:
    """Estimated seconds of one job of `stage` (item: its wildcards, as `workflow.dag.scope_items`);
    None on the CPU or for a stage with no model and no sandbox."""
    if params.model.device == "cpu":
        return None
    m, arm = Model(params), item.get("arm")
    work = _work_of(params, arm)
    if stage in ("base_model", "init", "warm_start"):
        return _setup_seconds(stage, params, m)
    if stage in ("propose", "solve", "verify", "grade"):
        return _self_play_seconds(stage, params, m, work)
    if stage == "update":
        return _update_seconds(params, m, work, arm, int(item["part"]))
    if stage in ("bench", "bench_base"):
        return bench_seconds(params, m, item["bench"], arm)
    if stage in ("bench_together", "bench_base_together"):  # the group in one process, the model loaded once
        from populora.core.topology import together_benchmarks

        grouped = together_benchmarks(params)
        return (
            m.start_s() + sum(bench_seconds(params, m, b, arm) - m.start_s() for b in grouped) if grouped else PROCESS_S
        )
    if stage in ("heldout_pool", "heldout"):
        return _heldout_seconds(stage, params, m, work)
    if stage == "update_gather":
        return PROCESS_S
    return None


def _setup_seconds(stage: str, params, m: Model) -> float:
    """The jobs before the first generation: the base model's download, an arm's initial adapters and
    the warm start."""
    if stage == "base_model":
        return PROCESS_S + m.weights / HUB_BYTES_S + 2 * m.weights / READ_BYTES_S
    if stage == "init":
        return PROCESS_S + m.weights / READ_BYTES_S
    # warm_start: verify the tasks, fine-tune, then read the base again and write the merged model
    ws = params.warm_start
    if not ws.enabled:
        return PROCESS_S
    tokens = ws.examples * (PROMPT["solve"] + PROMPT["per_example"] * params.solve.worked_examples)
    return (
        PROCESS_S
        + 3 * m.weights / READ_BYTES_S
        + m.train_s(tokens)
        + ws.examples * 2 * params.verify.timeout_s / params.verify.workers
    )


def _self_play_seconds(stage: str, params, m: Model, work: _Work) -> float:
    """A generation's sampling (propose, solve) and sandboxed runs (verify, grade) of one arm."""
    if stage == "propose":
        return m.start_s() + m.generate_s(work.proposals, work.p_prompt, work.p_new, params.propose.batch_size)
    if stage == "solve":
        return m.start_s() + m.generate_s(work.answers, work.s_prompt, work.s_new, params.solve.batch_size)
    if stage == "verify":  # two processes per proposal (determinism), each to its CPU limit at worst
        return PROCESS_S + work.proposals * 2 * params.verify.timeout_s / params.verify.workers
    return PROCESS_S + work.answers * params.verify.timeout_s / params.verify.workers  # grade


def _update_seconds(params, m: Model, work: _Work, arm: str | None, part: int) -> float:
    """One part of a generation's update: the tokens of its slots' rows (a teacher's proposals, a
    student's answers), each row cut to the training window."""
    from populora.core.topology import update_part_slots

    prop, solve = params.propose, params.solve
    slots = update_part_slots(params, arm, part)
    window = params.update.max_seq_len
    tokens = sum(
        prop.per_type * len(prop.types) * min(work.p_prompt + work.p_new, window) * (s in work.roles["teachers"])
        + solve.tasks_per_type
        * len(prop.types)
        * solve.samples
        * min(work.s_prompt + work.s_new, window)
        * (s in work.roles["students"])
        for s in slots
    )
    return PROCESS_S + m.weights / READ_BYTES_S + m.train_s(tokens)


def _heldout_seconds(stage: str, params, m: Model, work: _Work) -> float:
    """The held-out pool of code tasks (heldout_pool, built once) and an arm's answers to it (heldout,
    every generation); with no pool (no code types, or heldout.per_type 0) the stage writes empty files."""
    prop, solve, verify = params.propose, params.solve, params.verify
    pool = params.heldout.per_type * len([t for t in prop.types if t in ("code_o", "code_i")])
    if not pool:
        return PROCESS_S
    if stage == "heldout_pool":  # rounds of one proposal batch, about a quarter of them valid
        rounds = min(params.heldout.max_rounds, math.ceil(pool / (POOL_ACCEPTED * prop.batch_size)))
        return (
            m.start_s()
            + rounds
            * (
                m.generate_s(prop.batch_size, work.p_prompt, work.p_new, prop.batch_size, adapters=False)
                + prop.batch_size * 2 * verify.timeout_s / verify.workers
            )
            + m.generate_s(pool, work.s_prompt, work.s_new, solve.batch_size, adapters=False)
            + pool * verify.timeout_s / verify.workers
        )
    # heldout: every member of heldout.roles answers the pool, greedy
    members = len({member for role in params.heldout.roles for member in work.roles[role]})
    return (
        m.start_s()
        + m.generate_s(members * pool, work.s_prompt, work.s_new, solve.batch_size)
        + members * pool * verify.timeout_s / verify.workers
    )


def bench_models(params, arm: str | None) -> int:
    from populora.core.topology import benchmarked_refs

    return 1 if arm is None else len(benchmarked_refs(params, arm))


def bench_seconds(params, m: Model, bench: str, arm: str | None) -> float:
    """One benchmark for the base (`arm` None) or an arm's members: with vLLM one engine per model (math:
    lm-eval's, each in its own process, and a retry resumes; the other families now serve every model
    from one engine, so for them this counts engine starts and model-by-model decoding they no longer
    pay: an upper bound, the safe side for a SLURM runtime), with hf one model stacking every member;
    then the grading."""
    b, models = params.bench, bench_models(params, arm)
    kind = KIND.get(bench, "math")
    n = min(SIZES[bench], b.limit_of(bench) or SIZES[bench])
    new = b.cruxeval.max_new_tokens if kind == "cruxeval" else b.max_new_tokens
    vllm = params.sampler.engine == "vllm"
    # vLLM: an engine per model (math: each in a process of its own); hf: one load stacking every member
    starts = (
        m.start_s(models) + ((PROCESS_S + VLLM_IMPORT_S) * models if kind == "math" else 0) if vllm else m.start_s()
    )
    generate = (
        models * m.generate_s(n, PROMPT["bench"], new, b.batch_size, adapters=arm is not None)
        if vllm
        else m.generate_s(models * n, PROMPT["bench"], new, b.batch_size, adapters=arm is not None)
    )
    return starts + generate + models * n * GRADE_S[kind] / params.verify.workers


def runtime_minutes(stage: str, params, item: dict) -> int | None:
    """The SLURM runtime of one job: MARGIN x the estimate + SLACK_MIN, in whole minutes (None: no estimate)."""
    seconds = job_seconds(stage, params, item)
    return None if seconds is None else math.ceil(MARGIN * seconds / 60 + SLACK_MIN)


def one_gpu_seconds(params) -> tuple[float, float, list[tuple[str, str, float]]]:
    """A run on one GPU (`--resources gpu=1`): (the GPU jobs' sum, which gpu=1 runs one at a time: a
    lower bound; every job's sum, local rules at LOCAL_S each: an upper bound, where CPU jobs would not
    overlap the GPU ones; the jobs). vLLM's compile cache is warm after the first engine of the run."""
    from workflow.dag import STAGES, scope_items, stage_named

    jobs, first = [], True
    for stage in STAGES:
        for key, item in scope_items(stage.scope, params).items():
            seconds = job_seconds(stage.name, params, item)
            if seconds is None:
                seconds = LOCAL_S
            elif stage.gpu and params.sampler.engine == "vllm" and not params.sampler.enforce_eager:
                pooled = params.heldout.per_type > 0 and {"code_o", "code_i"} & set(params.propose.types)
                engines = (
                    1
                    if stage.name in ("propose", "solve")
                    else 0
                    if stage.name in ("update", "warm_start")
                    else int(bool(pooled))
                    if stage.name in ("heldout_pool", "heldout")
                    else bench_models(params, item.get("arm"))
                )
                seconds -= (GRAPHS_S - GRAPHS_CACHED_S) * (engines - (1 if first and engines else 0))
                first = first and not engines
            jobs.append((stage.name, key, seconds))
    gpu = sum(s for name, _, s in jobs if stage_named(name).gpus(params))
    return gpu, sum(s for _, _, s in jobs), jobs


def main(argv: list[str] | None = None) -> int:
    import argparse

    import yaml

    from populora.config import merge, parse_params

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("params", nargs="?", default="params.yaml")
    parser.add_argument("--overlay", action="append", default=[], help="params overlay(s), applied in order")
    args = parser.parse_args(argv)
    raw = yaml.safe_load(Path(args.params).read_text())
    for overlay in args.overlay:
        raw = merge(raw, yaml.safe_load(Path(overlay).read_text()))
    params = parse_params(raw, " + ".join([args.params, *args.overlay]))
    if params.model.device == "cpu":
        print("model.device: cpu: no estimate (the profile's default runtime applies)")
        return 0
    from workflow.dag import scope_items, stage_named

    gpu, total, jobs = one_gpu_seconds(params)
    rows: dict[tuple, list] = {}  # jobs alike but for their generation: one line
    for name, key, seconds in jobs:
        stage = stage_named(name)
        item = scope_items(stage.scope, params)[key]
        minutes = None if stage.local else runtime_minutes(name, params, item)
        label = " ".join([name, *(item[w] for w in stage.wildcards if w != "gen")])
        rows.setdefault((label, round(seconds), minutes), []).append(seconds)
    print(f"{'job (x count)':<44} {'each, min':>10} {'all, min':>9} {'SLURM runtime':>14}")
    for (label, _, minutes), times in rows.items():
        runtime = "local" if minutes is None else f"{minutes} min"
        print(f"{label + f' (x{len(times)})':<44} {times[0] / 60:>10.1f} {sum(times) / 60:>9.1f} {runtime:>14}")
    print(
        f"one GPU (compile cache warm after the first engine): the GPU jobs {gpu / 60:.1f} min, "
        f"every job in turn {total / 60:.1f} min"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
