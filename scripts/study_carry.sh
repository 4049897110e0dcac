#!/usr/bin/env bash
# Move a study to a newer commit without recomputing what its runs share: a new study clone at NEW (made as
# scripts/study.sh makes one: the overlay applied, dvc.yaml rendered, committed) takes the old clone's workspace
# as DVC left it after its last experiment (dvc.lock, params, every output under results/, copied; the old
# clone's DVC cache is then shared), and `dvc commit -f` records every stage as done at NEW's code. So the stages that do not
# depend on a run's seed or control (base model, warm start, held-out pool and the base's verdicts, the bases'
# benchmarks) keep the bytes every earlier run of the study read, and the next `dvc exp run` in the new clone
# reruns only what its -S flags change. A study's plan allows this only after a committed check that NEW
# makes the same bytes as the old commit on a run's generations (perf/same_bytes.py).
#
#   bash scripts/study_carry.sh OLD_CLONE EXPERIMENT NEW_CLONE NEW_COMMIT [OVERLAY...]
#   bash scripts/study_carry.sh ../pw-20 2t2s-s20 ../pw-21 <commit> params/population-warm.yaml
#   then: STUDY_SOURCE=<commit> ... bash scripts/study.sh ../pw-21 2t2s:21
#
# EXPERIMENT names the old clone's last experiment: its dvc.lock must be the workspace's (the workspace holds
# that run's outputs). The old clone is only read (its cache gains what the new clone's runs write); nothing
# may run in it meanwhile.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 4 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
old=$(realpath "$1") experiment=$2 new=$(realpath -m "$3") commit=$4
shift 4
overlays=("$@")
[ ${#overlays[@]} -gt 0 ] || overlays=(params/cpu-study.yaml)
export PATH="$here/.venv/bin:$PATH"
[ ! -e "$new" ] || { echo "$new exists: the new clone must not" >&2; exit 2; }
ref=$(git -C "$old" for-each-ref --format='%(refname)' refs/exps | grep -E "/$experiment\$" || true)
[ "$(wc -l <<< "$ref")" = 1 ] && [ -n "$ref" ] \
  || { echo "$old: no single DVC experiment named $experiment (dvc exp list)" >&2; exit 2; }

git clone -q "$here" "$new"
git -C "$new" checkout -q -B study "$commit"
ln -s "$here/.venv" "$new/.venv"
flags=(); for file in "${overlays[@]}"; do flags+=(--overlay "$file"); done
cd "$new"
PYTHONPATH="$new" python -m populora.config params.yaml "${flags[@]}" > params.study.yaml
mv params.study.yaml params.yaml
PYTHONPATH="$new" python -m workflow.render_dvc
git -c user.name=study -c user.email=study@localhost commit -qam "CPU study: ${overlays[*]} applied"

dvc config --local cache.dir "$old/.dvc/cache"
dvc config --local core.analytics false
git -C "$old" show "$ref:dvc.lock" | cmp -s - "$old/dvc.lock" \
  || { echo "$old/dvc.lock is not $experiment's: the workspace holds another run" >&2; exit 2; }
cp "$old/dvc.lock" dvc.lock
git -C "$old" show "$ref:params.yaml" > params.yaml   # the experiment's own values, so the lock matches them
cp -a "$old/results" results   # a copy, not links: the new runs rewrite some files in place (the live history)
rm -rf results/.code results/.dag_shape.ok   # the guard's bookkeeping is NEW's to write
PYTHONPATH="$new" dvc repro -q -s dag_shape   # the code stamps of NEW (results/.code)
dvc commit -f -q
git checkout -q params.yaml   # back to the overlay: scripts/study.sh sets each run's -S flags on it
echo "$new: $experiment's $(grep -c '^  [^ ].*:$' dvc.lock) stages carried to $(git rev-parse --short HEAD~1)"
