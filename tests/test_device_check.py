"""A GPU run without a GPU stops before any model loads, naming the key and the fix (populora/lm/device.py).

    python -m pytest tests/test_device_check.py -q

The stage tests run the paper overlay (params/gpu-paper.yaml, LiveCodeBench left out: it needs the hub)
on this machine, which has no CUDA: propose and update exit with code 2 and the fix, having loaded nothing
(the base model folder they are given does not exist, so loading it would fail differently).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from populora.config import merge, parse_params
from populora.lm import device as device_module
from populora.lm.device import DeviceError, check_device

REPO = Path(__file__).resolve().parents[1]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the refusal cannot happen")


def paper_params() -> dict:
    raw = merge(yaml.safe_load((REPO / "params.yaml").read_text()),
                yaml.safe_load((REPO / "params" / "gpu-paper.yaml").read_text()))
    raw["bench"]["benchmarks"] = [b for b in raw["bench"]["benchmarks"] if b != "livecodebench"]
    return raw


def with_device(device: str, engine: str = "hf"):
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["model"]["device"], raw["sampler"]["engine"] = device, engine
    return parse_params(raw)


@no_cuda
def test_cuda_without_cuda_is_refused_with_the_fix():
    with pytest.raises(DeviceError) as error:
        check_device(with_device("cuda"))
    message = str(error.value)
    assert "model.device: cuda" in message and "scripts/setup_gpu_env.sh" in message and "model.device: cpu" in message


def test_cpu_and_auto_are_never_refused(monkeypatch):
    monkeypatch.setattr(device_module, "cuda_problem", lambda: pytest.fail("cpu/auto must not look for CUDA"))
    for device in ("cpu", "auto"):
        check_device(with_device(device, engine="vllm"))


def test_vllms_cpu_build_on_a_gpu_run_is_refused(monkeypatch):
    """CUDA is there, but the vLLM installed is the CPU build: the sampling stages stop, the update
    (which does not use vLLM) goes on."""
    monkeypatch.setattr(device_module, "cuda_problem", lambda: None)
    monkeypatch.setattr(device_module, "vllm_platform", lambda: "cpu")
    params = with_device("cuda", engine="vllm")
    with pytest.raises(DeviceError) as error:
        check_device(params)
    assert "sampler.engine: vllm" in str(error.value) and ".venv-gpu" in str(error.value)
    check_device(params, samples=False)
    monkeypatch.setattr(device_module, "vllm_platform", lambda: "cuda")
    check_device(params)


def test_a_missing_vllm_on_a_gpu_run_is_refused(monkeypatch):
    def missing():
        raise ImportError("No module named 'vllm'")

    monkeypatch.setattr(device_module, "cuda_problem", lambda: None)
    monkeypatch.setattr(device_module, "vllm_platform", missing)
    with pytest.raises(DeviceError, match="sampler.engine: vllm.*setup_gpu_env.sh"):
        check_device(with_device("cuda", engine="vllm"))


@no_cuda
@pytest.mark.parametrize("stage", ["propose", "update"])
def test_the_paper_overlay_on_a_machine_without_cuda_stops_before_loading(stage, tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(paper_params()))
    missing = tmp_path / "no-base-model"  # loading it would fail with another message
    flags = {"propose": ["--gen", "0", "--state", str(tmp_path / "state"), "--pairing", str(tmp_path / "p.json"),
                         "--proposals", str(tmp_path / "proposals.jsonl")],
             "update": ["--gen", "0", "--part", "0", "--state", str(tmp_path / "state"),
                        "--rollouts", str(tmp_path / "r.jsonl"), "--trained", str(tmp_path / "trained")]}[stage]
    env = {**os.environ, "PYTHONPATH": str(REPO), "POPULORA_GPUS": ""}
    result = subprocess.run([sys.executable, "-m", f"stages.{stage}", "--params", str(tmp_path / "params.yaml"),
                             "--arm", "population", "--base-model", str(missing), *flags,
                             "--claim-gpu"], cwd=tmp_path, env=env,  # as the DAG renders a GPU stage's command
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2, result.stderr[-3000:]
    assert "model.device: cuda asks for a GPU" in result.stderr and "Fix: run on a GPU node" in result.stderr
    assert "Traceback" not in result.stderr and "not a Hugging Face model folder" not in result.stderr
    assert not any(p.name in ("proposals.jsonl", "trained") for p in tmp_path.iterdir())
