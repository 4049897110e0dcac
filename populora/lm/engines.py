"""The sampler a generating stage uses, by `sampler.engine`: `hf` (the base with stacked LoRA
adapters, `populora.lm.multilora`, sampled by `populora.lm.sampling`) or `vllm`
(`populora.lm.vllm_engine`). A module of its own so that `populora.lm.model`, which every stage that
loads the base imports, does not pull the generation stack into their DVC code dependencies.
"""

from __future__ import annotations

from pathlib import Path


def load_sampler(model_dir: str | Path, adapters: dict[str, str | Path], params):
    """(tokenizer, sampler) for `populora.lm.sampling.run_plans` with `params.sampler.engine`:
    `hf` loads the base and stacks `adapters` (name -> PEFT folder) on it (`populora.lm.multilora`);
    `vllm` starts a `populora.lm.vllm_engine.VllmEngine` with each adapter a LoRARequest."""
    if params.sampler.engine == "vllm":
        from populora.lm.vllm_engine import VllmEngine

        cfg = params.sampler
        engine = VllmEngine(model_dir, adapters, dtype=params.model.dtype, lora_rank=params.lora.rank,
                            memory_fraction=cfg.memory_fraction, max_loras=cfg.max_loras,
                            max_num_seqs=cfg.max_num_seqs, enforce_eager=cfg.enforce_eager,
                            max_model_len=params.update.max_seq_len, request_seeds=cfg.request_seeds)
        return engine.tokenizer, engine
    from populora.lm.model import load_base
    from populora.lm.multilora import attach_multilora

    tokenizer, model = load_base(model_dir, dtype=params.model.dtype, device=params.model.device)
    if adapters:
        model = attach_multilora(model, {name: str(path) for name, path in adapters.items()})
    model.eval()
    return tokenizer, model
