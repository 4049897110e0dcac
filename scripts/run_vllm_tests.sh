#!/usr/bin/env bash
# The vLLM lane of the test command (scripts/run_tests.sh runs it beside the main suite): builds
# .venv-vllm (scripts/setup_vllm_env.sh) and runs the tests marked `vllm` there, the `vllm` engine
# against the `hf` reference on a tiny model and one tiny pipeline run with engine: vllm.
# POPULORA_REQUIRE_VLLM=1: a vLLM that fails to import fails these tests instead of skipping them.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! bash scripts/setup_vllm_env.sh; then
  echo "building .venv-vllm failed (scripts/setup_vllm_env.sh: its output above)" >&2
  exit 1
fi
# never a stage host (tests/conftest.py) here: vLLM's engine starts processes and threads of its own
export PATH="$PWD/.venv-vllm/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" POPULORA_REQUIRE_VLLM=1 \
  POPULORA_TEST_STAGE_HOST=0
.venv-vllm/bin/python -m pytest -m vllm -p no:cacheprovider "$@"
