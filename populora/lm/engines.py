"""The generation engine, picked once from `sampler.engine`: `hf` (the base with stacked LoRA
adapters, `populora.lm.multilora`, sampled by `populora.lm.sampling`) or `vllm`
(`populora.lm.vllm_engine`).

    sampler = pick_sampler(params)                      # the one reader of sampler.engine
    tokenizer, model = sampler.load(base_model, {"population-student0": adapter_dir})

`pick_sampler` resolves the engine and everything it loads with (dtype, device, LoRA rank, vLLM's
memory share ...) into a small frozen value that stages and benchmarks pass on; nothing else asks
which engine runs. A module of its own so that `populora.lm.model`, which every stage that loads
the base imports, does not pull the generation stack into their DVC code dependencies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar


@dataclass(frozen=True)
class HfSampler:
    """The project's decode loop over the base with every adapter stacked (the CPU default and the
    reference the vllm engine is tested against)."""

    name: ClassVar[str] = "hf"
    dtype: str
    device: str

    def load(self, model_dir: str | Path, adapters: Mapping[str, str | Path]):
        """(tokenizer, model) for `populora.lm.sampling.run_plans`: the base on its device with
        `adapters` (name -> PEFT folder) stacked on it; rows pick theirs by name."""
        from populora.lm.model import load_base
        from populora.lm.multilora import attach_multilora

        tokenizer, model = load_base(model_dir, dtype=self.dtype, device=self.device)
        if adapters:
            model = attach_multilora(model, {name: str(path) for name, path in adapters.items()})
        model.eval()
        return tokenizer, model

    def lmeval_vllm_args(self) -> None:
        """Math benchmarks use lm-eval's own `hf` model and the project's stacked one: no vLLM."""
        return None


@dataclass(frozen=True)
class VllmSampler:
    """vLLM with the base loaded once and every adapter a LoRARequest of its own."""

    name: ClassVar[str] = "vllm"
    dtype: str
    lora_rank: int
    memory_fraction: float
    max_loras: int | None
    max_num_seqs: int
    enforce_eager: bool
    max_model_len: int  # update.max_seq_len: the window the update can score
    request_seeds: bool

    def load(self, model_dir: str | Path, adapters: Mapping[str, str | Path]):
        """(tokenizer, engine) for `populora.lm.sampling.run_plans`: a `VllmEngine` serving `adapters`."""
        from populora.lm.vllm_engine import VllmEngine

        engine = VllmEngine(
            model_dir,
            adapters,
            dtype=self.dtype,
            lora_rank=self.lora_rank,
            memory_fraction=self.memory_fraction,
            max_loras=self.max_loras,
            max_num_seqs=self.max_num_seqs,
            enforce_eager=self.enforce_eager,
            max_model_len=self.max_model_len,
            request_seeds=self.request_seeds,
        )
        return engine.tokenizer, engine

    def lmeval_vllm_args(self) -> dict:
        """Engine settings for lm-eval's own `vllm` model (math benchmarks), the same as ours."""
        from populora.lm.vllm_engine import lmeval_vllm_args

        return lmeval_vllm_args(
            memory_fraction=self.memory_fraction,
            enforce_eager=self.enforce_eager,
            max_num_seqs=self.max_num_seqs,
            lora_rank=self.lora_rank,
            max_model_len=self.max_model_len,
        )


def pick_sampler(params) -> HfSampler | VllmSampler:
    """The engine `params.sampler.engine` names, with what it loads with (validated params)."""
    from populora.lm.dtype import log_choice

    cfg = params.sampler
    dtype = log_choice(params.model.dtype, params.model.device)  # `auto` resolved here: vLLM's auto means the config's
    if cfg.engine == "vllm":
        return VllmSampler(
            dtype=dtype,
            lora_rank=params.lora.rank,
            memory_fraction=cfg.memory_fraction,
            max_loras=cfg.max_loras,
            max_num_seqs=cfg.max_num_seqs,
            enforce_eager=cfg.enforce_eager,
            max_model_len=params.update.max_seq_len,
            request_seeds=cfg.request_seeds,
        )
    return HfSampler(dtype=dtype, device=params.model.device)


def load_sampler(model_dir: str | Path, adapters: Mapping[str, str | Path], params):
    """(tokenizer, sampler) of the engine params pick, with `adapters` (name -> PEFT folder) on it."""
    return pick_sampler(params).load(model_dir, adapters)
