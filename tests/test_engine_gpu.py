"""The GPU lane: the paper overlay's code paths on CUDA. Skipped, saying why, where CUDA is absent.

    bash scripts/setup_gpu_env.sh && .venv-gpu/bin/python -m pytest -m gpu -rs    # docs/gpu.md

On a tiny random model (no download): the hf engine in bf16 (rows routed to their adapters, the
recorded scores equal to the update's), the update in a bf16 model under Accelerate's bf16 autocast
(LoRA weights and Adam moments stay float32); with vLLM's CUDA build (.venv-gpu), our vLLM engine
against the hf engine (greedy parity in float32, the recorded log-prob gap of sampled tokens) and
lm-eval's `vllm` model with an adapter. Then a probe at Qwen2.5-7B's shape (perf/update_probe.py: random
bf16 weights built on the GPU, rank-16 LoRA on all 7 linear modules, the overlay's update settings) writes
torch.cuda.max_memory_allocated to perf/measured/ (MEASURED): commit that file. scripts/device_check.sh
runs this lane, the probe and perf/generation.py at the 7B shape in one go on a bare GPU machine.
"""

from __future__ import annotations

import json
import platform
from datetime import date
from pathlib import Path

import pytest
import torch
import yaml

from populora.config import UpdateSection, parse_params
from populora.lm.adapters import create_adapters
from populora.lm.model import attach_adapters, load_base, lora_config
from populora.lm.multilora import attach_multilora
from populora.lm.sampling import GenRow, run_plans
from populora.tasks import prompts

REPO = Path(__file__).resolve().parents[1]
MEASURED = REPO / "perf" / "measured"
NO_CUDA = "needs CUDA: " + (
    f"torch {torch.__version__} is a CPU build"
    if not torch.version.cuda
    else f"torch {torch.__version__} sees no CUDA device"
)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)]


def vllm_missing() -> str | None:
    """Why vLLM cannot run on CUDA here (None: it can)."""
    if not torch.cuda.is_available():
        return NO_CUDA
    try:
        from vllm.platforms import current_platform
    except ImportError as error:
        return f"vLLM's CUDA build is not installed ({error}): bash scripts/setup_gpu_env.sh"
    return None if current_platform.device_type == "cuda" else f"vLLM's platform is {current_platform.device_type}"


needs_vllm = pytest.mark.skipif(vllm_missing() is not None, reason=str(vllm_missing()))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from tests.tiny_model import tiny_model_dir

    return tiny_model_dir(tmp_path_factory.mktemp("tiny-gpu") / "model", hidden_size=64, heads=2)  # head size 32


@pytest.fixture(scope="module")
def adapters(model_dir, tmp_path_factory):
    _, cpu_model = load_base(model_dir, device="cpu")
    out = tmp_path_factory.mktemp("gpu-adapters")
    create_adapters(
        cpu_model,
        ["a", "b"],
        out,
        lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"]),
        seeds={"a": 0, "b": 1},
        init_std=0.5,
    )
    return {"a": out / "a", "b": out / "b"}


def _rows(tokenizer) -> list[GenRow]:
    def chat(p):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": p}],
            tokenize=False,
            add_generation_prompt=True,
        )

    plans = [
        prompts.scaffolded_plan("Write f.", prompts.proposer_steps("code_o", 10), chat),
        prompts.scaffolded_plan("Give inputs.", prompts.proposer_steps("code_f", 4), chat),
        prompts.Plan(prompt=chat("Answer."), steps=(prompts.Step("```output\n", max_tokens=12),)),
    ]
    return [GenRow(plan, adapter) for adapter in ("a", "b", None) for plan in plans]


def _generated(result) -> list[list[int]]:
    return [s["ids"] for s in result.segments if s["train"]]


def _score_gaps(model_dir, adapters, rows, results, *, dtype: str, mixed: bool) -> list[float]:
    """|recorded score - the update's score| of every sampled token (`rollout_sequences` +
    `selected_logprobs`, each row's adapter; under bf16 autocast with `mixed`)."""
    from populora.rl.update import rollout_sequences, selected_logprobs

    gaps = []
    for adapter in ("a", "b"):
        tokenizer, base = load_base(model_dir, dtype=dtype, device="cuda")
        model = attach_adapters(base, {adapter: adapters[adapter]}, trainable=adapter)
        for index, (row, result) in enumerate(zip(rows, results)):
            if row.adapter != adapter:
                continue
            sequences, _ = rollout_sequences(result.segments, index, max_len=1024)
            with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=mixed):
                ours = selected_logprobs(model, sequences, tokenizer.pad_token_id, torch.device("cuda")).tolist()
            recorded = [x for s in sequences for x in s.sampler_logprobs]
            gaps += [abs(a - b) for a, b in zip(ours, recorded)]
        del model, base
        torch.cuda.empty_cache()
    return gaps


