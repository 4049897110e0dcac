"""Generation + one update on CUDA (bf16), on the tiny random model: skipped without a GPU.

    python -m pytest tests/test_engine_gpu.py -q -m gpu
"""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator

from populora.config import UpdateSection
from populora.lm.adapters import create_adapters
from populora.lm.model import attach_adapters, load_base, lora_config
from populora.lm.multilora import attach_multilora
from populora.lm.sampling import GenRow, run_plans
from populora.selfplay import prompts

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def test_generation_and_update_on_cuda(tiny_model_dir, tmp_path):
    from populora.selfplay.update import reinforce_steps

    _, cpu_model = load_base(tiny_model_dir, device="cpu")
    out = tmp_path / "adapters"
    out.mkdir()
    create_adapters(cpu_model, ["a", "b"], out, lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"]),
                    seeds={"a": 0, "b": 1}, init_std=0.5)
    adapters = {"a": out / "a", "b": out / "b"}

    tokenizer, model = load_base(tiny_model_dir, dtype="bfloat16", device="cuda")
    model = attach_multilora(model, adapters)
    chat = lambda p: tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,  # noqa: E731
                                                   add_generation_prompt=True)
    plans = [prompts.scaffolded_plan("Write f.", prompts.proposer_steps("code_o", 10), chat),
             prompts.scaffolded_plan("Give inputs.", prompts.proposer_steps("code_f", 4), chat)]
    rows = [GenRow(plan, adapter) for adapter in ("a", "b", None) for plan in plans]
    results = run_plans(model, tokenizer, rows, temperature=0.8, top_p=0.95, max_new_tokens=16, batch_size=8, seed=0)
    assert all(r.tokens_generated > 0 for r in results)
    del model
    torch.cuda.empty_cache()

    tokenizer, model = load_base(tiny_model_dir, dtype="bfloat16", device="cuda")
    tokenizer.padding_side = "right"
    model = attach_adapters(model, adapters, trainable="a")
    before = {n: p.detach().clone() for n, p in model.named_parameters() if ".a." in n and "lora_" in n}
    rollouts = [{"segments": r.segments, "advantage": adv} for row, r, adv in zip(rows, results, [1.0, -1.0] * 3)
                if row.adapter == "a"]
    accelerator = Accelerator()
    model = accelerator.prepare_model(model)
    stats = reinforce_steps(accelerator, model, tokenizer, "a", rollouts, UpdateSection(
        steps=1, learning_rate=1e-2, micro_batch=2, max_seq_len=2048, max_tokens_per_micro_batch=1024, gradient_checkpointing=True),
        optimizer_file=None, optimizer_out=tmp_path / "opt.safetensors")
    assert stats["optimizer_steps"] == 1 and all(torch.isfinite(torch.tensor(stats["losses"])))
    # bf16, KV-cache decode vs one full forward: close, not bit-equal
    assert stats["sampler_logprob_mean_abs_diff"] < 0.05, stats
    after = dict(accelerator.unwrap_model(model).named_parameters())
    assert any(not torch.equal(v, after[n].detach()) for n, v in before.items())
