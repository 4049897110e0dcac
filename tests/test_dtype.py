"""`model.dtype: auto` (populora.lm.dtype) and a bfloat16 base: sampling and scoring in bf16, the update's
LoRA weights and AdamW moments in float32.

    python -m pytest -m "" -n 0 tests/test_dtype.py -q
"""

from __future__ import annotations

import torch
from accelerate import Accelerator

import populora.lm.dtype as dtype_module
from populora.config import UpdateSection
from populora.lm.dtype import resolve_dtype, runtime_record
from populora.lm.model import attach_adapters, load_base
from populora.lm.multilora import attach_multilora
from populora.lm.sampling import GenRow, run_plans
from populora.rl.update import AdapterUpdate
from populora.tasks import prompts
from tests.test_generation_update import _adapters, _chat


def _flags(monkeypatch, *flags):
    monkeypatch.setattr(dtype_module, "cpu_info", lambda: ("test CPU", frozenset(flags)))


def test_auto_picks_bfloat16_only_with_native_bf16(monkeypatch):
    _flags(monkeypatch, "avx2", "avx512f", "avx512_bf16")
    assert resolve_dtype("auto", "cpu") == ("bfloat16", "auto: the CPU has avx512_bf16 (native bfloat16 matmuls)")
    _flags(monkeypatch, "amx_tile", "amx_bf16")
    assert resolve_dtype("auto", "cpu")[0] == "bfloat16"
    _flags(monkeypatch, "avx2", "avx512f")
    dtype, reason = resolve_dtype("auto", "cpu")
    assert dtype == "float32" and "avx512_bf16" in reason
    assert resolve_dtype("float32", "cpu") == ("float32", "pinned in params (model.dtype)")
    assert resolve_dtype("bfloat16", "cpu")[0] == "bfloat16"  # pinned: even where it is emulated
    record = runtime_record("auto")
    assert record["dtype"] == "float32" and record["cpu_flags"] == ["avx2", "avx512f"] and record["cpu"] == "test CPU"


def test_bfloat16_base_samples_and_trains_float32_lora(tiny_model_dir, tmp_path, monkeypatch):
    _flags(monkeypatch, "avx512_bf16")
    adapters = _adapters(tiny_model_dir, tmp_path)
    tokenizer, base = load_base(tiny_model_dir, dtype="auto")
    assert base.dtype == torch.bfloat16
    sampler = attach_multilora(base, adapters)
    plan = prompts.scaffolded_plan("Write f.", prompts.proposer_steps("code_o", 10), _chat(tokenizer))
    results = run_plans(
        sampler, tokenizer, [GenRow(plan, "a")] * 4, temperature=1.0, top_p=1.0, max_new_tokens=8, batch_size=4, seed=0
    )
    rollouts = [{"segments": r.segments, "advantage": a} for r, a in zip(results, [1.0, -1.0, 0.5, -0.5])]
    tokenizer, model = load_base(tiny_model_dir, dtype="bfloat16")
    tokenizer.padding_side = "right"
    model = attach_adapters(model, adapters, trainable="a")
    update = AdapterUpdate(
        Accelerator(cpu=True),
        model,
        tokenizer,
        "a",
        UpdateSection(
            steps=2, learning_rate=1e-2, micro_batch=2, max_seq_len=4096, importance_sampling_mode="token_truncate"
        ),
    )
    assert all(p.dtype == torch.float32 for p in update.params.values())  # master weights
    stats = update.train(rollouts)
    assert all(state["exp_avg"].dtype == torch.float32 for state in update.optimizer.state.values())
    # the sampler (stacked LoRA in bf16) and the update (PEFT's LoRA in float32) differ by bf16 rounding
    assert 0 < stats["sampler_logprob_max_abs_diff"] < 0.5, stats["sampler_logprob_max_abs_diff"]
    assert stats["optimizer_steps"] == 2 and all(row["grad_norm"] > 0 for row in stats["steps"])
    assert stats["steps"][0]["logprob_change_positive"] is not None


def test_the_importance_correction_is_on_in_bf16_by_default():
    from populora.rl.update import importance_mode

    assert UpdateSection().importance_sampling_mode == "none" and UpdateSection().importance_sampling_cap == 2.0
    assert importance_mode("auto", "bfloat16") == importance_mode("auto", "float16") == "token_truncate"
    assert importance_mode("auto", "float32") == "none"
    assert importance_mode("none", "bfloat16") == "none"  # a mode set is kept
    assert importance_mode("sequence_mask", "float32") == "sequence_mask"
