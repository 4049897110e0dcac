"""Mixed-adapter generation and the LoRA-only REINFORCE update on the tiny random model."""

from __future__ import annotations

import torch
from accelerate import Accelerator

from populora import prompts
from populora.adapters import create_adapters, read_state_dict
from populora.generation import GenRow, _cut, block_enders, run_plans
from populora.model import attach_adapters, load_base, lora_config
from populora.update import encode_segments, reinforce_steps


def _adapters(tiny_model_dir, tmp_path, names=("a", "b")):
    _, model = load_base(tiny_model_dir)
    cfg = lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"])
    out = tmp_path / "adapters"
    out.mkdir()
    # init_std > 0 so the adapters differ (PEFT's B = 0 would make them all equal the base)
    create_adapters(model, list(names), out, lora_cfg=cfg, seeds={n: i for i, n in enumerate(names)}, init_std=0.5)
    return {n: out / n for n in names}


def _chat(tokenizer):
    return lambda p: tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True)


def test_mixed_batch_matches_adapter_by_adapter(tiny_model_dir, tmp_path):
    adapters = _adapters(tiny_model_dir, tmp_path)
    tokenizer, model = load_base(tiny_model_dir)
    model = attach_adapters(model, adapters)
    plan = prompts.scaffolded_plan("Write f.", prompts.proposer_steps("code_o", 10), _chat(tokenizer))
    kwargs = dict(temperature=0, top_p=1.0, max_new_tokens=8, batch_size=8, seed=0)
    mixed = run_plans(model, tokenizer, [GenRow(plan, "a"), GenRow(plan, "b"), GenRow(plan, None)], **kwargs)
    alone = {}
    for name in ("a", "b"):
        model.set_adapter(name)
        alone[name] = run_plans(model, tokenizer, [GenRow(plan, name)], **kwargs)[0].completion
    assert mixed[0].completion == alone["a"] and mixed[1].completion == alone["b"]
    assert mixed[0].completion != mixed[1].completion, "different adapters should generate differently"
    assert all(r.segments[0]["text"] == plan.prompt and not r.segments[0]["train"] for r in mixed)
    assert all(r.completion.startswith("```python\ndef f(") for r in mixed)


def test_segments_mask_only_sampled_tokens(tiny_model_dir):
    tokenizer, _ = load_base(tiny_model_dir)
    encoded = encode_segments(tokenizer, [{"text": "prompt", "train": False}, {"text": "def", "train": True}], 100)
    n_prompt = len(tokenizer("prompt", add_special_tokens=False)["input_ids"])
    assert encoded.train_mask[:n_prompt] == [0] * n_prompt and all(encoded.train_mask[n_prompt:])


def test_update_changes_only_the_trained_adapter(tiny_model_dir, tmp_path):
    adapters = _adapters(tiny_model_dir, tmp_path)
    tokenizer, model = load_base(tiny_model_dir)
    tokenizer.padding_side = "right"
    base_before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model = attach_adapters(model, adapters, trainable="a")
    lora_before = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" in n}
    rollouts = [
        {"segments": [{"text": "task one", "train": False}, {"text": " answer x", "train": True}], "advantage": 1.0},
        {"segments": [{"text": "task two", "train": False}, {"text": " answer y", "train": True}], "advantage": -1.0},
        {"segments": [{"text": "task three", "train": False}, {"text": " z", "train": True}], "advantage": 0.0},
    ]
    accelerator = Accelerator(cpu=True)
    stats = reinforce_steps(accelerator, model, tokenizer, "a", rollouts, steps=2, lr=1e-2, weight_decay=0.0,
                            micro_batch=1, max_grad_norm=1.0, max_seq_len=64, optimizer_file=None,
                            optimizer_out=tmp_path / "opt.safetensors")
    assert stats["optimizer_steps"] == 2 and stats["rollouts_with_signal"] == 2
    after = dict(model.named_parameters())
    for name, before in lora_before.items():
        changed = not torch.equal(before, after[name].detach())
        if ".a." in name and "lora_A" in name:
            assert changed, f"{name} did not change"
        if ".b." in name:
            assert not changed, f"{name} of the other adapter changed"
    base = model.get_base_model()
    for name, parameter in base.named_parameters():
        if "lora_" not in name:
            key = name.replace(".base_layer", "")
            assert torch.equal(parameter, base_before[key]), f"base weight {name} changed"
    assert (tmp_path / "opt.safetensors").is_file()

    # The update stage trains every adapter of one loaded model in turn: the second one (loaded
    # as not trainable) must train too, and leave the first one as it now is.
    a_after = {n: p.detach().clone() for n, p in model.named_parameters() if ".a." in n and "lora_" in n}
    b_before = {n: p.detach().clone() for n, p in model.named_parameters() if ".b." in n and "lora_" in n}
    stats = reinforce_steps(accelerator, model, tokenizer, "b", rollouts, steps=1, lr=1e-2, weight_decay=0.0,
                            micro_batch=2, max_grad_norm=1.0, max_seq_len=64, optimizer_file=None,
                            optimizer_out=tmp_path / "opt_b.safetensors")
    now = dict(model.named_parameters())
    assert stats["optimizer_steps"] == 1
    assert any(not torch.equal(v, now[n].detach()) for n, v in b_before.items())
    assert all(torch.equal(v, now[n].detach()) for n, v in a_after.items())


