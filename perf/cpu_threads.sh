#!/usr/bin/env bash
# Two model stages side by side on 1 thread each (what `model.device: cpu` schedules) against the
# same two one after the other on 2 threads (what claiming the one "GPU" did on a CPU machine):
# the base model's bench stage on a pair of startup-heavy benchmarks (2 problems each) and on a
# pair of compute-heavy ones (CRUXEval-O/I, bench.limits). Needs a finished base model stage.
#
#   bash perf/cpu_threads.sh [PROJECT]   # PROJECT: a run folder with results/base_model (default: .)
#
# Prints the wall time of each way and their ratio; run it on an idle machine.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
project=$(cd "${1:-.}" && pwd)
[ -d "$project/results/base_model" ] || { echo "no $project/results/base_model: run the base_model stage first" >&2; exit 2; }
export PATH="$here/.venv/bin:$PATH" PYTHONPATH="$here"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
stage() {  # bench NAME into out/WAY
  (cd "$project" && python -m stages.bench --params params.yaml --bench "$1" --base-model results/base_model \
     --tasks "$here/workflow/lm_eval_tasks" --results "$out/$2/$1" --log "$out/$2-$1.log" > /dev/null 2>&1)
}
now() { date +%s.%N; }
for pair in "gsm8k humaneval_plus" "cruxeval_o cruxeval_i"; do
  read -r a b <<< "$pair"
  start=$(now); OMP_NUM_THREADS=2 stage "$a" seq; OMP_NUM_THREADS=2 stage "$b" seq; one_after=$(echo "$(now) - $start" | bc)
  start=$(now); OMP_NUM_THREADS=1 stage "$a" par & OMP_NUM_THREADS=1 stage "$b" par & wait; side=$(echo "$(now) - $start" | bc)
  for way in seq par; do for name in "$a" "$b"; do
    [ -d "$out/$way/$name" ] || { echo "the $way bench of $name failed: $(tail -3 "$out/$way-$name.log")" >&2; exit 1; }
  done; done
  printf '%s + %s: one after the other, 2 threads %.1f s; side by side, 1 thread each %.1f s; ratio %.2f\n' \
    "$a" "$b" "$one_after" "$side" "$(echo "$side / $one_after" | bc -l)"
done
