#!/usr/bin/env bash
# A one-node SLURM cluster on this machine, for running the pipeline through profiles/slurm for real
# (tests/test_slurm_cluster.py). Needs root; installs Debian's slurm-wlm and munge (SLURM 22.05)
# with apt when they are missing.
#
#   bash scripts/slurm_local.sh start DIR   # configure under DIR, start munged, slurmctld, slurmd
#   export SLURM_CONF=DIR/slurm.conf        # what sbatch, squeue, sinfo (and Snakemake) then use
#   bash scripts/slurm_local.sh stop DIR    # stop the daemons this script started
#
# The configuration lives in DIR; /etc/slurm/slurm.conf, when absent, becomes a link to it until `stop`
# (an existing one, another cluster's, makes the script refuse):
# one node (this host) and one default partition `main`, accounting off (so job status comes from
# squeue, kept for an hour after a job ends: MinJobAge=3600), no cgroups. The node declares the shape
# of a paper-scale GPU node (64 CPUs, 1 TB, 8 GPUs: empty files stand for the devices) with
# SlurmdParameters=config_overrides, so profiles/slurm's requests (threads, mem_mb, gpu) are accepted
# as they are and time-share this machine's cores; no GPU exists, jobs run on the CPU.
# Exit codes: 0 ready; 77 cannot start here (reason on stderr: not root, no apt, a daemon failed).
set -euo pipefail

cmd=${1:?usage: slurm_local.sh start|stop DIR}
dir=$(mkdir -p "${2:?usage: slurm_local.sh start|stop DIR}" && cd "$2" && pwd)
skip() { echo "slurm_local: $*" >&2; exit 77; }

stop_slurm() {
  for daemon in slurmd slurmctld; do
    if [ -f "$dir/$daemon.pid" ]; then
      pid=$(cat "$dir/$daemon.pid")
      kill "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      rm -f "$dir/$daemon.pid"
    fi
  done
}

stop() {
  stop_slurm
  if [ -f "$dir/etc-link.made" ]; then
    [ "$(readlink /etc/slurm/slurm.conf)" = "$dir/slurm.conf" ] && rm -f /etc/slurm/slurm.conf
    rm -f "$dir/etc-link.made"
  fi
  if [ -f "$dir/munged.started" ] && [ -f /run/munge/munged.pid ]; then
    kill "$(cat /run/munge/munged.pid)" 2>/dev/null || true
    rm -f "$dir/munged.started"
  fi
}

if [ "$cmd" = stop ]; then stop; exit 0; fi
[ "$cmd" = start ] || { echo "usage: slurm_local.sh start|stop DIR" >&2; exit 2; }
[ "$(id -u)" = 0 ] || skip "needs root (munged, slurmctld and slurmd run as system daemons)"

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null \
   || ! command -v sbatch >/dev/null; then
  command -v apt-get >/dev/null || skip "slurm-wlm/munge are missing and there is no apt-get to install them"
  export DEBIAN_FRONTEND=noninteractive
  { apt-get update -qq && apt-get install -y -qq slurm-wlm munge; } > "$dir/apt.log" 2>&1 \
    || skip "apt-get install slurm-wlm munge failed (see $dir/apt.log)"
fi

host=$(hostname -s)
# munge: the package made a key; its folders must belong to the munge user, which runs the daemon
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  mkdir -p /run/munge /var/lib/munge /var/log/munge
  [ -f /etc/munge/munge.key ] || { command -v mungekey >/dev/null && mungekey --create >/dev/null 2>&1; } \
    || skip "no /etc/munge/munge.key and mungekey could not make one"
  chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
  chmod 0700 /etc/munge /var/log/munge
  chmod 0755 /run/munge
  runuser -u munge -- munged || skip "munged did not start"
  touch "$dir/munged.started"
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.2; done
  munge -n | unmunge >/dev/null 2>&1 || skip "munge does not answer"
fi

mkdir -p "$dir/state" "$dir/spool" "$dir/log"
cat > "$dir/slurm.conf" <<EOF
# written by scripts/slurm_local.sh: a one-node test cluster
ClusterName=populora
SlurmctldHost=$host
SlurmUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
AuthType=auth/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=3600
ReturnToService=2
SlurmdParameters=config_overrides
GresTypes=gpu
NodeName=$host NodeAddr=127.0.0.1 CPUs=64 RealMemory=1000000 Gres=gpu:8 State=UNKNOWN
PartitionName=main Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
mkdir -p "$dir/dev"
for i in 0 1 2 3 4 5 6 7; do touch "$dir/dev/gpu$i"; done  # stand-ins: SLURM counts GPUs by their device files
cat > "$dir/gres.conf" <<EOF
AutoDetect=off
NodeName=$host Name=gpu File=$dir/dev/gpu[0-7]
EOF

stop_slurm  # daemons of an earlier start with this DIR
# a link this script made for a cluster whose test was killed before `stop` is stale: removed, not taken for
# another cluster's configuration. Ours: absolute, into a folder holding our mark (etc-link.made) whose
# slurmctld no longer runs, or into a folder since deleted (a dangling link configures nothing)
if [ -L /etc/slurm/slurm.conf ]; then
  old=$(readlink /etc/slurm/slurm.conf)
  old_dir=$(dirname "$old")
  old_pid=$(cat "$old_dir/slurmctld.pid" 2>/dev/null || true)
  if [ "${old#/}" != "$old" ] && { [ ! -e "$old_dir" ] || { [ -f "$old_dir/etc-link.made" ] \
      && ! { [ -n "$old_pid" ] && kill -0 "$old_pid" 2>/dev/null; }; }; }; then
    rm -f /etc/slurm/slurm.conf
  fi
fi
# Snakemake's job-step executor (snakemake-executor-plugin-slurm-jobstep 0.6.1) runs each job through
# an `srun` whose environment it strips of every SLURM_* variable, SLURM_CONF included: that srun
# reads /etc/slurm/slurm.conf. Link it to this configuration when there is none (removed by `stop`).
if [ "$(readlink /etc/slurm/slurm.conf 2>/dev/null)" != "$dir/slurm.conf" ]; then
  [ -e /etc/slurm/slurm.conf ] && skip "/etc/slurm/slurm.conf exists (this machine's own cluster?): not touching it"
  mkdir -p /etc/slurm && ln -s "$dir/slurm.conf" /etc/slurm/slurm.conf && touch "$dir/etc-link.made"
fi
export SLURM_CONF=$dir/slurm.conf
slurmctld -f "$dir/slurm.conf" || skip "slurmctld did not start (see $dir/log/slurmctld.log)"
slurmd -f "$dir/slurm.conf" || skip "slurmd did not start (see $dir/log/slurmd.log)"
for _ in $(seq 60); do
  state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
  case $state in
    idle*|mix*|alloc*) echo "slurm_local: node $host is $state (SLURM_CONF=$dir/slurm.conf)"; exit 0 ;;
    down*|drain*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
  esac
  sleep 1
done
skip "the node did not come up (state '${state:-none}'; see $dir/log/)"