def _record(name: str, test: str, payload: dict) -> Path:
    """Write a measurement to MEASURED/<name>.json with the device, versions and test it came from."""
    import transformers

    MEASURED.mkdir(parents=True, exist_ok=True)
    path = MEASURED / f"{name}.json"
    path.write_text(
        json.dumps(
            {
                "date": date.today().isoformat(),
                "device": torch.cuda.get_device_name(0),
                "host": platform.node(),
                "torch": torch.__version__,
                "cuda": torch.version.cuda,
                "transformers": transformers.__version__,
                "command": f"python -m pytest tests/test_engine_gpu.py -m gpu -k {test}",
                **payload,
            },
            indent=1,
        )
        + "\n"
    )
    return path


def test_hf_engine_in_bf16(model_dir, adapters):
    """Mixed-adapter batches in bf16: each row through its own adapter (greedy, mixed = alone), and
    sampled tokens carry the update's own score of them (bf16 both sides, KV cache vs one forward)."""
    tokenizer, model = load_base(model_dir, dtype="bfloat16", device="cuda")
    model = attach_multilora(model, {n: str(p) for n, p in adapters.items()})
    rows = _rows(tokenizer)
    greedy = dict(temperature=0.0, top_p=1.0, max_new_tokens=16, batch_size=16, seed=0)
    mixed = run_plans(model, tokenizer, rows, **greedy)
    for adapter in ("a", "b", None):
        alone = run_plans(model, tokenizer, [r for r in rows if r.adapter == adapter], **greedy)
        assert [_generated(r) for r, row in zip(mixed, rows) if row.adapter == adapter] == [
            _generated(r) for r in alone
        ]
    sampled = run_plans(model, tokenizer, rows, temperature=0.8, top_p=0.95, max_new_tokens=16, batch_size=16, seed=0)
    assert all(r.tokens_generated > 0 for r in sampled)
    del model
    torch.cuda.empty_cache()
    gaps = _score_gaps(model_dir, adapters, rows, sampled, dtype="bfloat16", mixed=False)
    assert gaps and sum(gaps) / len(gaps) < 0.05, (max(gaps), sum(gaps) / len(gaps))


def test_update_with_bf16_autocast_through_accelerate(model_dir, adapters, tmp_path):
    """The overlay's update: bf16 weights, `update.mixed_precision: bf16` (Accelerate's autocast),
    gradient checkpointing; adapter `a` trains, its LoRA weights and Adam moments stay float32."""
    from accelerate import Accelerator
    from safetensors.torch import load_file

    from populora.rl.update import reinforce_steps

    tokenizer, model = load_base(model_dir, dtype="bfloat16", device="cuda")
    sampler = attach_multilora(model, {n: str(p) for n, p in adapters.items()})
    rows = [row for row in _rows(tokenizer) if row.adapter == "a"]
    results = run_plans(sampler, tokenizer, rows, temperature=0.8, top_p=0.95, max_new_tokens=16, batch_size=8, seed=0)
    del sampler, model
    tokenizer, model = load_base(model_dir, dtype="bfloat16", device="cuda")
    tokenizer.padding_side = "right"
    model = attach_adapters(model, adapters, trainable="a")
    lora = {n: p for n, p in model.named_parameters() if "lora_" in n}
    before = {n: p.detach().clone() for n, p in lora.items()}
    assert all(p.dtype == torch.float32 for p in lora.values())  # PEFT keeps adapter weights fp32
    accelerator = Accelerator(mixed_precision="bf16")
    model = accelerator.prepare_model(model)
    rollouts = [
        {"role": "solve", "segments": r.segments, "advantage": adv, "reward": None}
        for r, adv in zip(results, [1.0, -1.0, 1.0])
    ]
    config = UpdateSection(
        steps=1,
        learning_rate=1e-2,
        micro_batch=2,
        max_seq_len=1024,
        max_tokens_per_micro_batch=1024,
        gradient_checkpointing=True,
        mixed_precision="bf16",
    )
    stats = reinforce_steps(
        accelerator,
        model,
        tokenizer,
        "a",
        rollouts,
        config,
        optimizer_file=None,
        optimizer_out=tmp_path / "opt.safetensors",
    )
    assert stats["optimizer_steps"] == 1, stats
    after = dict(accelerator.unwrap_model(model).named_parameters())
    changed = {n for n, v in before.items() if not torch.equal(v, after[n].detach())}
    assert changed and all(".a." in n for n in changed), changed  # only adapter a moved
    assert all(after[n].dtype == torch.float32 for n in before)
    moments = load_file(tmp_path / "opt.safetensors")
    assert moments and all(t.dtype == torch.float32 and torch.isfinite(t).all() for t in moments.values())


