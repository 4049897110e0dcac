"""The `vllm` generation engine against the `hf` reference, for real, on CPU (the vLLM CPU build).

Run in the vLLM lane (`bash scripts/run_vllm_tests.sh`: .venv-vllm, `-m vllm`); in the main
environment vLLM is not installed and these are skipped, saying so. With POPULORA_REQUIRE_VLLM=1
(the lane sets it) a missing vLLM fails instead of skipping, so CI cannot pass without running them.

A tiny random Llama with head size 32 (vLLM's CPU attention has no smaller kernel), float32, two
random rank-4 adapters on q/v: greedy plans give the same tokens on both engines, every row goes
through its own adapter, sampled tokens carry the log-probability the update computes.
"""

from __future__ import annotations

import os

import pytest
import torch

pytestmark = pytest.mark.vllm

if os.environ.get("POPULORA_REQUIRE_VLLM") != "1":
    pytest.importorskip("vllm", reason="vLLM is not installed here: run `bash scripts/run_vllm_tests.sh`")

from populora.lm.adapters import create_adapters  # noqa: E402
from populora.lm.model import load_base, lora_config  # noqa: E402
from populora.lm.multilora import attach_multilora  # noqa: E402
from populora.lm.sampling import GenRow, block_enders, process_logits, run_plans  # noqa: E402
from populora.tasks import prompts  # noqa: E402


@pytest.fixture(scope="module")
def vllm_model(tmp_path_factory):
    from tests.tiny_model import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny-vllm") / "model", hidden_size=64, heads=2)


@pytest.fixture(scope="module")
def adapters(vllm_model, tmp_path_factory):
    _, model = load_base(vllm_model)
    out = tmp_path_factory.mktemp("vllm-adapters")
    names = ("a", "b")
    create_adapters(
        model,
        list(names),
        out,
        lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"]),
        seeds={n: i for i, n in enumerate(names)},
        init_std=0.5,
    )
    return {n: out / n for n in names}


@pytest.fixture(scope="module")
def hf(vllm_model, adapters):
    tokenizer, model = load_base(vllm_model, device="cpu")
    return tokenizer, attach_multilora(model, {n: str(p) for n, p in adapters.items()})


@pytest.fixture(scope="module")
def engine(vllm_model, adapters):
    from populora.lm.vllm_engine import VllmEngine

    return VllmEngine(vllm_model, adapters, dtype="float32", lora_rank=4, memory_fraction=0.15, max_model_len=1024)


def _chat(tokenizer):
    return lambda p: tokenizer.apply_chat_template(
        [{"role": "user", "content": p}], tokenize=False, add_generation_prompt=True
    )


def _plans(tokenizer):
    """A proposer plan (program, then non-empty input blocks with stops) and a solver-like one."""
    chat = _chat(tokenizer)
    return [
        prompts.scaffolded_plan("Write f.", prompts.proposer_steps("code_o", 10), chat),
        prompts.scaffolded_plan("Give inputs.", prompts.proposer_steps("code_f", 4), chat),
        prompts.Plan(prompt=chat("Answer."), steps=(prompts.Step("```output\n", max_tokens=12),)),
    ]


def _rows(tokenizer):
    return [GenRow(plan, adapter) for adapter in ("a", "b", None) for plan in _plans(tokenizer)]


def _generated(result) -> list[list[int]]:
    return [s["ids"] for s in result.segments if s["train"]]


def test_greedy_plans_equal_the_hf_engine(hf, engine):
    tokenizer, model = hf
    rows = _rows(tokenizer)
    kwargs = dict(temperature=0.0, top_p=1.0, max_new_tokens=16, batch_size=4, seed=0)
    ours = run_plans(model, tokenizer, rows, **kwargs)
    theirs = run_plans(engine, tokenizer, rows, **kwargs)
    for row, (a, b) in enumerate(zip(ours, theirs)):
        assert [s["text"] for s in a.segments] == [s["text"] for s in b.segments], row
        assert [s["ids"] for s in a.segments] == [s["ids"] for s in b.segments], row
        assert [s.get("keep") for s in a.segments] == [s.get("keep") for s in b.segments], row
        assert (a.truncated, a.tokens_generated) == (b.truncated, b.tokens_generated), row
        for sa, sb in zip(a.segments, b.segments):
            if sa["train"]:
                assert sb["sampling"] == sa["sampling"]
                assert sb["logprobs"] == pytest.approx(sa["logprobs"], abs=2e-3), row


