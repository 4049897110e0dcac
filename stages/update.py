"""Stage update: one update job of an arm and generation: LoRA-only REINFORCE of each of its adapters on its own rollouts.

    python -m stages.update --params params.yaml --arm population --gen 0 --part 0 --base-model results/base_model \
        --state results/population/init --rollouts results/population/gen000/rollouts.jsonl \
        --trained results/population/gen000/update/0

Job `--part k` of the `dag.update_jobs` (J) jobs of an arm and generation trains the arm's adapters
k, k+J, k+2J, ... (teachers, then students; `populora.core.topology.update_part_slots`): one adapter per
job when J is at least the arm's size, so N GPUs train N adapters at once. It writes, per adapter,
adapters/<slot>/, optimizer/<slot>.safetensors and its entry of update_stats.json;
`stages.update_gather` links the parts into the generation's trained/ folder. A job left without an
adapter (the baseline has one) writes an empty part at once, before torch is imported or a GPU
claimed. The base model's weights are frozen; each adapter is trained on its own forward passes
(PEFT refuses mixed-adapter batches in training mode).

The results do not depend on J: each adapter's training starts from its own seed
(`derive_seed(seed, "update", arm, gen, slot)`), and with LoRA dropout 0 (the default) the update
draws no random number at all; tests/test_update_jobs.py checks that one job training every
adapter and one job per adapter write the same bytes.

What Accelerate does here, and nothing more: it picks the device (`Accelerator.device`); with
`update.mixed_precision: bf16` it runs the forward pass under bf16 autocast (LoRA weights and
optimizer moments stay float32); with `update.processes: N > 1` this stage re-launches itself through
`accelerate launch` with N processes (one GPU each, claimed together): every process scores every
N-th micro-batch of the adapter's rollouts and the gradients are summed across the processes before
clipping and the optimizer step (`populora.selfplay.update.reinforce_steps`), so all hold the same weights and
the first writes them (tests/test_update_jobs.py runs 2 CPU processes).

`model.dtype` (auto: bfloat16 on a CPU with avx512_bf16 or AMX, `populora.lm.dtype`) is the frozen
base's dtype; the adapter's weights and AdamW moments stay float32. In bfloat16 the sampler's scores
differ from the update's by rounding, so the truncated importance correction is on
(`BF16_IMPORTANCE_CAP` unless `update.importance_cap` sets one); each adapter's statistics record the
dtype, why it was chosen and the CPU's flags (`runtime`).
"""

from __future__ import annotations

import os
import socket
import sys
from collections import defaultdict
from pathlib import Path

from populora.core.io import replace_dir, staging_dir, write_json
from populora.core.rows import Rollout, read_rows
from populora.core.seeds import derive_seed
from populora.core.state import ADAPTERS, OPTIMIZER, UPDATE_STATS, adapter_dirs
from populora.core.topology import update_part_slots
from populora.lm.gpus import claim_gpu, keep_gpu_claims_across_exec
from stages._common import require_device, setup, stage_parser, timed

# `model.dtype` bfloat16 with `update.importance_cap: null`: the cap the update uses (a token's weight at most
# doubled), so the sampler's bf16 rounding is corrected for (issue 48)
BF16_IMPORTANCE_CAP = 2.0

