#!/usr/bin/env bash
# Does a study's carried run cache restore its shared stages in a fresh clone? (workflow/run_cache.py)
# A new study clone at SOURCE takes the carried cache, and OLD_CLONE's raw and warm base (committed there: the bytes a
# remake on OLD_CLONE's machine gives; their dvc.lock outputs are checked equal); then DVC must restore the carried
# stages (heldout_pool and the bases' CRUXEval) instead of running them, with outputs equal to OLD_CLONE's.
#
#   bash perf/study_restore_check.sh OLD_CLONE CARRY SOURCE OVERLAY RUNS
#   bash perf/study_restore_check.sh ../pw-22 study/population-warm/run_cache 20a24c0 params/population-warm.yaml \
#     study/population-warm/runs          # docs/measurements.md, 2026-11-30: the three stages in 7 s
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# = 5 ] || { sed -n '2,10p' "$0" >&2; exit 2; }
old=$(realpath "$1") carry=$(realpath "$2") source=$3 overlay=$4 runs=$5
stages=(heldout_pool bench_base@cruxeval_o bench_base@cruxeval_i)
# beside this checkout, as study clones are: params and the run cache name the benchmark data as ../shared
clone=$(dirname "$here")/restore-check-$$
trap 'rm -rf "$clone"' EXIT
cd "$here"
STUDY_SOURCE=$source STUDY_OVERLAY=$overlay STUDY_RUNS=$runs bash scripts/study.sh "$clone" > /dev/null
PYTHONPATH="$here" .venv/bin/python -m populora run-cache import "$carry" "$clone"
export PATH="$here/.venv/bin:$PATH"
cd "$clone"
mkdir -p results && cp -a "$old/results/base_model" "$old/results/warm_base" "$old/results/warm_start.json" results/
PYTHONPATH="$clone" dvc repro dag_shape > /dev/null
PYTHONPATH="$clone" dvc commit -f base_model warm_start > /dev/null
same_outs() {
  python3 - "$old/dvc.lock" "$@" <<'PY'
import sys, yaml
old = yaml.safe_load(open(sys.argv[1]))["stages"]; new = yaml.safe_load(open("dvc.lock"))["stages"]
for stage in sys.argv[2:]:
    assert new[stage]["outs"] == old[stage]["outs"], f"{stage}: outputs differ from the old clone's"
print("outputs equal to the old clone's:", ", ".join(sys.argv[2:]))
PY
}
same_outs dag_shape base_model warm_start
start=$(date +%s)
# a stage the cache cannot restore would start running for many minutes: stopped, and the check fails below
PYTHONPATH="$clone" timeout 180 dvc repro "${stages[@]}" 2>&1 | grep -E "cached|Running stage|skipping" || true
echo "the carried stages: $(( $(date +%s) - start )) s"
same_outs "${stages[@]}"
