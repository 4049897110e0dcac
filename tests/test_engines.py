"""The generation engine is picked once: `populora.lm.engines.pick_sampler` reads `sampler.engine`,
and stages and benchmarks pass on what it returns."""

from __future__ import annotations

import re

from populora.bench.settings import settings_for
from populora.config import parse_params
from populora.lm.dtype import resolve_dtype
from populora.lm.engines import HfSampler, VllmSampler, pick_sampler
from tests.conftest import REPO


def test_hf_is_the_default_and_brings_no_vllm_settings():
    params = parse_params({"bench": {"data_dir": None}})
    sampler = pick_sampler(params)
    # model.dtype: auto, resolved once here (bfloat16 on a CPU with avx512_bf16 or AMX)
    assert sampler == HfSampler(dtype=resolve_dtype("auto", "cpu")[0], device="cpu") and sampler.name == "hf"
    assert sampler.lmeval_vllm_args() is None  # math: lm-eval's hf model and the stacked one


def test_vllm_carries_its_engine_settings_and_lm_evals():
    params = parse_params(
        {
            "bench": {"data_dir": None},
            "lora": {"rank": 4},
            "sampler": {"engine": "vllm", "memory_fraction": 0.2, "max_num_seqs": 64},
        }
    )
    sampler = pick_sampler(params)
    assert isinstance(sampler, VllmSampler) and sampler.name == "vllm"
    assert (sampler.dtype, sampler.lora_rank, sampler.memory_fraction, sampler.max_num_seqs) == (
        resolve_dtype("auto", "cpu")[0],
        4,
        0.2,
        64,
    )
    assert sampler.lmeval_vllm_args() == {
        "gpu_memory_utilization": 0.2,
        "enforce_eager": True,
        "max_num_seqs": 64,
        "max_lora_rank": 8,  # vLLM's smallest compiled rank above 4
        "max_model_len": params.update.max_seq_len,
    }


def test_bench_settings_carry_the_picked_sampler_not_the_params():
    params = parse_params({"bench": {"data_dir": None}, "sampler": {"engine": "vllm"}})
    settings = settings_for(params, "gsm8k")
    assert settings.sampler == pick_sampler(params)
    assert not any(isinstance(value, type(params)) for value in vars(settings).values())


def test_only_pick_sampler_reads_sampler_engine():
    """... and the params' validation, which checks token budgets against vLLM's window before any work
    (`populora.config.Params._token_budgets_fit_the_window`), and the DAG's topology, which runs no benchmark
    in the together job on vLLM (`populora.core.topology.runs_together`); they pick and load nothing."""
    readers = []
    for path in [*(REPO / "populora").rglob("*.py"), *(REPO / "stages").glob("*.py")]:
        code = re.sub(r'"""[\s\S]*?"""', "", path.read_text())  # docstrings may name the key
        code = re.sub(r"#.*", "", code)
        code = re.sub(r"\"[^\"\n]*\"", '""', code)  # and messages that tell the user which key to set
        if re.search(r"\bsampler\.engine\b|\.engine\s*==", code):
            readers.append(path.relative_to(REPO).as_posix())
    assert sorted(readers) == ["populora/config.py", "populora/core/topology.py", "populora/lm/engines.py"]
