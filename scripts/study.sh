#!/usr/bin/env bash
# The CPU study (study/README.md): each control and seed is one DVC experiment, run one after
# another in a clone of this repository with params/cpu-study.yaml applied; as each finishes, its
# small results (metrics, arm summary and dynamics, benchmark results with per-problem verdicts and
# answer diagnostics, the task ids behind each diagnostic (<model>/answers.json), the students'
# training answers per generation (training_answers.json), each replacement step (evolution/genNNN.json),
# its params, wall time) are copied to study/runs/<control>-s<seed>/ of THIS checkout and committed there (only
# that folder), so no result lives only in a work tree or cache.
#
#   bash scripts/study.sh /path/to/study-clone 2t2s:0 baseline:0 1t1s:0 ...
#   python -m populora.analysis study/runs --out study [--plan study/<name>/plan.yaml]   # table + figure across seeds
#
# STUDY_OVERLAY (default params/cpu-study.yaml) is the overlay the clone applies, STUDY_RUNS (default
# study/runs) where runs are committed; STUDY_OVERLAY may name several overlays, applied in order
# (a candidate budget's changes on top of the study's overlay). The learning study (issue 34) is
#   STUDY_OVERLAY=params/learning-study.yaml STUDY_RUNS=study/learning/runs bash scripts/study.sh CLONE 1t1s:0 ...
# A study commits its plan first (study/<name>/plan.yaml: controls, seeds, tuning seeds, budget, primary
# endpoint); with STUDY_PLAN=study/<name>/plan.yaml this script refuses a CONTROL:SEED the plan does not declare.
# Its held-out pool (results/heldout/pool.jsonl: the same for every run of a clone, DVC's run cache
# restores it) is copied once beside the runs (<STUDY_RUNS>/../heldout_pool.jsonl), the base model's
# verdicts on it into each run (heldout_base.json).
#
# Controls (params changes on top of the overlay):
#   baseline        the AZR single agent: one adapter, both roles, one joint update
#   baseline-roles  the same with update.role_steps=per_role (steps per role, as 1T-1S takes them)
#   1t1s            one teacher + one student: roles separated, no population, no evolution
#   2t2s            the population: 2 teachers + 2 students, evolution on
#   2t2s-noevo      the population with evolve.replace=0
#   ensemble        two independent 1T-1S pairs in one arm (2T-2S, pairing.strategy=pairs: teacher k serves student k
#                   only and each pair reads only the seeds and its own tasks; evolve.replace=0): as many members and
#                   updates as 2t2s, no cross-evaluation, no evolution (issue 51)
#   4t4s            the population: 4 teachers + 4 students, evolution on
#   1t1s-total      one teacher + one student with the 2T-2S population's total budget (issue 57): twice the
#                   proposals (propose.per_type), answers (solve.tasks_per_type) and optimizer steps (update.steps)
#                   of the run's params, i.e. what the population's two teachers and two students spend together;
#                   each step over all the pair's rollouts (update.step_rollouts all: every rollout trained on twice,
#                   twice the update's work of the population's)
#   1t1s-total-split  the same with each step over its own half of the rollouts, dealt out by task
#                   (update.step_rollouts=split: every rollout trained on once, as the population's members do; needs
#                   a commit that has the key)
#   <control>-nocopy  any of them with propose.reject_copyable=true (no task a student solves by echoing
#                   what it is shown, no identity seed; needs a study at a commit that has the key: STUDY_SOURCE)
#   <control>-null  any of them with update.shuffle_advantages=true (same data, no learning signal);
#                   both: <control>-nocopy-null
# A finished run (its folder exists) is skipped; an interrupted one is rerun (DVC skips its finished stages),
# and its run.json's wall_s adds up every attempt (`attempts`, `interrupted_s`).
# Two clones may run side by side on a 2-core machine, each stage on one thread (OMP_NUM_THREADS=1,
# STUDY_BESIDE says so in run.json): ~1.4-1.7x the throughput of one run on two threads (docs/measurements.md,
# perf/cpu_threads.sh), at the price of each run's wall time.
# A run on both threads shares the machine with nothing, not even a niced test: its stages wait at every
# OpenMP region's end for the thread another process preempted (seed 21 of the warm-base gate: three niced
# processes made a generation 4-12x slower per stage, docs/measurements.md). To run something between, pause the
# run outside verify and grade (the sandbox's wall-clock backstop): `bash scripts/study_pause.sh stop|resume CLONE
# NAME` (SIGSTOP/SIGCONT of its process group) adds the pause's seconds to <clone>/<name>.paused_s, which this
# script writes into the run's run.json as paused_s (populora/analysis/runs.py subtracts it from the wall).
# Every run of a study uses the same code: a new clone checks out the commit the committed runs
# record as `source_commit` (STUDY_SOURCE=<commit> overrides; with no runs yet: HEAD).
set -euo pipefail

