"""One update job (`stages.update`): the frozen base loaded once, then each of the job's adapters
trained on its own rollouts, one after another (`populora.rl.update.reinforce_steps`), its
adapter, optimizer moments and entry of update_stats.json written to the job's folder.

The results do not depend on how adapters are shared out among jobs (`dag.update_jobs`): each
adapter's training starts from its own seed (`derive_seed(seed, "update", arm, gen, slot)`), and with
LoRA dropout 0 (the default) the update draws no random number at all; tests/test_update_jobs.py
checks that one job training every adapter and one job per adapter write the same bytes.

Accelerate picks the device (`Accelerator.device`); with `update.mixed_precision: bf16` it runs the
forward pass under bf16 autocast (LoRA weights and optimizer moments stay float32); under `accelerate
launch` (`update.processes` > 1) every process scores every N-th micro-batch and the first writes.
`model.dtype` (auto: bfloat16 on a CPU with avx512_bf16 or AMX, `populora.lm.dtype`) is the frozen
base's dtype; in bfloat16 `update.importance_sampling_mode: auto` turns the truncated importance
correction on (`populora.rl.update.importance_mode`). Each adapter's statistics record the
dtype, why it was chosen, the CPU's flags and the correction applied (`runtime`).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from pathlib import Path

from populora.core.io import replace_dir, staging_dir, write_json
from populora.core.rows import Rollout, read_rows
from populora.core.seeds import derive_seed
from populora.core.state import ADAPTERS, OPTIMIZER, UPDATE_STATS, adapter_dirs


def train_job(
    params,
    *,
    arm: str,
    gen: int,
    part: int,
    slots: list[str],
    base_model: str,
    state: str,
    rollouts_file: str,
    trained: str,
    log: logging.Logger,
) -> None:
    """Train `slots` of `arm` at generation `gen` (update job `part`) from the checkpoint `state` on the
    rollouts of `rollouts_file`; the first process writes adapters/, optimizer/ and update_stats.json
    into `trained`, replaced whole."""
    import torch

    from populora.lm.model import attach_adapters, load_base

    by_adapter = _rollouts_by_adapter(params, arm, gen, rollouts_file, log)
    accelerator = _accelerator(params, part, slots, log)
    runtime = _runtime(params, str(accelerator.device.type), log)
    tokenizer, model = load_base(base_model, dtype=runtime["dtype"], device=str(accelerator.device))
    tokenizer.padding_side = "right"
    model = attach_adapters(model, {s: str(p) for s, p in adapter_dirs(state, slots).items()}, trainable=slots[0])
    tmp = staging_dir(trained) if accelerator.is_main_process else None  # set on the main process only
    stats = {}
    for slot in slots:
        # each adapter its own seed: which adapters share a job cannot change what any of them learns
        torch.manual_seed(derive_seed(params.base.seed, "update", arm, gen, slot))
        stats[slot] = _train_adapter(
            accelerator,
            model,
            tokenizer,
            slot,
            by_adapter[slot],
            params.update,
            state=state,
            tmp=tmp,
            runtime=runtime,
            log=log,
        )
    if tmp is not None:
        write_json(tmp / UPDATE_STATS, stats)
        replace_dir(tmp, trained)
    accelerator.wait_for_everyone()
    accelerator.end_training()  # the process group, when there is one


def _rollouts_by_adapter(
    params, arm: str, gen: int, rollouts_file: str, log: logging.Logger
) -> defaultdict[str, list[dict]]:
    """The generation's rollouts grouped by the adapter that sampled them (an empty list for one that sampled none)."""
    from populora.rl.advantages import shuffle_within_groups

    rollouts = read_rows(rollouts_file, Rollout)
    if params.update.shuffle_advantages:  # the null control: same data, advantages shuffled within groups
        rollouts = shuffle_within_groups(rollouts, derive_seed(params.base.seed, "null", arm, gen))
        log.info("null control: advantages shuffled within each TRR++ group")
    by_adapter: defaultdict[str, list[dict]] = defaultdict(list)
    for rollout in rollouts:
        by_adapter[rollout["adapter"]].append(rollout)
    return by_adapter


def _accelerator(params, part: int, slots: list[str], log: logging.Logger):
    """The job's `Accelerator` (its device, processes and mixed precision), logged with the slots it trains."""
    from accelerate import Accelerator

    config = params.update
    accelerator = Accelerator(cpu=params.model.device == "cpu", mixed_precision=config.mixed_precision or "no")
    log.info(
        "update job %d of %d: %s on %s (%d process%s, mixed precision %s)",
        part,
        params.dag.update_jobs,
        ", ".join(slots),
        accelerator.device,
        accelerator.num_processes,
        "" if accelerator.num_processes == 1 else "es",
        config.mixed_precision or "none",
    )
    return accelerator


def _runtime(params, device_type: str, log: logging.Logger) -> dict:
    """The base's dtype, why it was chosen, the CPU's flags and the importance correction that dtype calls
    for: recorded in every adapter's statistics."""
    from populora.lm.dtype import runtime_record
    from populora.rl.update import importance_mode

    config = params.update
    runtime = runtime_record(params.model.dtype, device_type)
    mode = importance_mode(config.importance_sampling_mode, runtime["dtype"])
    if mode != "none":
        log.info(
            "model dtype %s: importance correction %s (cap %s)", runtime["dtype"], mode, config.importance_sampling_cap
        )
    return runtime | {
        "importance_sampling_mode": mode,
        "importance_sampling_cap": None if mode == "none" else config.importance_sampling_cap,
    }


def _train_adapter(
    accelerator,
    model,
    tokenizer,
    slot: str,
    rollouts: list[dict],
    config,
    *,
    state: str,
    tmp: Path | None,
    runtime: dict,
    log: logging.Logger,
) -> dict:
    """REINFORCE steps of `slot` on its `rollouts` (`config`: params.update), from its optimizer moments in the
    checkpoint `state`; its statistics. `tmp` is the staging folder its adapter and moments go to, None on
    every process but the first (which alone writes)."""
    from populora.lm.adapters import save_trained_adapter
    from populora.rl.update import reinforce_steps

    started = time.perf_counter()
    stats = reinforce_steps(
        accelerator,
        model,
        tokenizer,
        slot,
        rollouts,
        config,
        optimizer_file=Path(state) / OPTIMIZER / f"{slot}.safetensors",
        optimizer_out=tmp / OPTIMIZER / f"{slot}.safetensors" if tmp is not None else None,
    )
    log.info("update %s on %d rollouts took %.1f s", slot, len(rollouts), time.perf_counter() - started)
    stats["advantages_shuffled"] = config.shuffle_advantages
    stats["runtime"] = runtime
    if tmp is not None:
        save_trained_adapter(model, slot, tmp / ADAPTERS / slot)
    log.info("%s: %s", slot, {k: v for k, v in stats.items() if k != "losses"})
    return stats
