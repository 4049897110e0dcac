#!/usr/bin/env bash
# The test command: install (if needed), lint (ruff), then run every test (unit tests on a tiny random model,
# the hostile-code suite, the Snakemake smoke test of the whole DAG on tiny params), then the vLLM lane
# (scripts/run_vllm_tests.sh: the vllm engine on CPU in .venv-vllm). Plain `pytest` is the fast lane
# (pyproject's addopts leave out `slow`); `-m ""` here puts the slow tests back (a `-m` of the caller's wins).
#
# Time (CI asks for under 30 minutes on 2 cores): the main suite runs on POPULORA_TEST_WORKERS pytest-xdist
# workers (default 2; 0 runs it in this process, one test after another), a test module at a time per
# worker (--dist loadfile: a module's fixtures, such as a whole tiny pipeline run, are built once), the
# longest modules first (tests/conftest.py). Much of the slow lane is one process waiting on another (DVC
# runs a stage at a time, SLURM polls), which a second worker fills. .venv-vllm is built (mostly
# downloading) while the main suite runs, not after it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
lane=1
[ "${POPULORA_SKIP_VLLM_LANE:-0}" = 1 ] && lane=0
if [ "$lane" = 1 ]; then
  vllm_log=$(mktemp)
  bash scripts/setup_vllm_env.sh > "$vllm_log" 2>&1 &
  vllm_setup=$!
  # a failed suite does not leave the install running: its pip (a child of the script) first, then the script.
  # Every command here must succeed: under `set -e` a failing one (pkill finds nothing once the install has
  # ended) makes the shell exit 1 from the trap, after every test has passed.
  trap '{ pkill -P "$vllm_setup" || true; kill "$vllm_setup" || true; } 2>/dev/null' EXIT
fi
.venv/bin/ruff check .          # the lint rules of pyproject.toml ([tool.ruff.lint])
workers=${POPULORA_TEST_WORKERS:-2}
.venv/bin/python -m pytest -m "" -n "$workers" --dist loadfile --no-loadscope-reorder "$@"
# the vLLM lane: its own environment (.venv-vllm), the tests marked `vllm` (the vllm engine against hf,
# one tiny pipeline run with engine: vllm); POPULORA_SKIP_VLLM_LANE=1 leaves it out (a quick local run)
if [ "$lane" = 1 ]; then
  if ! wait "$vllm_setup"; then
    echo "building .venv-vllm failed (scripts/setup_vllm_env.sh):" >&2
    tail -40 "$vllm_log" >&2
    exit 1
  fi
  rm -f "$vllm_log"
  bash scripts/run_vllm_tests.sh -q
fi