control_flags() {
  local control=$1 flags=() base=${1%-null} split=()
  base=${base%-nocopy}
  [[ $base == 1t1s-total-split ]] && base=1t1s-total split=(-S ++update.step_rollouts=split)
  case $base in
    baseline) flags=(-S 'dag.arms=[baseline]') ;;
    baseline-roles) flags=(-S 'dag.arms=[baseline]' -S ++update.role_steps=per_role) ;;
    1t1s) flags=(-S 'dag.arms=[population]' -S population.teachers=1 -S population.students=1) ;;
    2t2s) flags=(-S 'dag.arms=[population]') ;;
    2t2s-noevo) flags=(-S 'dag.arms=[population]' -S evolve.replace=0) ;;
    ensemble) flags=(-S 'dag.arms=[population]' -S population.teachers=2 -S population.students=2
                     -S pairing.strategy=pairs -S evolve.replace=0) ;;
    4t4s) flags=(-S 'dag.arms=[population]' -S population.teachers=4 -S population.students=4) ;;
    1t1s-total)  # one pair with the 2T-2S population's total budget: twice the proposals, answers and steps
      local budget per_type tasks steps
      budget=$(python -c 'import sys, yaml
p = yaml.safe_load(open(sys.argv[1]))
print(2 * p["propose"]["per_type"], 2 * p["solve"]["tasks_per_type"], 2 * p["update"]["steps"])' "${2:-params.yaml}") \
        || { echo "1t1s-total needs the run's params file (solve, propose, update)" >&2; return 2; }
      read -r per_type tasks steps <<< "$budget"
      flags=(-S 'dag.arms=[population]' -S population.teachers=1 -S population.students=1
             -S "propose.per_type=$per_type" -S "solve.tasks_per_type=$tasks" -S "update.steps=$steps" "${split[@]}") ;;
    *) echo "unknown control $control" >&2; return 2 ;;
  esac
  # `++` sets a key whether or not the params file spells it out (runs pinned to older code do not)
  [[ ${control%-null} == *-nocopy ]] && flags+=(-S ++propose.reject_copyable=true)
  [[ $control == *-null ]] && flags+=(-S ++update.shuffle_advantages=true)
  printf '%s\n' "${flags[@]}"
}

# A run's flags, read from the overlay's params as the clone committed them: `dvc exp run -S` edits the
# work tree's params.yaml, so a run resumed after a kill would otherwise read the killed attempt's edits
# (1t1s-total, which doubles what it reads, then ran at four times one pair's budget)
run_flags() {
  local clone=$1 control=$2
  git -C "$clone" checkout -q HEAD -- params.yaml || return 2  # HEAD: DVC stages its edits in the index too
  control_flags "$control" "$clone/params.yaml"
}

