"""LoRA-only REINFORCE update of one adapter (advantages from the reward stage, no KL), on one process or several.

On-policy by construction: a rollout's `segments` (see `populora.lm.sampling`) carry the token ids
the sampler fed and sampled, with its temperature, top-p and first-token suppression. The update
scores exactly those sampled ids, each in the context it was sampled in, through the sampler's own
`process_logits`, so before the first optimizer step its log-probabilities equal the sampler's
scores (checked by a test, and reported per adapter as `sampler_logprob_max_abs_diff`). Every
sampled token is trained, the one that completed the stop string or EOS included.

The loss is `mean_i(-A_i * mean_token_logprob_i)` over the adapter's rollouts (per-sequence
statistics, `update.loss_type: sequence`; `token` and `constant` normalise otherwise: `token_weights`),
written per token as weights `A_i / (N n_i)` so it can be split into micro-batches anywhere; rollouts
with zero or missing advantage carry no gradient and are skipped. Where the sampler's scores differ
from the update's (bf16, another engine), `update.importance_sampling_mode` corrects per token
(`token_truncate`) or per sequence (`sequence_mask`): `importance_mode`. The `update.steps` optimizer steps
each go over all the rollouts (`step_rollouts: all`: epochs) or over a share of them each (`split`: dealt out by
task, `step_shares`, every rollout trained on once): `step_schedule`.

Scoring (`populora.rl.sequences`, re-exported here). Memory: only the positions that are trained get logits, in chunks recomputed in the backward pass
(no `[batch, time, vocab]` fp32 tensor); micro-batches hold at most `micro_batch` sequences and
`max_tokens_per_micro_batch` padded tokens; gradient checkpointing is optional.

What `accelerate.Accelerator` does here: the device, the forward pass under its autocast (bf16 with
`update.mixed_precision: bf16`, else nothing), the backward, gradient clipping and the optimizer
step; with several processes (`accelerate launch`, see stages/update.py) each scores every N-th
micro-batch and the LoRA gradients are summed across processes (one all-reduce per optimizer step,
of the adapter's gradients flattened) before clipping, so every process takes the same step. The
model is not wrapped in DistributedDataParallel: DDP registers the parameters that require grad
when it wraps, but a job trains its adapters one after another, and an uneven share of
micro-batches would leave DDP's per-backward collectives unmatched.
"""

from __future__ import annotations

import logging
from pathlib import Path

import torch
from safetensors.torch import save_file

from populora.core.io import naming, write_point
from populora.core.progress import Progress
from populora.rl.micro_batches import fed_tokens
from populora.rl.sequences import (  # noqa: F401  (re-exported: the update's building blocks)
    LOGIT_CHUNK,
    RolloutFormatError,
    Sequence,
    plan_micro_batches,
    plan_shared_micro_batches,
    rollout_sequences,
    selected_logprobs,
    shared_prefix_logprobs,
    token_weights,
)
from populora.rl.step_schedule import role_parts, step_schedule, with_signal

log = logging.getLogger(__name__)


def trainable_state(model, adapter: str) -> dict[str, torch.nn.Parameter]:
    return {n: p for n, p in model.named_parameters() if "lora_" in n and f".{adapter}." in n}


def make_optimizer(params: dict[str, torch.nn.Parameter], *, lr: float, weight_decay: float, state_file: Path | None):
    """AdamW over one adapter's LoRA weights, resuming its moments from `state_file` if present."""
    names = sorted(params)
    optimizer = torch.optim.AdamW([params[n] for n in names], lr=lr, weight_decay=weight_decay)
    if state_file is not None and state_file.is_file():
        from populora.core.io import load_safetensors  # a damaged file fails naming it and the fix

        saved = load_safetensors(state_file)
        for name in names:
            if f"{name}.exp_avg" in saved:
                optimizer.state[params[name]] = {
                    "step": saved[f"{name}.step"].clone(),
                    "exp_avg": saved[f"{name}.exp_avg"].to(params[name].device),
                    "exp_avg_sq": saved[f"{name}.exp_avg_sq"].to(params[name].device),
                }
    return optimizer, names