@pytest.fixture(scope="module")
def vllm_engine(model_dir, adapters):
    from populora.lm.vllm_engine import VllmEngine

    return VllmEngine(
        model_dir, adapters, dtype="float32", lora_rank=4, memory_fraction=0.3, max_model_len=1024, enforce_eager=False
    )  # CUDA graphs, as the overlays


@needs_vllm
def test_vllm_on_cuda_matches_the_hf_engine_and_records_the_updates_scores(model_dir, adapters, vllm_engine):
    tokenizer, model = load_base(model_dir, dtype="float32", device="cuda")
    model = attach_multilora(model, {n: str(p) for n, p in adapters.items()})
    rows = _rows(tokenizer)
    greedy = dict(temperature=0.0, top_p=1.0, max_new_tokens=16, batch_size=16, seed=0)
    ours, theirs = run_plans(model, tokenizer, rows, **greedy), run_plans(vllm_engine, tokenizer, rows, **greedy)
    same = sum(_generated(a) == _generated(b) for a, b in zip(ours, theirs))
    del model
    torch.cuda.empty_cache()
    sampled = run_plans(
        vllm_engine, tokenizer, rows, temperature=0.8, top_p=0.9, max_new_tokens=16, batch_size=16, seed=3
    )
    gaps = _score_gaps(model_dir, adapters, rows, sampled, dtype="float32", mixed=False)
    _record(
        "vllm_cuda_logprob_gap",
        "test_vllm_on_cuda",
        {
            "what": "tiny random Llama (hidden 64, head size 32), 2 rank-4 adapters, float32 both sides, CUDA graphs",
            "greedy_rows_equal": same,
            "rows": len(rows),
            "sampled_tokens": len(gaps),
            "gap_mean": sum(gaps) / len(gaps),
            "gap_max": max(gaps),
        },
    )
    assert same == len(rows)
    assert sum(gaps) / len(gaps) < 1e-3 and max(gaps) < 2e-2


@needs_vllm
def test_lmeval_vllm_model_with_an_adapter(model_dir, adapters, tmp_path):
    """lm-eval's own `vllm` model (math benchmarks), an adapter as its LoRA request, every request at once."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from populora.bench.lmeval import evaluate_jsonable
    from populora.lm.engines import pick_sampler

    data = tmp_path / "data" / "math" / "gsm8k"
    data.mkdir(parents=True)
    data.joinpath("test.jsonl").write_text(
        "".join(
            json.dumps({"question": q, "answer": a, "idx": i}) + "\n"
            for i, (q, a) in enumerate(
                [("What is 2 + 3?", "2 + 3 = 5\n#### 5"), ("What is 4 x 2?", "4 x 2 = 8\n#### 8")]
            )
        )
    )
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["sampler"].update(engine="vllm", memory_fraction=0.3, enforce_eager=False)
    raw["lora"]["rank"], raw["update"]["max_seq_len"] = 4, 1024
    settings = pick_sampler(parse_params(raw)).lmeval_vllm_args()
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:  # as the bench stage
        results = pool.submit(
            evaluate_jsonable,
            "gsm8k",
            base_model=model_dir,
            adapter=adapters["a"],
            data_dir=tmp_path / "data",
            limit=2,
            max_new_tokens=16,
            batch_size=64,
            dtype="float32",
            device="cuda",
            harness_dir=tmp_path / "harness",
            vllm=settings,
        ).result()
    assert results["config"]["model"] == "vllm"
    assert results["config"]["model_args"]["lora_local_path"] == str(adapters["a"])
    assert len(results["samples"]["populora_gsm8k"]) == 2


@pytest.mark.slow
def test_update_probe_at_7b_shape():
    """Peak GPU memory of the overlay's update at Qwen2.5-7B's shape (random weights): bf16 weights,
    rank-16 LoRA on all 7 linear modules (fp32), bf16 autocast, checkpointing, 8,192 tokens per
    micro-batch as 8 x 1,024 and as 1 x 8,192 (update.max_seq_len): perf/update_probe.py, which
    writes MEASURED/update_probe_7b.json (scripts/device_check.sh runs it too)."""
    import sys

    sys.path.insert(0, str(REPO / "perf"))
    import update_probe

    path = MEASURED / "update_probe_7b.json"
    assert update_probe.main(["--shape", "qwen2-7b", "--device", "cuda", "--json", str(path)]) == 0
    print(path.read_text())
    runs = json.loads(path.read_text())["runs"]
    assert all(run["optimizer_steps"] == 1 for run in runs)
    assert all(
        run["max_memory_allocated_bytes"] < 0.9 * torch.cuda.get_device_properties(0).total_memory for run in runs
    )
