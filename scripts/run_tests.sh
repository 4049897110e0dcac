#!/usr/bin/env bash
# The test command: install (if needed), lint (ruff), then run every test (unit tests on a tiny random model,
# the hostile-code suite, the Snakemake smoke test of the whole DAG on tiny params), then the vLLM lane
# (scripts/run_vllm_tests.sh: the vllm engine on CPU in .venv-vllm). Plain `pytest` is the fast lane
# (pyproject's addopts leave out `slow`); `-m ""` here puts the slow tests back (a `-m` of the caller's wins).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/ruff check .          # the lint rules of pyproject.toml ([tool.ruff.lint])
.venv/bin/python -m pytest -m "" "$@"
# the vLLM lane: its own environment (.venv-vllm), the tests marked `vllm` (the vllm engine against hf,
# one tiny pipeline run with engine: vllm); POPULORA_SKIP_VLLM_LANE=1 leaves it out (a quick local run)
if [ "${POPULORA_SKIP_VLLM_LANE:-0}" != 1 ]; then
  bash scripts/run_vllm_tests.sh -q
fi