def test_every_row_goes_through_its_own_adapter(hf, engine):
    tokenizer, _ = hf
    rows = _rows(tokenizer)
    kwargs = dict(temperature=0.0, top_p=1.0, max_new_tokens=16, batch_size=64, seed=0)
    mixed = run_plans(engine, tokenizer, rows, **kwargs)
    for adapter in ("a", "b", None):
        alone = run_plans(engine, tokenizer, [r for r in rows if r.adapter == adapter], **kwargs)
        assert [_generated(r) for r, row in zip(mixed, rows) if row.adapter == adapter] == [
            _generated(r) for r in alone
        ]
    # the adapters change the answers (else the routing above would prove nothing)
    per_adapter = {a: [_generated(r) for r, row in zip(mixed, rows) if row.adapter == a] for a in ("a", "b", None)}
    assert per_adapter["a"] != per_adapter["b"] and per_adapter["a"] != per_adapter[None]


def test_sampled_tokens_carry_the_updates_logprobs(hf, engine):
    """Temperature and top-p on: vLLM's recorded score of each sampled token is what
    process_logits (the update's function) gives on the hf model in the same context."""
    tokenizer, model = hf
    rows = _rows(tokenizer) * 2
    results = run_plans(engine, tokenizer, rows, temperature=0.8, top_p=0.9, max_new_tokens=16, batch_size=8, seed=3)
    again = run_plans(engine, tokenizer, rows, temperature=0.8, top_p=0.9, max_new_tokens=16, batch_size=8, seed=3)
    assert [_generated(r) for r in results] == [_generated(r) for r in again]  # seeded
    assert len({str(_generated(r)) for r in results}) > len(rows) // 2  # samples differ
    gaps = []
    for row, result in zip(rows, results):
        context: list[int] = []
        for segment in result.segments:
            if segment["train"] and segment["ids"]:
                ids = torch.tensor([context + segment["ids"]])
                with model.select([row.adapter]), torch.no_grad():
                    logits = model(input_ids=ids).logits[0, len(context) - 1 : -1]
                suppress = None
                if segment["sampling"]["suppress_first"]:
                    suppress = torch.zeros_like(logits, dtype=torch.bool)
                    suppress[0, segment["sampling"]["suppress_first"]] = True
                scores = process_logits(logits, 0.8, 0.9, suppress=suppress, keep=torch.tensor(segment["ids"]))
                ours = scores.gather(-1, torch.tensor(segment["ids"]).unsqueeze(-1)).squeeze(-1)
                gaps += (ours - torch.tensor(segment["logprobs"])).abs().tolist()
            context += segment["ids"][: segment.get("keep", len(segment["ids"]))]
    assert gaps and max(gaps) < 1e-2 and sum(gaps) / len(gaps) < 1e-3


def test_stops_budgets_and_first_token_suppression(hf, engine):
    tokenizer, _ = hf
    banned = block_enders(tokenizer)
    context = tokenizer(_chat(tokenizer)("Give inputs."), add_special_tokens=False)["input_ids"]
    rows = engine.sample_contexts(
        [context] * 6,
        budget=10,
        stops=("\n```",),
        suppress_first=banned,
        temperature=1.0,
        top_p=1.0,
        seed=5,
        adapters=["a", "b", None] * 2,
    )
    eos = set(engine.eos)
    for row in rows:
        assert 1 <= len(row.ids) <= 10 and len(row.logprobs) == len(row.ids)
        assert row.ids[0] not in banned
        text = tokenizer.decode(row.ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
        earlier = tokenizer.decode(row.ids[:-1], skip_special_tokens=True, clean_up_tokenization_spaces=False)
        assert "\n```" not in earlier  # it ends at the token that completes the stop, no later
        assert row.hit_eos == (row.ids[-1] in eos)
        assert len(row.ids) == 10 or row.hit_eos or "\n```" in text
