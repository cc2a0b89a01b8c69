#!/usr/bin/env bash
# A single-node SLURM on this machine, for testing the workflow's SLURM profile (tests/test_scaleout.py).
#   scripts/local_slurm.sh start   install (Debian slurm-wlm + munge, as root) when missing, configure, start
#   scripts/local_slurm.sh stop    stop the slurmd, slurmctld and munged this script started (their pids, never by name)
# It refuses to overwrite an /etc/slurm/slurm.conf it did not write (a site's own SLURM).
# Facts behind each line, measured on this kind of machine (no systemd here; the config must sit at slurm's default path
# because the job-step plugin strips SLURM_CONF; without accounting, use --slurm-status-command squeue).
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
cmd=${1:-start}
marker="# written by paperflow scripts/local_slurm.sh"
pids=${PAPERFLOW_SLURM_PIDS:-/run/paperflow-local-slurm.pids}  # "name pid" of each daemon this script started
if [ "$cmd" = stop ]; then
  if [ -f "$pids" ]; then
    while read -r name pid; do
      if [ -n "$pid" ] && [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = "$name" ]; then as_root kill "$pid" || true; fi
    done < "$pids"
    as_root rm -f "$pids"
  fi
  exit 0
fi
conf_dir=${PAPERFLOW_SLURM_CONF_DIR:-/etc/slurm}  # tests point this elsewhere to check the refusal
if [ -f "$conf_dir/slurm.conf" ] && ! head -1 "$conf_dir/slurm.conf" | grep -qxF "$marker"; then
  echo "[local_slurm] $conf_dir/slurm.conf exists and was not written by this script: refusing to overwrite a site's SLURM" >&2
  exit 2
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  echo "[local_slurm] installing slurmctld slurmd slurm-client munge"
  as_root apt-get update -qq >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))
as_root mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
as_root tee "$conf_dir/slurm.conf" >/dev/null <<CONF
$marker
ClusterName=paperflow
SlurmctldHost=${host}(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MinJobAge=300
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
NodeName=${host} NodeAddr=127.0.0.1 CPUs=${cpus} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
CONF
started() {  # record a daemon this script started, by the pid its pidfile or pgrep -n gives right after the start
  local name=$1 pid
  pid=$(pgrep -n -x "$name" || true)
  [ -n "$pid" ] && echo "$name $pid" | as_root tee -a "$pids" >/dev/null
}
if ! pgrep -x munged >/dev/null; then
  as_root chown -R munge:munge /run/munge 2>/dev/null || true
  as_root su -s /bin/sh munge -c "munged" 2>/dev/null || as_root munged --force
  started munged
fi
if ! pgrep -x slurmctld >/dev/null; then as_root slurmctld -i; started slurmctld; fi
if ! pgrep -x slurmd >/dev/null; then as_root slurmd; started slurmd; fi
for _ in $(seq 1 60); do
  if sinfo -h -o "%T" 2>/dev/null | grep -qE "idle|mixed|allocated"; then
    echo "[local_slurm] ready: $(sinfo -h -o '%P %D %T %c CPUs')"
    exit 0
  fi
  as_root scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true
  sleep 1
done
echo "[local_slurm] SLURM did not become ready; logs in /var/log/slurm" >&2
sinfo >&2 || true
exit 1