# The machine a run's wall time was taken on, as JSON: machines drawn for a study differ (the base
# model's CRUXEval-O, the same 200 answers token for token, took 776 s of generation on one and
# 109 s on one with AVX-512 and AMX), so wall times compare only between runs of one kind of machine.
machine_json() {
  local cpu features=()
  cpu=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo 2>/dev/null | head -1)
  for flag in avx2 avx512f avx512_bf16 amx_bf16; do  # the bf16 flags decide model.dtype: auto
    grep -qw "$flag" /proc/cpuinfo 2>/dev/null && features+=("$flag")
  done
  # threads: a training-chain stage's torch threads (OMP_NUM_THREADS, else model.cpu_threads of the params file
  # given as $1, else 1: populora.lm.device.cpu_threads); beside: what shared the machine (STUDY_BESIDE, e.g.
  # "another study run on 1 thread"): both change the wall, not the results' meaning
  # nproc honours OMP_NUM_THREADS (and OMP_THREAD_LIMIT): the machine's CPUs are counted without them
  local cpus threads=${OMP_NUM_THREADS:-}
  cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  if [ -z "$threads" ]; then
    threads=$(python -c 'import sys, yaml; print(((yaml.safe_load(open(sys.argv[1])) or {}).get("model") or {}).get("cpu_threads", 1))' \
      "${1:-params.yaml}" 2>/dev/null || echo 1)
  fi
  printf '{"cpu": "%s", "cpus": %s, "features": "%s", "threads": %s, "beside": "%s"}' "${cpu:-unknown}" "$cpus" \
    "${features[*]}" "$threads" "${STUDY_BESIDE:-}"
}

# A run killed as it began can leave an empty or torn dvc.lock, which fails every later run in DVC's
# schema check ("'./dvc.lock' validation failed"); the lock only records stage hashes (the run
# cache keeps the outputs), so such a lock is removed.
drop_torn_lock() {
  local lock=$1 name=$2
  # exit 1 only for a lock that YAML cannot read as a mapping (not for a python without yaml)
  if [ -f "$lock" ] && ! python -c '
import sys
try:
    import yaml
except ImportError:
    sys.exit(0)
try:
    sys.exit(not isinstance(yaml.safe_load(open(sys.argv[1])), dict))
except yaml.YAMLError:
    sys.exit(1)' "$lock" 2>/dev/null; then
    echo "$(date -u +%FT%TZ) $name: $lock is empty or unreadable (a run killed as it wrote it): removed"
    rm -f "$lock"
  fi
}

# A run interrupted (a session's end, a kill) and started again resumes from DVC's run cache; its wall
# time is the sum of its attempts. <clone>/<name>.started holds the start (epoch seconds) of the attempt
# in progress, <clone>/<name>.attempts one line of seconds per earlier attempt. An attempt still open
# when the run starts again was killed: it is closed at its log's last write (within one stage of the kill).
close_interrupted_attempt() {
  local clone=$1 name=$2 begin end
  [ -f "$clone/$name.started" ] || return 0
  begin=$(cat "$clone/$name.started")
  end=$(stat -c %Y "$clone/$name.log" 2>/dev/null || echo "$begin")
  (( end < begin )) && end=$begin
  echo $(( end - begin )) >> "$clone/$name.attempts"
  rm -f "$clone/$name.started"
}

# "<seconds> <count>" of a run's earlier attempts (0 0 for none)
earlier_attempts() {
  local file="$1/$2.attempts"
  if [ -s "$file" ]; then awk '{ s += $1; n += 1 } END { printf "%d %d\n", s, n }' "$file"; else echo "0 0"; fi
}

# Seconds a run spent stopped by hand (SIGSTOP) over all its attempts: <clone>/<name>.paused_s, else 0
paused_seconds() {
  local file="$1/$2.paused_s" seconds=0
  [ -s "$file" ] && seconds=$(tr -d '[:space:]' < "$file")
  [[ $seconds =~ ^[0-9]+$ ]] || { echo "$file: not a whole number of seconds: $seconds" >&2; return 1; }
  echo "$seconds"
}