LAUNCHED = "LOCAL_RANK"  # set by torchrun / accelerate launch in each process it starts


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def relaunch(argv: list[str], processes: int, mixed_precision: str) -> None:
    """Replace this process by `accelerate launch` running this stage in `processes` processes
    (same arguments; a free port each time, so concurrent jobs on one node do not collide)."""
    command = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", str(processes),
               "--num_machines", "1", "--mixed_precision", mixed_precision, "--dynamo_backend", "no",
               "--main_process_port", str(_free_port()), "-m", "stages.update", *argv]
    keep_gpu_claims_across_exec()  # the device locks live on in the launcher
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = stage_parser(__doc__.splitlines()[0])
    parser.add_argument("--part", required=True, type=int, help="which of the dag.update_jobs jobs this is (0-based)")
    for flag in ("--base-model", "--state", "--rollouts", "--trained"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    if rank:
        args.log = None  # the first process writes the log file; the others log to stderr
    params, log = setup(args, "update", claim=False)
    if not 0 <= args.part < params.dag.update_jobs:
        log.error("--part %d is not one of the dag.update_jobs = %d jobs (0 to %d). Fix: re-render dvc.yaml "
                  "(python -m workflow.render_dvc) after changing dag.update_jobs", args.part, params.dag.update_jobs,
                  params.dag.update_jobs - 1)
        return 2
    slots = update_part_slots(params, args.arm, args.part)
    if not slots:
        tmp = staging_dir(args.trained)
        write_json(tmp / UPDATE_STATS, {})
        replace_dir(tmp, args.trained)
        log.info("update job %d of %d: %s has no adapter for it; empty part written", args.part,
                 params.dag.update_jobs, args.arm)
        return 0
    processes = params.update.processes
    if processes > 1 and LAUNCHED not in os.environ:
        if args.claim_gpu:
            claim_gpu(log, count=processes)  # the N devices of this job, before the processes start
            require_device(params, log, "update")
        log.info("launching %d processes for %s", processes, ", ".join(slots))
        relaunch(argv, processes, params.update.mixed_precision or "no")
    if args.claim_gpu:
        claim_gpu(log)
        require_device(params, log, "update")  # model.device: cuda with no CUDA here stops before the base loads
    return train(args, params, log, slots)


def update_config(update, dtype: str):
    """The `update` section as the update runs it: with a base in bfloat16 (or float16) and no cap set,
    the truncated importance correction on (`BF16_IMPORTANCE_CAP`): the sampler's scores (stacked LoRA
    in the base's dtype) and the update's (PEFT's LoRA in float32) differ by rounding."""
    if dtype != "float32" and update.importance_cap is None:
        return update.model_copy(update={"importance_cap": BF16_IMPORTANCE_CAP})
    return update


def train(args, params, log, slots: list[str]) -> int:
    from accelerate import Accelerator

    from populora.lm.adapters import save_trained_adapter
    from populora.lm.dtype import runtime_record
    from populora.lm.model import attach_adapters, load_base
    from populora.selfplay.advantages import shuffle_within_groups
    from populora.selfplay.update import reinforce_steps

    rollouts = read_rows(args.rollouts, Rollout)
    if params.update.shuffle_advantages:  # the null control: same data, advantages shuffled within groups
        rollouts = shuffle_within_groups(rollouts, derive_seed(params.base.seed, "null", args.arm, args.gen))
        log.info("null control: advantages shuffled within each TRR++ group")
    by_adapter: dict[str, list[dict]] = defaultdict(list)
    for rollout in rollouts:
        by_adapter[rollout["adapter"]].append(rollout)

    accelerator = Accelerator(cpu=params.model.device == "cpu", mixed_precision=params.update.mixed_precision or "no")
    import torch

    main_process = accelerator.is_main_process
    log.info("update job %d of %d: %s on %s (%d process%s, mixed precision %s)", args.part, params.dag.update_jobs,
             ", ".join(slots), accelerator.device, accelerator.num_processes,
             "" if accelerator.num_processes == 1 else "es", params.update.mixed_precision or "none")
    runtime = runtime_record(params.model.dtype, str(accelerator.device.type))
    config = update_config(params.update, runtime["dtype"])
    if config.importance_cap != params.update.importance_cap:
        log.info("model dtype %s: truncated importance correction on (cap %s)", runtime["dtype"], config.importance_cap)
    tokenizer, model = load_base(args.base_model, dtype=runtime["dtype"], device=str(accelerator.device))
    tokenizer.padding_side = "right"
    model = attach_adapters(model, {s: str(p) for s, p in adapter_dirs(args.state, slots).items()}, trainable=slots[0])
    tmp = staging_dir(args.trained) if main_process else None
    stats = {}
    for slot in slots:
        # each adapter its own seed: which adapters share a job cannot change what any of them learns
        torch.manual_seed(derive_seed(params.base.seed, "update", args.arm, args.gen, slot))
        with timed(log, f"update {slot} on {len(by_adapter[slot])} rollouts"):
            stats[slot] = reinforce_steps(
                accelerator, model, tokenizer, slot, by_adapter[slot], config,
                optimizer_file=Path(args.state) / OPTIMIZER / f"{slot}.safetensors",
                optimizer_out=tmp / OPTIMIZER / f"{slot}.safetensors" if main_process else None,
            )
        stats[slot]["advantages_shuffled"] = params.update.shuffle_advantages
        stats[slot]["runtime"] = {**runtime, "importance_cap": config.importance_cap}
        if main_process:
            save_trained_adapter(model, slot, tmp / ADAPTERS / slot)
        log.info("%s: %s", slot, {k: v for k, v in stats[slot].items() if k != "losses"})
    if main_process:
        write_json(tmp / UPDATE_STATS, stats)
        replace_dir(tmp, args.trained)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # the process group, when there is one
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