def save_optimizer(optimizer, params: dict[str, torch.nn.Parameter], names: list[str], path: Path) -> None:
    tensors = {}
    for name in names:
        st = optimizer.state.get(params[name])
        if st:
            tensors[f"{name}.step"] = torch.as_tensor(st["step"], dtype=torch.float32).reshape(1).cpu()
            tensors[f"{name}.exp_avg"] = st["exp_avg"].detach().cpu().contiguous()
            tensors[f"{name}.exp_avg_sq"] = st["exp_avg_sq"].detach().cpu().contiguous()
    path.parent.mkdir(parents=True, exist_ok=True)
    with naming(path):
        save_file(tensors, str(path))
    write_point("optimizer moments written", path)


def set_gradient_checkpointing(model, enabled: bool) -> None:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    # transformers 5 renames these to activation_checkpointing_*; older 5.x releases only have the old names
    if hasattr(base, "activation_checkpointing_enable"):
        if enabled:
            base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        else:
            base.activation_checkpointing_disable()
    elif enabled:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_disable()


def _plan(rollouts: list[dict], config, counted: int | None = None) -> dict:
    """Sequences, micro-batches and per-token weights of one loss over `rollouts` (those with signal);
    `counted`: the rollouts the loss averages over when more than those (`update.normalize: batch`)."""
    sequences, truncated = [], 0
    for index, rollout in enumerate(rollouts):
        built, cut = rollout_sequences(rollout["segments"], index, config.max_seq_len)
        sequences.extend(built)
        truncated += cut
    offsets = [0]
    for s in sequences:
        offsets.append(offsets[-1] + len(s.targets))
    return {
        "sequences": sequences,
        "truncated": truncated,
        "offsets": offsets,
        "batches": plan_shared_micro_batches(sequences, config.micro_batch, config.max_tokens_per_micro_batch)
        if _shares(config)
        else plan_micro_batches([len(s.ids) for s in sequences], config.micro_batch, config.max_tokens_per_micro_batch),
        "advantages": [float(r["advantage"]) for r in rollouts],
        "weights": normalized_weights(
            token_weights(sequences, [float(r["advantage"]) for r in rollouts], config.loss_type, config.max_seq_len),
            len(rollouts),
            counted,
        ),
    }


def normalized_weights(weights: list[float], with_signal: int, counted: int | None) -> list[float]:
    """`weights` averaged over `counted` rollouts instead of the `with_signal` they were made for (the zeros
    added to the mean: GRPO's normalisation over the whole group); as they are when `counted` is None.

    >>> normalized_weights([0.5, -0.5], 2, None), normalized_weights([0.5, -0.5], 2, 8)
    ([0.5, -0.5], [0.125, -0.125])
    """
    if counted is None or counted == with_signal:
        return weights
    if counted < with_signal:
        raise ValueError(f"the loss cannot average over {counted} rollouts when {with_signal} carry signal")
    share = with_signal / counted
    return [w * share for w in weights]


def _shares(config) -> bool:
    """Whether the update computes a prompt once for its answers (`update.share_prompts`, not under checkpointing)."""
    return config.share_prompts and not config.gradient_checkpointing


def _all_reduce(tensor: torch.Tensor, op: str) -> torch.Tensor:
    """Sum (`op="sum"`) or maximum (`"max"`) of `tensor` over the processes, in place."""
    import torch.distributed as dist

    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return tensor