def test_saved_adapter_roundtrips(tiny_model_dir, tmp_path):
    adapters = _adapters(tiny_model_dir, tmp_path, names=("a",))
    state = read_state_dict(adapters["a"])
    assert any("lora_B" in k for k in state) and all(v.dtype == torch.float32 for v in state.values())


def test_cut_at_the_earliest_stop_keeping_a_leading_line_break():
    assert _cut("a\nb```c", (prompts.FENCE,)) == ("a\nb", False)
    # a stop that starts with a line break ends the line before it; the next prefill starts fresh
    assert _cut("    return x\ndef f(y):", prompts.PROGRAM_STOPS) == ("    return x\n", False)
    assert _cut("[1, 2]\n```", prompts.INPUT_STOPS) == ("[1, 2]\n", False)
    assert _cut("no stop here", (prompts.FENCE,)) == ("no stop here", True)
    assert _cut("until EOS", ()) == ("until EOS", False)


def test_rows_with_different_stops_do_not_stop_each_other(tiny_model_dir):
    # generate() ends a row at any stop string of its batch: rows must be batched by their stops
    tokenizer, model = load_base(tiny_model_dir)
    kwargs = dict(temperature=0, top_p=1.0, max_new_tokens=12, batch_size=8, seed=0)
    plans = [prompts.Plan("Write a list.", (prompts.Step("```input\n", stop=stop),)) for stop in (prompts.FENCE, "\n")]
    together = run_plans(model, tokenizer, [GenRow(plan, None) for plan in plans], **kwargs)
    alone = [run_plans(model, tokenizer, [GenRow(plan, None)], **kwargs)[0] for plan in plans]
    assert [r.completion for r in together] == [r.completion for r in alone]
    assert alone[0].completion != alone[1].completion, "the stops should matter for this model's greedy output"


def test_non_empty_step_never_opens_with_a_block_ender(tiny_model_dir):
    tokenizer, model = load_base(tiny_model_dir)
    enders = set(block_enders(tokenizer))
    assert tokenizer.eos_token_id in enders
    assert all(tokenizer.decode([i]).strip(" \t") == "" or tokenizer.decode([i]).lstrip(" \t")[0] in "`\r\n"
               for i in enders if i not in tokenizer.all_special_ids)
    plan = prompts.Plan("Give an input.", (prompts.Step("```input\n", stop=prompts.INPUT_STOPS, max_tokens=4, non_empty=True),))
    results = run_plans(model, tokenizer, [GenRow(plan, None)] * 16, temperature=1.5, top_p=1.0, max_new_tokens=4,
                        batch_size=16, seed=3)
    pieces = [r.segments[-1]["text"] for r in results]
    assert all(piece.strip(" \t") and piece.lstrip(" \t")[0] not in "`\r\n" for piece in pieces), pieces
