#!/usr/bin/env bash
# The main job: install (if needed), then run the whole DAG with Snakemake on the embedded
# SmolLM2-135M-Instruct: both arms, every generation, benchmarks on the CPU subset.
# Extra arguments go to snakemake (e.g. -n for a dry run, or a target file).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
export PATH="$PWD/.venv/bin:$PATH" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
.venv/bin/python -m populora.config params.yaml
.venv/bin/python -m workflow.render_dvc --check
exec snakemake --cores all --resources gpu=1 "$@"
