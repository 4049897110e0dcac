#!/usr/bin/env bash
# The main job: install (if needed), then run the whole DAG with Snakemake on the embedded
# SmolLM2-135M-Instruct: both arms, every generation, benchmarks on the CPU subset.
# Extra arguments go to snakemake (e.g. -n for a dry run, or a target file).
#
# On the CPU with the transformers sampler, the model stages run in a stage host (populora/core/stagehost/):
# one process imports torch, transformers and PEFT once and forks each `python -m stages.<name>`, where each
# would spend ~7 s of CPU importing them. POPULORA_STAGE_HOST=off runs every stage in its own process; a
# socket path there uses a host of your own. Not started for vLLM, a GPU run or a cluster executor.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/python -m populora.config params.yaml
.venv/bin/python -m workflow.render_dvc --check

# jobs run here, on this machine's CPU, by the transformers sampler: what a host can stand in for
local_cpu_run() {
  local arg
  for arg in "$@"; do
    case "$arg" in --profile* | --executor* | -e | --slurm | --cluster*) return 1 ;; esac
  done
  [ "$(.venv/bin/python -c 'import yaml; p = yaml.safe_load(open("params.yaml"))
print(p["model"]["device"], p["sampler"]["engine"])')" = "cpu hf" ]
}

if [ "${POPULORA_STAGE_HOST-}" = off ]; then
  unset POPULORA_STAGE_HOST
elif [ -z "${POPULORA_STAGE_HOST-}" ] && local_cpu_run "$@"; then
  host_dir=$(mktemp -d "${TMPDIR:-/tmp}/populora-host.XXXXXX")
  # a background job of this script: Ctrl-C reaches Snakemake and the stages, the host ends with the script
  .venv/bin/python -m populora.core.stagehost serve --socket "$host_dir/stages.sock" >"$host_dir/host.log" 2>&1 &
  host_pid=$!
  trap 'kill "$host_pid" 2>/dev/null || true; wait "$host_pid" 2>/dev/null || true; rm -rf "$host_dir"' EXIT
  export POPULORA_STAGE_HOST="$host_dir/stages.sock"
fi
snakemake --cores all --resources gpu=1 "$@"
