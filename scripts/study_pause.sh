#!/usr/bin/env bash
# Pause a study run (scripts/study.sh) to time or test something on the machine, and record the pause.
#
#   bash scripts/study_pause.sh stop   CLONE NAME [PGID]   # waits for a model-only stage, then SIGSTOPs the run
#   bash scripts/study_pause.sh resume CLONE NAME [PGID]   # SIGCONT; adds the pause to CLONE/NAME.paused_s
#
# NAME is the run's experiment (e.g. 1t1s-total-s20); PGID the process group of the study.sh that runs it (started
# with setsid, as study/README.md says), found from its command line when not given. A run on both threads shares
# the machine with nothing (scripts/study.sh), so a measurement stops it first. It is stopped only inside propose,
# solve or update (STUDY_PAUSE_STAGES, a regular expression of stage names): those run no sandbox, whose wall-clock
# backstop would fire on a stopped program. An update stage holds several GiB while stopped: for the README's test
# command (its vLLM lane wants ~4.7 GiB free) set STUDY_PAUSE_STAGES='propose|solve'. The seconds stopped go into
# CLONE/NAME.paused_s, which scripts/study.sh writes into the run's run.json as paused_s (the analysis takes them
# off its wall time). A run killed while paused (a session's end) leaves CLONE/NAME.paused_at, which scripts/study.sh
# removes when it starts the run again (that attempt's time ended at its log's last write, before the pause).
set -euo pipefail

study_pgid() {  # the process group of the study.sh running CLONE, or nothing
  local pid
  pid=$(pgrep -o -f "scripts/study\\.sh $1( |$)" || true)
  [ -n "$pid" ] && ps -o pgid= -p "$pid" | tr -d ' '
  return 0
}

stage_of() {  # the model stage running in process group $1 now, if any (between two stages: nothing)
  local running
  running=$(pgrep -g "$1" -a -f "python -m stages\\." || true)
  awk 'match($0, /python -m stages\.[a-z_]+ /) { print substr($0, RSTART + 17, RLENGTH - 18); exit }' <<<"$running"
}

main() {
  local action=${1:-} clone=${2:-} name=${3:-} pgid=${4:-} stages=${STUDY_PAUSE_STAGES:-propose|solve|update}
  if [[ ! $action =~ ^(stop|resume)$ ]] || [ -z "$clone" ] || [ -z "$name" ]; then
    echo "usage: $0 stop|resume CLONE NAME [PGID]" >&2
    return 2
  fi
  [ -n "$pgid" ] || pgid=$(study_pgid "$clone")
  if [ -z "$pgid" ]; then
    echo "no scripts/study.sh running $clone: give its process group" >&2
    return 1
  fi
  local at="$clone/$name.paused_at" total="$clone/$name.paused_s"
  if [ "$action" = stop ]; then
    if [ -f "$at" ]; then echo "$name is paused already (since $(date -d "@$(cat "$at")"))" >&2; return 1; fi
    local stage
    while true; do
      stage=$(stage_of "$pgid")
      if [[ -n $stage && $stage =~ ^($stages)$ ]]; then
        kill -STOP -- "-$pgid"
        # the stage may have ended between the look and the stop: look again, now that nothing moves
        stage=$(stage_of "$pgid")
        [[ -n $stage && $stage =~ ^($stages)$ ]] && break
        kill -CONT -- "-$pgid"
      fi
      sleep 1
    done
    date +%s > "$at"
    echo "$name paused at $(date -u +%FT%TZ) in its $stage stage"
  else
    if [ ! -f "$at" ]; then echo "$name is not paused by this script ($at missing)" >&2; return 1; fi
    kill -CONT -- "-$pgid"
    local seconds=$(( $(date +%s) - $(cat "$at") )) before=0
    [ -s "$total" ] && before=$(tr -d '[:space:]' < "$total")
    echo $(( before + seconds )) > "$total"
    rm -f "$at"
    echo "$name resumed after $seconds s; paused $(( before + seconds )) s in all ($total)"
  fi
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  main "$@"
fi
