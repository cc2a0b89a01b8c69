#!/usr/bin/env bash
# A single-node SLURM on this machine, for testing the workflow's SLURM profile (tests/test_slurm.py).
#   scripts/local_slurm.sh start   install (Debian slurm-wlm + munge, as root) when missing, configure, start
#   scripts/local_slurm.sh stop    stop slurmd, slurmctld and munged
# Facts behind each line: shared/SCALEOUT.md (no systemd here; the config must sit at slurm's default path
# because the job-step plugin strips SLURM_CONF; without accounting, use --slurm-status-command squeue).
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
cmd=${1:-start}
if [ "$cmd" = stop ]; then
  as_root pkill -x slurmd || true; as_root pkill -x slurmctld || true; as_root pkill -x munged || true
  exit 0
fi
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  echo "[local_slurm] installing slurmctld slurmd slurm-client munge"
  as_root apt-get update -qq >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
fi
host=$(hostname -s)
cpus=$(nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 - 2048 ))
conf_dir=/etc/slurm
as_root mkdir -p "$conf_dir" /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
as_root tee "$conf_dir/slurm.conf" >/dev/null <<CONF
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
if ! pgrep -x munged >/dev/null; then
  as_root chown -R munge:munge /run/munge 2>/dev/null || true
  as_root su -s /bin/sh munge -c "munged" 2>/dev/null || as_root munged --force
fi
pgrep -x slurmctld >/dev/null || as_root slurmctld -i
pgrep -x slurmd >/dev/null || as_root slurmd
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
