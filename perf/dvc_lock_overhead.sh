#!/usr/bin/env bash
# DVC's own seconds around one stage of a finished study run, before and after the code stamps (issue 56):
# two scratch copies of a finished run's project (its results hard-linked, its DVC cache shared), one at the
# run's commit (each stage's ~40 source files in dvc.lock), one at NEW (one code stamp a stage: the guard
# writes the stamps, `dvc commit -f` records every stage as it is), then farm-bench times
# `dvc repro -s -f <stage>` in each, in turn: a stage of under a second (pair), so the figure is DVC's
# start-up, its reading of dvc.yaml and dvc.lock and its rewriting of the lock.
#
#   bash perf/dvc_lock_overhead.sh ../pw-20 ed2f65c [pair@population-gen9] [runs]
#   (../pw-20: the study clone scripts/study.sh made, with a finished run; the measured figure used it)
#
# Run on an idle machine; the copies go under ${TMPDIR:-/tmp} and are removed after.
set -euo pipefail
project=$(realpath "$1") new=$2 stage=${3:-pair@population-gen9} runs=${4:-5}
here=$(cd "$(dirname "$0")/.." && pwd)
bin="$here/.venv/bin"
export POPULORA_BENCHMARKS=${POPULORA_BENCHMARKS:-$(realpath "$here/../shared/benchmarks")}  # the copies are not beside shared/
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
copy() {  # copy <name> <commit>: the project's run (params, lock, results) at <commit>'s code
  local dir="$work/$1"
  git clone -q "$here" "$dir"
  git -C "$dir" fetch -q "$project" HEAD  # the run's own commit (the study branch of its clone)
  git -C "$dir" checkout -q "$2"
  cp "$project/params.yaml" "$project/dvc.lock" "$dir/"
  cp -al "$project/results" "$dir/results"
  (cd "$dir" && "$bin/dvc" config --local cache.dir "$project/.dvc/cache" && "$bin/dvc" config --local core.analytics false)
}
old=$(git -C "$project" rev-parse HEAD)
copy old "$old"
copy new "$new"
(
  cd "$work/new"
  PATH="$bin:$PATH" "$bin/python" -m workflow.render_dvc >/dev/null
  PATH="$bin:$PATH" "$bin/dvc" repro -q -s dag_shape
  "$bin/dvc" commit -f -q
)
for side in old new; do
  stages=$(grep -c '^  [^ ].*:$' "$work/$side/dvc.lock")
  echo "$side: dvc.lock $(wc -c < "$work/$side/dvc.lock") bytes, $stages stages, $(grep -c -- '- path:' "$work/$side/dvc.lock") deps and outs"
done
in_dir() { echo "cd $work/$1 && PATH=$bin:\$PATH exec $bin/dvc repro -q -s -f $stage >>$work/$1.log 2>&1"; }
farm-bench -n "$runs" --warmup 1 --timeout 1800 --vs "sh -c '$(in_dir old)'" -- sh -c "$(in_dir new)"
tail -n 3 "$work/old.log" "$work/new.log"
