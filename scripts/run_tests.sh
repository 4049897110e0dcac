#!/usr/bin/env bash
# The test command: install (if needed), lint (ruff, mypy), then run every test (unit tests on a tiny random model,
# the hostile-code suite, the Snakemake smoke test of the whole DAG on tiny params) and, beside them, the
# vLLM lane (scripts/run_vllm_tests.sh: the vllm engine on CPU in .venv-vllm). Plain `pytest` is the fast lane
# (pyproject's addopts leave out `slow`); `-m ""` here puts the slow tests back (a `-m` of the caller's wins).
#
# Time (CI asks for under 30 minutes on 2 cores): the main suite runs on POPULORA_TEST_WORKERS pytest-xdist
# workers (default 2; 0 runs it in this process, one test after another), a test module at a time per
# worker (--dist loadfile: a module's fixtures, such as a whole tiny pipeline run, are built once), the
# longest modules first (tests/conftest.py). Much of the slow lane is one process waiting on another (DVC
# runs a stage at a time, SLURM polls), which a second worker fills, and the vLLM lane (its install, mostly
# downloading, then its tests) runs while the main suite does, not after it. A third worker is slower (33 min
# 17 s against 30 min 7 s, docs/measurements.md 2026-11-29): with the lane beside, two workers keep the two
# cores busy, and most of a tiny pipeline's CPU is its stages starting Python (torch, transformers, PEFT).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
lane=1
[ "${POPULORA_SKIP_VLLM_LANE:-0}" = 1 ] && lane=0
if [ "$lane" = 1 ]; then
  # the vLLM lane (its own environment .venv-vllm, the tests marked `vllm`: the vllm engine against hf,
  # one tiny pipeline run with engine: vllm) runs beside the main suite, its output kept for the end:
  # the main suite leaves about a fifth of two cores idle (a DVC or SLURM run waiting on its stages),
  # which the lane fills. POPULORA_SKIP_VLLM_LANE=1 leaves it out (a quick local run).
  lane_log=$(mktemp) lane_tmp=$(mktemp -d)
  # a session of its own (setsid), so that one kill stops it all: the install's pip, or pytest and the
  # pipeline it runs. A --basetemp of its own: two pytest sessions at once must not clean up each other's.
  setsid bash scripts/run_vllm_tests.sh -q --basetemp "$lane_tmp/pytest" > "$lane_log" 2>&1 &
  lane_pid=$!
  # a failed suite does not leave the lane running. `|| true`: under `set -e` a failing command here (the
  # lane has ended: nothing to kill) makes the shell exit 1 from the trap, after every test has passed.
  trap 'kill -- -"$lane_pid" 2>/dev/null || true' EXIT
fi
.venv/bin/ruff format --check .   # code as the formatter lays it out ([tool.ruff], line-length 120)
.venv/bin/ruff check .          # the lint rules of pyproject.toml ([tool.ruff.lint]), unused noqa included (RUF100)
.venv/bin/mypy                  # the type checker on populora/ ([tool.mypy] of pyproject.toml: the pydantic plugin)
.venv/bin/snakefmt --check Snakefile   # [tool.snakefmt] of pyproject.toml
# snakemake --lint: clean but for one finding, justified: "Specify a conda environment or container for each
# rule". Every rule runs in the one environment scripts/setup_env.sh builds (torch, PEFT, lm-eval pinned in
# requirements.lock); a conda env per rule would install torch once per rule and could drift from the lock.
lint_status=0
lint=$(.venv/bin/snakemake --lint 2>&1) || lint_status=$?
findings=$(grep -E '^ +\* ' <<<"$lint" | grep -v 'Specify a conda environment or container for each rule' || true)
# a finding of another kind, or a failure that is no lint at all (the Snakefile does not load)
if [ -n "$findings" ] || { [ "$lint_status" != 0 ] && ! grep -q "Lints for rule" <<<"$lint"; }; then
  echo "snakemake --lint:" >&2; echo "$lint" >&2; exit 1
fi
workers=${POPULORA_TEST_WORKERS:-2}
# --durations: the 40 slowest tests' times at the end of every run, the figures LONGEST_MODULES
# (tests/conftest.py) and any work on the suite's time start from
.venv/bin/python -m pytest -m "" -n "$workers" --dist loadfile --no-loadscope-reorder --durations=40 "$@"
if [ "$lane" = 1 ]; then
  lane_status=0
  wait "$lane_pid" || lane_status=$?
  if [ "$lane_status" = 0 ]; then
    echo "--- the vLLM lane (scripts/run_vllm_tests.sh, beside the main suite):"; cat "$lane_log"
  else
    echo "--- the vLLM lane failed (exit $lane_status):" >&2; cat "$lane_log" >&2
  fi
  rm -rf "$lane_log" "$lane_tmp"
  exit "$lane_status"
fi