# The base a run's adapters were trained on, relative to its clone: results/warm_base where the run made one, else
# results/base_model (populora.core.paths.model_base)
model_base() {
  if [ -d "$1/results/warm_base" ]; then echo results/warm_base; else echo results/base_model; fi
}

# The DVC hash of the folder BASE (results/warm_base or results/base_model) in CLONE's dvc.lock, the first entry
# naming it (a stage's out, or a dep of the same bytes), or nothing where the lock has none
base_identity() {
  awk -v want="$2" '$1 == "-" && $2 == "path:" { found = ($3 == want); next }
    found && $1 == "md5:" { print $2; exit }' "$1/dvc.lock" 2>/dev/null || true
}

# A finished run's run.json: control, seed, experiment, wall_s, attempts, interrupted_s, paused_s, machine (JSON),
# source_commit, study_commit, stage_host (true/false), in that order
run_json() {
  printf '{"control": "%s", "seed": %s, "experiment": "%s", "wall_s": %s, "attempts": %s, "interrupted_s": %s, "paused_s": %s, "machine": %s, "source_commit": "%s", "study_commit": "%s", "stage_host": %s}\n' "$@"
}

# Issue 51's measurements of a run's adapters, taken before the next experiment replaces them (optional):
# STUDY_PASSK=<answers per task> (e.g. 64): pass@k of the final students on the run's held-out pool
# (populora.analysis.passk; the base model too in the first run that measures that base, the others leave it out:
# each machine type makes a warm base of its own, so a base is known by its DVC hash in the clone's dvc.lock,
# written beside the figures as passk/base_id);
# STUDY_CROSSPLAY=<tasks per generation> (e.g. 8): a population's cross-play matrix (populora.analysis.crossplay).
# Each writes into the run folder (passk/, crossplay/); a failure is logged and the run is kept without it.
# Both run the clone's code (the run's own commit), so that commit must have the modules. The adapters load on the
# base they were trained on, named explicitly (a commit before the fix of the modules' defaults took the raw base):
# results/warm_base where the run made one, else results/base_model (`model_base`). Their output goes to
# CLONE/NAME.measure.log, not the run's log: an attempt killed while measuring ends at the run log's last write
# (close_interrupted_attempt), the end of its DVC work, so the hour of measuring never counts as the run's wall.
measure_final() {
  local clone=$1 name=$2 arm=$3 tmp=$4 base_flag=() base base_id
  base=$(model_base "$clone")
  if [ -n "${STUDY_PASSK:-}" ] && [ -s "$clone/results/heldout/pool.jsonl" ]; then
    base_id=$(base_identity "$clone" "$base")
    # a base without a hash (no dvc.lock entry) is measured every time: nothing says which base it is
    if [ -n "$base_id" ] && grep -qsxF "$base_id" "$here/$runs"/*/passk/base_id; then base_flag=(--no-base); fi
    if (cd "$clone" && PYTHONPATH="$clone" python -m populora.analysis.passk --pool results/heldout/pool.jsonl \
          --params params.yaml --base-model "$base" --run "$name=results/$arm" --samples "$STUDY_PASSK" \
          "${base_flag[@]}" --out "$tmp/passk") >> "$clone/$name.measure.log" 2>&1; then
      # only beside figures that hold the base: a later run of that base then leaves it out
      if [ ${#base_flag[@]} -eq 0 ] && [ -n "$base_id" ]; then mkdir -p "$tmp/passk" && echo "$base_id" > "$tmp/passk/base_id"; fi
    else
      echo "$(date -u +%FT%TZ) $name: pass@k failed, kept without it (see $clone/$name.measure.log)" >&2
    fi
  fi
  if [ -n "${STUDY_CROSSPLAY:-}" ] && [ "$arm" = population ]; then
    (cd "$clone" && PYTHONPATH="$clone" python -m populora.analysis.crossplay results --arm "$arm" --params params.yaml \
       --base-model "$base" --tasks-per-gen "$STUDY_CROSSPLAY" --out "$tmp/crossplay") >> "$clone/$name.measure.log" 2>&1 \
      || echo "$(date -u +%FT%TZ) $name: cross-play failed, kept without it (see $clone/$name.measure.log)" >&2
  fi
  return 0
}

# The model stages of a CPU run with the transformers sampler run in a stage host (populora/core/stagehost/), as
# scripts/run_pipeline.sh starts one: one process imports torch, transformers and PEFT once and forks each
# `python -m stages.<name>`, ~10 s of imports less per model stage (docs/measurements.md). The host runs the
# clone's own code (its commit's protocol, as its stages'); a commit without a host, a GPU or vLLM run, or
# STUDY_STAGE_HOST=off runs every stage in its own process. Exports POPULORA_STAGE_HOST (the host's socket) where
# a host runs and unsets it where none does, and sets stage_host_pid; the host is a child of the calling shell (so
# call it in the shell that runs the stages, not in a $(...) subshell), which stops it when it is done
# (stop_stage_host: a host outlives a shell that just exits, ~400 MB left behind).
start_stage_host() {
  local clone=$1 dir
  unset POPULORA_STAGE_HOST stage_host_pid
  [ "${STUDY_STAGE_HOST:-on}" != off ] && [ -d "$clone/populora/core/stagehost" ] || return 0
  [ "$(python -c 'import sys, yaml; p = yaml.safe_load(open(sys.argv[1]))
print(p["model"]["device"], p["sampler"]["engine"])' "$clone/params.yaml" 2>/dev/null)" = "cpu hf" ] || return 0
  dir=$(mktemp -d "${TMPDIR:-/tmp}/study-host.XXXXXX")
  (cd "$clone" && PYTHONPATH="$clone" exec python -m populora.core.stagehost serve --socket "$dir/stages.sock") \
    > "$dir/host.log" 2>&1 &
  stage_host_pid=$!
  export POPULORA_STAGE_HOST="$dir/stages.sock"
}

stop_stage_host() {
  if [ -n "${stage_host_pid:-}" ]; then kill "$stage_host_pid" 2>/dev/null || true; wait "$stage_host_pid" 2>/dev/null || true; fi
  return 0
}

# A run's DVC experiment, its output in CLONE/NAME.log: `dvc exp run -n NAME FLAGS...`, or, where an experiment of
# that name exists, that one applied to the workspace. An attempt killed after DVC finished (in its final
# measurements: a session's end) leaves one, and `dvc exp run -n` refuses a name that exists.
run_experiment() {
  local clone=$1 name=$2
  shift 2
  if git -C "$clone" for-each-ref --format='%(refname)' refs/exps | grep -qE "/$name\$"; then
    echo "$name: DVC's experiment exists (an earlier attempt ran it): applied to the workspace, not run again" \
      > "$clone/$name.log"
    (cd "$clone" && dvc exp apply "$name") >> "$clone/$name.log" 2>&1
  else
    (cd "$clone" && PYTHONPATH="$clone" dvc exp run -n "$name" "$@") > "$clone/$name.log" 2>&1
  fi
}

# sourced (tests/test_study_script.py): define the functions only
if [[ ${BASH_SOURCE[0]} != "$0" ]]; then return 0; fi

here=$(cd "$(dirname "$0")/.." && pwd)
clone=${1:?usage: scripts/study.sh STUDY_CLONE CONTROL:SEED ...}
clone=$(realpath -m "$clone")  # commands below cd into it: a relative path would move
shift
export PATH="$here/.venv/bin:$PATH"

# STUDY_PLAN (study/<name>/plan.yaml, populora/analysis/plan.py): every CONTROL:SEED must be declared there
# (a seed of the answer or a tuning seed) before anything runs
if [ -n "${STUDY_PLAN:-}" ]; then
  for item in "$@"; do
    PYTHONPATH="$here" python -m populora.analysis.plan "$here/$STUDY_PLAN" "${item%%:*}" "${item##*:}" || exit 1
  done
fi

overlay=${STUDY_OVERLAY:-params/cpu-study.yaml}
runs=${STUDY_RUNS:-study/runs}
source=${STUDY_SOURCE:-$(cat "$here/$runs"/*/run.json 2>/dev/null | sed -n 's/.*"source_commit": "\([0-9a-f]*\)".*/\1/p' | head -1 || true)}
source=${source:-$(git -C "$here" rev-parse HEAD)}
if [ ! -d "$clone/.git" ]; then
  git clone -q "$here" "$clone"
  git -C "$clone" checkout -q -B study "$source"
  ln -s "$here/.venv" "$clone/.venv"
  overlay_flags=(); for file in $overlay; do overlay_flags+=(--overlay "$file"); done
  (cd "$clone" && PYTHONPATH="$clone" python -m populora.config params.yaml "${overlay_flags[@]}" > params.study.yaml \
     && mv params.study.yaml params.yaml && PYTHONPATH="$clone" python -m workflow.render_dvc \
     && git -c user.name=study -c user.email=study@localhost commit -qam "CPU study: $overlay applied")
