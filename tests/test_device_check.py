"""A GPU run without a GPU stops before any model loads, naming the key and the fix (populora/lm/device.py);
and the GPU check (scripts/device_check.sh) runs, in its CPU dry mode, on this machine made to look like the
GPU machine's image.

    python -m pytest -m "" -n 0 tests/test_device_check.py -q

The stage tests run the paper overlay (params/gpu-paper.yaml, LiveCodeBench left out: it needs the hub)
on this machine, which has no CUDA: propose and update exit with code 2 and the fix, having loaded nothing
(the base model folder they are given does not exist, so loading it would fail differently).

The device check's tests hide every installed distribution the device image lacks
(tests/fixtures/device_image/sitecustomize.py, scripts/device_image.txt): the wheels of
scripts/device_wheels.txt must be all the check needs beyond the image, and `device_check.sh --cpu` must
pass with them, counted as installed (offline) or downloaded by scripts/prepare_device_wheels.sh for this
interpreter and installed as on the device (`network`).
"""

from __future__ import annotations

import json
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
    raw = merge(
        yaml.safe_load((REPO / "params.yaml").read_text()),
        yaml.safe_load((REPO / "params" / "gpu-paper.yaml").read_text()),
    )
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
    flags = {
        "propose": [
            "--gen",
            "0",
            "--state",
            str(tmp_path / "state"),
            "--pairing",
            str(tmp_path / "p.json"),
            "--proposals",
            str(tmp_path / "proposals.jsonl"),
        ],
        "update": [
            "--gen",
            "0",
            "--part",
            "0",
            "--state",
            str(tmp_path / "state"),
            "--rollouts",
            str(tmp_path / "r.jsonl"),
            "--trained",
            str(tmp_path / "trained"),
        ],
    }[stage]
    env = {**os.environ, "PYTHONPATH": str(REPO), "POPULORA_GPUS": ""}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            f"stages.{stage}",
            "--params",
            str(tmp_path / "params.yaml"),
            "--arm",
            "population",
            "--base-model",
            str(missing),
            *flags,
            "--claim-gpu",
        ],
        cwd=tmp_path,
        env=env,  # as the DAG renders a GPU stage's command
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "model.device: cuda asks for a GPU" in result.stderr and "Fix: run on a GPU node" in result.stderr
    assert "Traceback" not in result.stderr and "not a Hugging Face model folder" not in result.stderr
    assert not any(p.name in ("proposals.jsonl", "trained") for p in tmp_path.iterdir())


# ---------------------------------------------------------------- scripts/device_check.sh on an emulated device image

IMAGE_HOOK = REPO / "tests" / "fixtures" / "device_image"
WHEELS_LIST = REPO / "scripts" / "device_wheels.txt"


def _listed(path: Path) -> set[str]:
    import re

    return {
        re.sub(r"[-_.]+", "-", line.split("#")[0].strip()).lower()
        for line in path.read_text().splitlines()
        if line.split("#")[0].strip()
    }


def _image_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DEVICE_IMAGE_WHEELS", "DEVICE_IMAGE_ALLOW")}
    return {**env, "PYTHONPATH": str(IMAGE_HOOK), "PYTHON": sys.executable, **extra}


def test_the_wheel_list_holds_what_it_needs_and_the_image_lacks():
    """Every listed distribution is pinned in requirements.lock, and what each requires (as installed here,
    extras left out) is in the image or the list: pip installs them there with --no-deps."""
    import re
    from importlib.metadata import requires

    from packaging.requirements import Requirement

    image, wheels = _listed(REPO / "scripts" / "device_image.txt"), _listed(WHEELS_LIST)
    lock = {
        re.sub(r"[-_.]+", "-", line.split("==")[0]).lower()
        for line in (REPO / "requirements.lock").read_text().splitlines()
        if "==" in line
    }
    assert wheels <= lock and not wheels & image
    device = {"python_version": "3.12", "python_full_version": "3.12.3", "extra": ""}  # the machine's python3
    for name in wheels:
        wanted = [Requirement(r) for r in requires(name) or []]
        needed = {re.sub(r"[-_.]+", "-", r.name).lower() for r in wanted if not r.marker or r.marker.evaluate(device)}
        assert needed <= image | wheels, (name, needed - image - wheels)


def test_the_emulated_image_hides_what_the_device_lacks():
    probe = "import yaml, torch, transformers, peft, accelerate, pytest\ntry:\n import {0}\nexcept ImportError:\n print('hidden')"
    for name, wheels in (("pydantic", ""), ("dvc", ""), ("radon", ""), ("pydantic", str(WHEELS_LIST))):
        env = _image_env(**({"DEVICE_IMAGE_WHEELS": wheels} if wheels else {}))
        out = subprocess.run(
            [sys.executable, "-c", probe.format(name)], env=env, capture_output=True, text=True, timeout=300
        )
        assert out.returncode == 0, out.stderr[-2000:]
        assert (out.stdout.strip() == "hidden") == (not wheels), (name, wheels, out.stdout)


def _device_check(tmp_path: Path, env: dict, wheels: Path | None) -> dict:
    out = tmp_path / "out"
    result = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "device_check.sh"),
            "--cpu",
            "--out",
            str(out),
            "--wheels",
            str(wheels or tmp_path / "no-wheels"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    record = json.loads((out / "device_check.json").read_text())
    assert result.returncode == 0, (result.stdout[-3000:], (out / "device_check.log").read_text()[-6000:])
    assert record["passed"] and record["mode"] == "cpu"
    steps = {step["name"]: step for step in record["steps"]}
    assert {"imports", "pytest", "generation", "probe"} <= set(steps)
    assert "skipped" in steps["pytest"]["output_tail"]  # no CUDA here: the GPU lane collects, then skips
    generation = json.loads((out / "generation_7b_bf16.json").read_text())
    assert generation["dtype"] == "bfloat16" and {"base", "mixed"} <= set(generation["tok_s"])
    probe = json.loads((out / "update_probe_7b.json").read_text())
    assert [run["optimizer_steps"] for run in probe["runs"]] == [1, 1]
    return record


@pytest.mark.slow  # the check's four steps on the tiny shape (~1 min idle)
def test_the_device_check_passes_on_the_emulated_image(tmp_path):
    _device_check(tmp_path, _image_env(DEVICE_IMAGE_WHEELS=str(WHEELS_LIST)), wheels=None)


@pytest.mark.slow
@pytest.mark.network
def test_the_prepared_wheels_install_and_carry_the_check(tmp_path):
    """scripts/prepare_device_wheels.sh for the device (CPython 3.12: under its size cap) and for this
    interpreter, whose wheels the check installs with pip --no-index --target, as on the device."""
    wheels = tmp_path / "wheels"
    here = f"{sys.version_info.major}.{sys.version_info.minor}"
    for version in ("3.12", here):
        made = subprocess.run(
            ["bash", str(REPO / "scripts" / "prepare_device_wheels.sh"), str(wheels)],
            env={**os.environ, "PYTHON": sys.executable, "PYTHON_VERSION": version},
            capture_output=True,
            text=True,
            timeout=600,
        )
        if made.returncode and ("Could not find" in made.stderr or "connection" in made.stderr.lower()):
            pytest.skip(f"no package registry answered: {made.stderr[-500:]}")
        assert made.returncode == 0, made.stderr[-3000:]
        assert len(list(wheels.glob("*.whl"))) == len(_listed(WHEELS_LIST))
    record = _device_check(tmp_path, _image_env(), wheels=wheels)
    assert record["wheels"] and record["steps"][0]["name"] == "wheels" and record["steps"][0]["exit"] == 0
