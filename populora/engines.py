"""The sampler a generating stage uses, by `generation.engine`: `hf` (the base with stacked LoRA
adapters, `populora.multilora`, sampled by `populora.generation`) or `vllm`
(`populora.vllm_engine`). A module of its own so that `populora.model`, which every stage that
loads the base imports, does not pull the generation stack into their DVC code dependencies.
"""

from __future__ import annotations

from pathlib import Path


def load_sampler(model_dir: str | Path, adapters: dict[str, str | Path], params):
    """(tokenizer, sampler) for `populora.generation.run_plans` with `params.generation.engine`:
    `hf` loads the base and stacks `adapters` (name -> PEFT folder) on it (`populora.multilora`);
    `vllm` starts a `populora.vllm_engine.VllmEngine` with each adapter a LoRARequest."""
    if params.generation.engine == "vllm":
        from populora.vllm_engine import VllmEngine

        cfg = params.generation
        engine = VllmEngine(model_dir, adapters, dtype=params.model.dtype, lora_rank=params.lora.rank,
                            memory_fraction=cfg.memory_fraction, max_loras=cfg.max_loras,
                            max_num_seqs=cfg.max_num_seqs, enforce_eager=cfg.enforce_eager)
        return engine.tokenizer, engine
    from populora.model import load_base
    from populora.multilora import attach_multilora

    tokenizer, model = load_base(model_dir, dtype=params.model.dtype, device=params.model.device)
    if adapters:
        model = attach_multilora(model, {name: str(path) for name, path in adapters.items()})
    model.eval()
    return tokenizer, model