fi

start_stage_host "$clone"
trap stop_stage_host EXIT
[ -n "${POPULORA_STAGE_HOST:-}" ] && echo "stages run in the stage host at $POPULORA_STAGE_HOST (STUDY_STAGE_HOST=off: without)"

failed=()
for item in "$@"; do
  control=${item%%:*}; seed=${item##*:}; name="$control-s$seed"
  dest="$here/$runs/$name"
  if [ -d "$dest" ]; then echo "$name: already in $runs, skipped"; continue; fi
  mapfile -t flags < <(run_flags "$clone" "$control")
  if [ ${#flags[@]} -eq 0 ]; then echo "$name: no flags for $control, nothing run" >&2; failed+=("$name"); continue; fi
  arm=population; [[ $control == baseline* ]] && arm=baseline
  drop_torn_lock "$clone/dvc.lock" "$name"
  close_interrupted_attempt "$clone" "$name"  # before this attempt's log replaces the killed one's
  # a pause open when the run was killed (scripts/study_pause.sh): its attempt ended at its log's last write, before
  # the pause, so the pause is in no wall time and is not counted
  rm -f "$clone/$name.paused_at"
  read -r earlier_s earlier_n < <(earlier_attempts "$clone" "$name")
  # a paused_s that is no number fails here, before the run's work, not when its results are committed
  if ! paused=$(paused_seconds "$clone" "$name"); then failed+=("$name"); continue; fi
  # the earlier attempt's log stays beside this one's (attempt<n>.log: the n-th attempt)
  [ -f "$clone/$name.log" ] && (( earlier_n > 0 )) && mv "$clone/$name.log" "$clone/$name.attempt$earlier_n.log"
  echo "$(date -u +%FT%TZ) $name: dvc exp run ${flags[*]} -S base.seed=$seed (earlier attempts: $earlier_n, $earlier_s s; paused $paused s)"
  start=$(date +%s)
  echo "$start" > "$clone/$name.started"
  if ! run_experiment "$clone" "$name" "${flags[@]}" -S "base.seed=$seed"; then
    echo "$(date -u +%FT%TZ) $name: FAILED, nothing committed; the last lines of $clone/$name.log:" >&2
    tail -5 "$clone/$name.log" >&2
    echo $(( $(date +%s) - start )) >> "$clone/$name.attempts"; rm -f "$clone/$name.started"
    failed+=("$name"); continue
  fi
  wall=$(( $(date +%s) - start + earlier_s ))  # every attempt's time: the run cache kept what the killed ones finished
  tmp="$dest.tmp"; rm -rf "$tmp"; mkdir -p "$tmp/bench"
  # only this run's arm and the base (the work tree may hold another experiment's arm folder)
  (cd "$clone/results" && cp metrics.json "$tmp/" && mkdir -p "$tmp/dynamics" && cp -r "dynamics/$arm" "$tmp/dynamics/")
  find "$tmp/dynamics" -name '*.lock' -delete  # the live history's file lock is not a result
  # each replacement step: events (operator, parents, confidence, moments), every member's fitness with its uncertainty
  for file in "$clone/results/$arm"/gen*/evolved/evolution.json; do
    [ -f "$file" ] || continue
    gen=$(basename "$(dirname "$(dirname "$file")")"); mkdir -p "$tmp/evolution"; cp "$file" "$tmp/evolution/$gen.json"
  done
  for bench in "bench/base" "bench/$arm"; do  # absent where the overlay runs no benchmark (a candidate budget)
    [ -d "$clone/results/$bench" ] || continue
    (cd "$clone/results" && find "$bench" -maxdepth 2 -name '*.json' | while read -r f; do
          mkdir -p "$tmp/$(dirname "$f")"; cp "$f" "$tmp/$f"; done \
     && find "$bench" -name samples.jsonl | while read -r f; do  # which answers copy
          mkdir -p "$tmp/$(dirname "$f")"
          PYTHONPATH="$here" python -m populora.bench.diagnostics --flags "$f" > "$tmp/$(dirname "$f")/answers.json"; done)
  done
  # the students' training answers per generation: how many copy what the task showed
  PYTHONPATH="$here" python -m populora.bench.diagnostics --training "$clone/results/$arm" > "$tmp/training_answers.json"
  measure_final "$clone" "$name" "$arm" "$tmp"
  cp "$clone/params.yaml" "$tmp/params.yaml"
  if [ -s "$clone/results/heldout/pool.jsonl" ]; then  # the held-out pool: once per study, the base's verdicts per run
    cp "$clone/results/heldout/base.json" "$tmp/heldout_base.json"
    # made by this study (not reused through heldout.pool_file): kept beside the runs
    reused=$(cd "$clone" && python -c 'import yaml; print(yaml.safe_load(open("params.yaml"))["heldout"].get("pool_file") or "")')
    [ -n "$reused" ] || [ -f "$here/$runs/../heldout_pool.jsonl" ] \
      || cp "$clone/results/heldout/pool.jsonl" "$here/$runs/../heldout_pool.jsonl"
  fi
  # committed results name the benchmark data as params do (../shared/...), never this machine's path
  shared=$(cd "$here/.." && pwd)/shared
  find "$tmp" -name '*.json' -exec sed -i "s#\"$shared/#\"../shared/#g" {} +
  paused=$(paused_seconds "$clone" "$name")
  run_json "$control" "$seed" "$name" "$wall" "$(( earlier_n + 1 ))" "$earlier_s" "$paused" \
    "$(machine_json "$clone/params.yaml")" "$(git -C "$clone" rev-parse HEAD~1)" "$(git -C "$clone" rev-parse HEAD)" \
    "$([ -n "${POPULORA_STAGE_HOST:-}" ] && echo true || echo false)" > "$tmp/run.json"
  mv "$tmp" "$dest"
  for attempt in 1 2 3 4 5; do  # the checkout may be busy (another git command): retry
    if (cd "$here" && git add "$runs/$name" "$runs/../heldout_pool.jsonl" 2>/dev/null; git add "$runs/$name" \
        && git commit -q -m "Study run $name ($wall s)" -- "$runs/$name" $(ls "$here/$runs/../heldout_pool.jsonl" 2>/dev/null)); then break; fi
    sleep 20
  done
  rm -f "$clone/$name.started" "$clone/$name.attempts" "$clone/$name.paused_s"
  echo "$(date -u +%FT%TZ) $name: done in $wall s ($paused s of it paused), committed to $runs/$name"
done
if (( ${#failed[@]} )); then echo "failed: ${failed[*]}" >&2; exit 1; fi