def sum_gradients(parameters: list[torch.nn.Parameter]) -> None:
    """Replace each parameter's gradient by its sum over the processes (a process that scored no
    micro-batch contributes zeros): one all-reduce of the gradients flattened."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in parameters]
    flat = _all_reduce(torch.cat([g.reshape(-1) for g in grads]), "sum")
    offset = 0
    for parameter in parameters:
        parameter.grad = flat[offset : offset + parameter.numel()].view_as(parameter).clone()
        offset += parameter.numel()


IMPORTANCE_MODES = ("auto", "none", "token_truncate", "sequence_mask")  # update.importance_sampling_mode


def importance_mode(mode: str, dtype: str) -> str:
    """The importance correction the update applies for `update.importance_sampling_mode`: `auto` is
    `token_truncate` when the frozen base computes in bfloat16 or float16 (the sampler's scores,
    stacked LoRA in that dtype, differ from the update's, PEFT's LoRA in float32, by rounding) and
    `none` in float32, where they are equal.

    >>> importance_mode("auto", "bfloat16"), importance_mode("auto", "float32"), importance_mode("sequence_mask", "float32")
    ('token_truncate', 'none', 'sequence_mask')
    """
    if mode not in IMPORTANCE_MODES:
        raise ValueError(f"importance sampling mode must be one of {IMPORTANCE_MODES}, got {mode!r}")
    if mode == "auto":
        return "none" if dtype == "float32" else "token_truncate"
    return mode


def importance_weights(logprobs: torch.Tensor, recorded: list[float | None], cap: float) -> torch.Tensor:
    """Truncated importance sampling (`token_truncate`): min(pi_update / pi_sampler, cap) per token, no
    gradient through it; tokens without a recorded sampler score weigh 1 (verl's and TRL's TIS correction)."""
    sampler = torch.tensor(
        [x if x is not None else float("nan") for x in recorded], device=logprobs.device, dtype=torch.float32
    )
    ratio = torch.exp(logprobs.detach().float() - sampler).clamp(max=cap)
    return torch.where(torch.isnan(sampler), torch.ones_like(ratio), ratio)


def sequence_mask_weights(
    logprobs: torch.Tensor, recorded: list[float | None], lengths: list[int], cap: float
) -> torch.Tensor:
    """Masked sequence-level importance sampling (`sequence_mask`, TRL's): each sequence's tokens weigh
    its ratio exp(sum_t log pi_update - log pi_sampler) over its recorded tokens, or 0 when that ratio
    exceeds `cap` (the sequence is dropped); no gradient through it. `lengths`: the tokens of each
    sequence, in the order of `logprobs`; a sequence without recorded scores weighs 1.

    >>> import torch
    >>> sequence_mask_weights(torch.tensor([-1.0, -1.0, -1.0]), [-1.5, -1.0, -2.0], [2, 1], cap=2.0).tolist()
    [1.6487212181091309, 1.6487212181091309, 0.0]
    """
    sampler = torch.tensor(
        [x if x is not None else float("nan") for x in recorded], device=logprobs.device, dtype=torch.float32
    )
    gaps = torch.nan_to_num(logprobs.detach().float() - sampler, nan=0.0)
    owner = torch.repeat_interleave(
        torch.arange(len(lengths), device=logprobs.device), torch.tensor(lengths, device=logprobs.device)
    )
    ratio = torch.exp(torch.zeros(len(lengths), device=logprobs.device).index_add_(0, owner, gaps))
    return torch.where(ratio > cap, torch.zeros_like(ratio), ratio)[owner]


def tasks_without_spread(rollouts: list[dict]) -> tuple[int, int]:
    """(tasks whose samples all earned the same reward, tasks with two or more samples), over the solve
    rollouts: the groups a per-task baseline gives no signal, and where TRR++'s type-wide baseline
    rewards a task's easiness instead of its better answers."""
    rewards: dict[str, list[float]] = {}
    for r in rollouts:
        if r.get("role") == "solve" and r.get("reward") is not None:
            rewards.setdefault(r["task_id"], []).append(float(r["reward"]))
    groups = [values for values in rewards.values() if len(values) > 1]
    return sum(len(set(values)) == 1 for values in groups), len(groups)


def batch_stats(rollouts: list[dict], useful: int, plans: list[dict]) -> dict:
    """What `AdapterUpdate.train` reports of its batch before any step: the rollouts, those with signal
    (`useful`), the tasks without spread, and the tokens, sequences and micro-batches its `plans` score."""
    flat, groups = tasks_without_spread(rollouts)
    return {
        "rollouts": len(rollouts),
        "rollouts_with_signal": useful,
        "optimizer_steps": 0,
        "zero_advantage_share": round(1 - useful / len(rollouts), 6) if rollouts else None,
        "tasks_without_spread": flat,
        "tasks_sampled_more_than_once": groups,
        "trained_tokens": sum(plan["offsets"][-1] for plan in plans),
        "sequences": sum(len(plan["sequences"]) for plan in plans),
        "truncated_sequences": sum(plan["truncated"] for plan in plans),
        "micro_batches": sum(len(plan["batches"]) for plan in plans if plan["sequences"]),
        "steps": [],
    }


def _mean_where(values: torch.Tensor, mask: torch.Tensor) -> float | None:
    return float(values[mask].mean()) if bool(mask.any()) else None


class _StepTotals:
    """What one optimizer step adds up over the micro-batches a process scores, then over the processes:
    per rollout the summed log-prob of its trained tokens before the step (`before`) and their count
    (`count`); the loss, the entropy sum and the sampler gaps (`sums`: [loss, entropy sum, gap sum, gap
    count]) and the largest gap (`gap_max`, -1 before any)."""

    def __init__(self, rollouts: int, device):
        self.device = device
        self.before, self.count = (torch.zeros(rollouts, dtype=torch.float64, device=device) for _ in range(2))
        self.sums = torch.zeros(4, dtype=torch.float64, device=device)
        self.gap_max = torch.tensor([-1.0], dtype=torch.float64, device=device)

    def add(
        self,
        chunk: list[Sequence],
        logprobs: torch.Tensor,
        entropies: torch.Tensor,
        recorded: list[float | None],
        loss: float,
    ) -> None:
        """One micro-batch: its sequences, their targets' log-probs (detached) and entropies, the sampler's
        recorded scores of the same targets, and its loss."""
        owners = torch.tensor([s.rollout for s in chunk for _ in s.targets], device=self.device)
        self.before.index_add_(0, owners, logprobs.double())
        self.count.index_add_(0, owners, torch.ones_like(owners, dtype=torch.float64))
        gaps = [abs(a - b) for a, b in zip(logprobs.float().tolist(), recorded) if b is not None]
        self.sums += torch.tensor(
            [loss, float(entropies.double().sum()), sum(gaps), len(gaps)], dtype=torch.float64, device=self.device
        )
        self.gap_max = torch.maximum(
            self.gap_max, torch.tensor([max(gaps, default=-1.0)], dtype=torch.float64, device=self.device)
        )

    def sum_over_processes(self) -> None:
        for tensor in (self.before, self.count, self.sums):
            _all_reduce(tensor, "sum")
        _all_reduce(self.gap_max, "max")

    def row(self, on_policy: bool, grad_norm: float) -> dict:
        """The step's diagnostics (`AdapterUpdate.train`'s `stats["steps"]`), before the after-step ones."""
        sums, count = self.sums, self.count
        return {
            "on_policy": on_policy,
            "loss": float(sums[0]),
            "grad_norm": grad_norm,
            "entropy": float(sums[1] / count.sum()) if count.sum() > 0 else None,
            "sampler_gap_mean": float(sums[2] / sums[3]) if sums[3] > 0 else None,
            "sampler_gap_max": float(self.gap_max[0]) if sums[3] > 0 else None,
        }


def _step_timings(sequences: list[Sequence], mine: list[list[int]], seconds: float, shares: bool) -> dict[str, float]:
    """One step's forward and backward over this process's micro-batches `mine`: the tokens, the tokens
    with padding, the tokens the decoder was fed (shared prompts and prefixes once: `fed_tokens`), the
    seconds (for `AdapterUpdate._log_timings`; re-scoring is filled in later)."""
    return {
        "tokens": sum(len(sequences[i].ids) for b in mine for i in b),
        "padded_tokens": sum(len(b) * max(len(sequences[i].ids) for i in b) for b in mine),
        "fed_tokens": sum(fed_tokens(sequences, b, shares) for b in mine),
        "forward_backward_s": seconds,
        "rescore_s": 0.0,
    }


class AdapterUpdate:
    """REINFORCE for one adapter of a PEFT model, its AdamW kept from call to call.

    `train(rollouts)` takes `config.steps` optimizer steps over the rollouts (sampled by
    `populora.lm.sampling`, with an `advantage` each) and returns their statistics, with the
    update's own diagnostics per step (`stats["steps"]`): the loss, the gradient norm before
    clipping, the mean entropy of the trained tokens, how far the sampler's log-probs are from the
    update's (0 on the first step of a batch: on-policy), and, the same tokens scored again after
    the step, the mean change of the per-token log-prob of the answers with A > 0 and with A < 0
    (a working update raises the first and lowers the second).

    The update stage makes one per adapter and generation (the moments go through a file between
    generations); a caller that alternates sampling and training (`populora.control`) keeps one and
    samples from the same PEFT model, which holds the adapter being trained.
    """

    CHAIN_DIAGNOSTICS = True  # False: every step re-scores its tokens itself (tests compare the two)

    def __init__(self, accelerator, model, tokenizer, adapter: str, config, *, optimizer_file: Path | None = None):
        self.accelerator, self.model, self.tokenizer, self.adapter, self.config = (
            accelerator,
            model,
            tokenizer,
            adapter,
            config,
        )
        self.unwrapped = accelerator.unwrap_model(model)
        self.params = trainable_state(self.unwrapped, adapter)
        if not self.params:
            raise ValueError(f"the model has no LoRA weights of adapter {adapter!r}")
        optimizer, self.names = make_optimizer(
            self.params, lr=config.learning_rate, weight_decay=config.weight_decay, state_file=optimizer_file
        )
        frozen = next(p.dtype for n, p in self.unwrapped.named_parameters() if "lora_" not in n)
        self.importance = importance_mode(config.importance_sampling_mode, str(frozen).removeprefix("torch."))
        self.optimizer = accelerator.prepare_optimizer(optimizer)

    def _activate(self) -> None:
        """Only this adapter trains (a job trains several adapters of one model, one after another)."""
        self.unwrapped.set_adapter(self.adapter)
        for name, parameter in self.unwrapped.named_parameters():
            parameter.requires_grad_(name in self.params)
        set_gradient_checkpointing(self.unwrapped, self.config.gradient_checkpointing)

    def train(self, rollouts: list[dict]) -> dict:
        config = self.config
        self._activate()
        useful = with_signal(rollouts)
        # joint: one loss over every rollout; per_role: the propose and the solve rollouts of an adapter
        # in both roles (the baseline) each get their own `steps`, as a teacher and a student would
        by_role = role_parts(rollouts) if config.role_steps == "per_role" else [rollouts]
        losses, schedule = step_schedule(by_role, config)
        loss_plans = [
            _plan(part, config, counted if config.normalize == "batch" else None) if part else None
            for part, counted in losses
        ]
        # per round the plans it steps on (those with a sequence to score); under step_rollouts all the same every round
        usable = {i: plan for i, plan in enumerate(loss_plans) if plan is not None and plan["sequences"]}
        rounds = [[usable[i] for i in round_ if i in usable] for round_ in schedule]
        stats = batch_stats(rollouts, len(useful), [plan for plan in loss_plans if plan is not None])
        rank, world = self.accelerator.process_index, self.accelerator.num_processes
        passes = sum(len(plan["batches"][rank::world]) for plans in rounds for plan in plans)
        steps = sum(len(plans) for plans in rounds)
        # With one loss over the same rollouts every round (joint, step_rollouts all), step k + 1's forward
        # scores the same tokens under the weights step k left: it is step k's "after" diagnostic, so only
        # the last step re-scores (issue 48: what is computed twice costs at most a quarter of a step).
        # Per role, or each round on its own share, each step re-scores at once.
        chained = (
            config.diagnostics
            and self.CHAIN_DIAGNOSTICS
            and all(len(plans) == 1 and plans[0] is rounds[0][0] for plans in rounds)
        )
        rescored = (passes // len(rounds) if chained else passes) if config.diagnostics and rounds else 0
        self.timings: list[dict[str, float]] = []
        self.model.train()
        # one unit per micro-batch scored: forward and backward, and with diagnostics the re-scoring after a step
        with Progress(
            passes + rescored,
            f"update {self.adapter}",
            unit="micro-batch passes",
            log=log,
            enabled=self.accelerator.is_main_process,
        ) as progress:
            waiting = None  # (row, before, count) of the step whose "after" is the next step's forward
            for round_index, plans in enumerate(rounds):
                for plan in plans:
                    note = f"optimizer step {len(stats['steps']) + 1}/{steps}"
                    advance = lambda note=note: progress.update(note=note)  # noqa: E731
                    # on-policy: the first round, on the weights the sampler had (a later share is one step or more off)
                    row, before, count = self._step(plan, on_policy=round_index == 0, advance=advance)
                    if waiting is not None:
                        self._diagnose(*waiting, after=before, plan=plan)
                    waiting = None
                    if chained and round_index < len(rounds) - 1:
                        waiting = (row, before, count)
                    elif config.diagnostics:
                        self._diagnose(row, before, count, after=self._rescore(plan, advance), plan=plan)
                    stats["steps"].append(row)
        self.model.eval()
        self._log_timings()
        stats["optimizer_steps"] = len(stats["steps"])
        stats["losses"] = [row["loss"] for row in stats["steps"]]
        if stats["steps"]:
            stats["grad_norm"] = stats["steps"][-1]["grad_norm"]
        on_policy = [row for row in stats["steps"] if row["on_policy"] and row["sampler_gap_max"] is not None]
        if on_policy:  # the first step on each batch: the sampler and the update score the same policy
            stats["sampler_logprob_max_abs_diff"] = max(row["sampler_gap_max"] for row in on_policy)
            stats["sampler_logprob_mean_abs_diff"] = sum(row["sampler_gap_mean"] for row in on_policy) / len(on_policy)
        return stats

    def _score(self, chunk: list[Sequence], entropy: bool):
        with self.accelerator.autocast():
            return selected_logprobs(
                self.unwrapped,
                chunk,
                self.tokenizer.pad_token_id,
                self.accelerator.device,
                entropy=entropy,
                share_prompts=_shares(self.config),
            )

    def _step(self, plan: dict, *, on_policy: bool, advance=lambda: None) -> tuple[dict, torch.Tensor, torch.Tensor]:
        """One optimizer step over `plan`: its diagnostics, and per rollout the summed log-prob of its
        trained tokens before the step and their count. `advance()` is called after each micro-batch
        this process scores (the progress of `train`)."""
        import time

        accelerator = self.accelerator
        sequences = plan["sequences"]
        mine = plan["batches"][accelerator.process_index :: accelerator.num_processes]
        totals = _StepTotals(len(plan["advantages"]), accelerator.device)
        started = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=True)
        for batch in mine:
            chunk = [sequences[i] for i in batch]
            logprobs, entropies = self._score(chunk, entropy=True)
            recorded = [x for s in chunk for x in s.sampler_logprobs]
            loss = -(self._weights(plan, batch, logprobs, recorded) * logprobs.float()).sum()
            accelerator.backward(loss)
            totals.add(chunk, logprobs.detach(), entropies, recorded, loss.item())
            advance()
        parameters = [self.params[name] for name in self.names]
        if accelerator.num_processes > 1:
            sum_gradients(parameters)
            totals.sum_over_processes()
        grad_norm = accelerator.clip_grad_norm_(parameters, self.config.max_grad_norm)  # the norm before clipping
        self.optimizer.step()
        self.timings.append(_step_timings(sequences, mine, time.perf_counter() - started, _shares(self.config)))
        return totals.row(on_policy, float(grad_norm)), totals.before, totals.count

    def _weights(self, plan: dict, batch: list[int], logprobs: torch.Tensor, recorded: list[float | None]):
        """Each trained token's weight in the loss for one micro-batch: its rollout's share of the loss
        (`token_weights`), times the importance correction (`update.importance_sampling_mode`)."""
        weights, offsets, cap = plan["weights"], plan["offsets"], self.config.importance_sampling_cap
        weight = torch.tensor(
            [w for i in batch for w in weights[offsets[i] : offsets[i + 1]]],
            device=logprobs.device,
            dtype=torch.float32,
        )
        if self.importance == "token_truncate":
            weight = weight * importance_weights(logprobs, recorded, cap)
        elif self.importance == "sequence_mask":
            lengths = [len(plan["sequences"][i].targets) for i in batch]
            weight = weight * sequence_mask_weights(logprobs, recorded, lengths, cap)
        return weight

    def _rescore(self, plan: dict, advance=lambda: None) -> torch.Tensor:
        """Per rollout, the summed log-prob of its trained tokens under the weights as they are now."""
        import time

        started = time.perf_counter()
        sequences, device = plan["sequences"], self.accelerator.device
        after = torch.zeros(len(plan["advantages"]), dtype=torch.float64, device=device)
        mine = plan["batches"][self.accelerator.process_index :: self.accelerator.num_processes]
        # every sequence of this process at once: the samples of a task share their prompt's forward
        chunk = [sequences[i] for batch in mine for i in batch]
        with torch.no_grad(), self.accelerator.autocast():
            scored = shared_prefix_logprobs(self.unwrapped, chunk, self.tokenizer.pad_token_id, device)
        owners = torch.tensor([s.rollout for s in chunk for _ in s.targets], device=device)
        after.index_add_(0, owners, scored.double())
        for _ in mine:
            advance()
        if self.accelerator.num_processes > 1:
            _all_reduce(after, "sum")
        self.timings[-1]["rescore_s"] = time.perf_counter() - started
        return after

    @staticmethod
    def _diagnose(row: dict, before: torch.Tensor, count: torch.Tensor, *, after: torch.Tensor, plan: dict) -> None:
        """The mean change of the per-token log-prob of answers with A > 0 and with A < 0, into `row`."""
        scored = count > 0
        change = torch.where(scored, (after - before) / count.clamp(min=1), torch.zeros_like(after))
        advantages = torch.tensor(plan["advantages"], dtype=torch.float64, device=before.device)
        row["logprob_change_positive"] = _mean_where(change, scored & (advantages > 0))
        row["logprob_change_negative"] = _mean_where(change, scored & (advantages < 0))

    def _log_timings(self) -> None:
        """Forward + backward tokens per second, padding, and what re-scoring cost (the log only: the
        statistics stay byte-identical between reruns)."""
        if not self.timings:
            return
        tokens, padded = sum(t["tokens"] for t in self.timings), sum(t["padded_tokens"] for t in self.timings)
        train_s, rescore_s = (
            sum(t["forward_backward_s"] for t in self.timings),
            sum(t["rescore_s"] for t in self.timings),
        )
        fed = sum(t["fed_tokens"] for t in self.timings)
        log.info(
            "update %s: %d tokens forward+backward in %.1f s (%.0f tokens/s, padding %.1f%%; %d tokens fed with shared "
            "prompts and prefixes once); re-scoring for the diagnostics %.1f s (%.0f%% of the steps)",
            self.adapter,
            tokens,
            train_s,
            tokens / max(train_s, 1e-9),
            100 * (padded - tokens) / max(padded, 1),
            fed,
            rescore_s,
            100 * rescore_s / max(train_s + rescore_s, 1e-9),
        )

    def save_optimizer(self, path: Path) -> None:
        save_optimizer(self.optimizer, self.params, self.names, path)


def reinforce_steps(
    accelerator,
    model,
    tokenizer,
    adapter: str,
    rollouts: list[dict],
    config,
    *,
    optimizer_file: Path | None,
    optimizer_out: Path | None,
) -> dict:
    """Run `config.steps` REINFORCE steps for `adapter`, each over all its rollouts or over its own share of them
    (`step_rollouts`), per role with `role_steps: per_role`;
    returns statistics for the metrics and writes the optimizer moments to `optimizer_out` (None: not
    written, e.g. by a process other than the first).

    `config` is the `update` section of params (`populora.config.UpdateSection`): learning rate,
    weight decay, steps, micro-batch and its token budget, clipping, sequence cap, checkpointing.
    With several processes, process r scores micro-batches r, r+N, ... of each step and the
    gradients are summed across processes before clipping: the loss is a sum over tokens, so this is
    the same step as one process scoring every micro-batch (up to float summation order).
    """
    update = AdapterUpdate(accelerator, model, tokenizer, adapter, config, optimizer_file=optimizer_file)
    stats = update.train(rollouts)
    if optimizer_out is not None:
        update.save_optimizer(optimizer_out)
    return stats
