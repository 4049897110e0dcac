#!/usr/bin/env bash
# pass@k and the cross-play matrix (scripts/study.sh's STUDY_PASSK / STUDY_CROSSPLAY) for committed study runs that
# finished without them, from the experiments a study clone's DVC cache still holds. Each run gets a scratch
# clone beside the study clone, checked out at the run's experiment commit (its dvc.lock: every output as the run
# left it), sharing the study clone's cache by hard links (nothing is copied or recomputed); study.sh's
# measure_final then measures its final students there, on the base they were trained on, and the figures go into
# the committed run folder (passk/, crossplay/), committed. The study clone is only read, so a study may keep
# running in it; the measurements share its cores (pause it, scripts/study_pause.sh, for figures of time).
#
#   STUDY_PASSK=64 STUDY_CROSSPLAY=8 STUDY_RUNS=study/population-warm/runs \
#     bash scripts/study_measure_kept.sh ../pw-23 1t1s-s25 2t2s-s25 1t1s-total-s20
#
# A run whose folder already holds what is asked is skipped; one without an experiment in the clone (its
# machine's clone is gone) is reported and left as it is.
set -euo pipefail

# The commit of the experiment NAME in CLONE (refs/exps/.../NAME), or nothing where there is not exactly one
kept_experiment() {
  local refs
  refs=$(git -C "$1" for-each-ref --format='%(objectname)' "refs/exps/*/*/$2")
  [ -n "$refs" ] && [ "$(wc -l <<< "$refs")" = 1 ] && echo "$refs"
  return 0
}

# A scratch clone SCRATCH of CLONE at COMMIT, every output of its dvc.lock checked out from CLONE's cache by hard
# links (read only: nothing in it may write into an output)
checkout_experiment() {
  local clone=$1 commit=$2 scratch=$3
  git clone -q --no-checkout "$clone" "$scratch"
  git -C "$scratch" fetch -q "$clone" "$commit"
  git -C "$scratch" checkout -q --detach "$commit"
  # outputs kept out of the cache (the code stamps) are not there to check out, and no measurement reads them
  (cd "$scratch" && dvc cache dir --local "$clone/.dvc/cache" && dvc config --local cache.type hardlink \
     && dvc checkout -q --allow-missing)
}

# What of STUDY_PASSK / STUDY_CROSSPLAY the run folder RUN_DIR of arm ARM still lacks (passk, crossplay), one a line
missing_measurements() {
  local run_dir=$1 arm=$2
  if [ -n "${STUDY_PASSK:-}" ] && [ ! -s "$run_dir/passk/passk.json" ]; then echo passk; fi
  if [ -n "${STUDY_CROSSPLAY:-}" ] && [ "$arm" = population ] && [ ! -s "$run_dir/crossplay/crossplay.json" ]; then
    echo crossplay
  fi
  return 0
}

if [[ ${BASH_SOURCE[0]} != "$0" ]]; then return 0; fi

here=$(cd "$(dirname "$0")/.." && pwd)
[ $# -ge 2 ] || { sed -n '2,14p' "$0" >&2; exit 2; }
clone=$(realpath "$1")
shift
runs=${STUDY_RUNS:-study/runs}
export PATH="$here/.venv/bin:$PATH"
# shellcheck source=scripts/study.sh
source "$here/scripts/study.sh"  # measure_final, model_base (its main part does not run when sourced)

failed=()
for name in "$@"; do
  run_dir="$here/$runs/$name"
  [ -f "$run_dir/run.json" ] || { echo "$name: no committed run in $runs" >&2; failed+=("$name"); continue; }
  arm=population; [[ $name == baseline* ]] && arm=baseline
  mapfile -t wanted < <(missing_measurements "$run_dir" "$arm")
  if [ ${#wanted[@]} -eq 0 ]; then echo "$name: nothing to measure (asked: STUDY_PASSK, STUDY_CROSSPLAY)"; continue; fi
  commit=$(kept_experiment "$clone" "$name")
  if [ -z "$commit" ]; then
    echo "$name: no single experiment $name in $clone (its adapters are gone): left without ${wanted[*]}" >&2
    failed+=("$name"); continue
  fi
  scratch="$clone-measure-$name"
  rm -rf "$scratch"
  echo "$(date -u +%FT%TZ) $name: ${wanted[*]} from experiment $commit in $scratch"
  checkout_experiment "$clone" "$commit" "$scratch"
  tmp="$run_dir.measure.tmp"; rm -rf "$tmp"; mkdir -p "$tmp"
  STUDY_PASSK=$([[ " ${wanted[*]} " == *" passk "* ]] && echo "${STUDY_PASSK:-}" || true) \
    STUDY_CROSSPLAY=$([[ " ${wanted[*]} " == *" crossplay "* ]] && echo "${STUDY_CROSSPLAY:-}" || true) \
    measure_final "$scratch" "$name" "$arm" "$tmp"
  [ -f "$scratch/$name.measure.log" ] && mv "$scratch/$name.measure.log" "$scratch.log"  # the measurements' log, kept
  got=()
  for part in "${wanted[@]}"; do
    [ -d "$tmp/$part" ] || continue
    shared=$(cd "$here/.." && pwd)/shared  # as study.sh: results name the benchmark data as params do
    find "$tmp/$part" -name '*.json' -exec sed -i "s#\"$shared/#\"../shared/#g" {} +
    rm -rf "${run_dir:?}/$part"; mv "$tmp/$part" "$run_dir/$part"; got+=("$part")
  done
  rm -rf "$tmp" "$scratch"
  if [ ${#got[@]} -ne ${#wanted[@]} ]; then
    echo "$name: measured ${got[*]:-nothing} of ${wanted[*]} (see $scratch.log)" >&2; failed+=("$name")
  fi
  if [ ${#got[@]} -gt 0 ]; then
    (cd "$here" && git add "$runs/$name" \
       && git commit -q -m "Study run $name: ${got[*]} of its final students, from its kept experiment" -- "$runs/$name")
  fi
done
if (( ${#failed[@]} )); then echo "not measured: ${failed[*]}" >&2; exit 1; fi
