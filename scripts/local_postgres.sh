#!/usr/bin/env bash
# A PostgreSQL database for a shared MLflow tracking server (README "MLflow"; tests/test_scaleout.py).
#   scripts/local_postgres.sh start [PORT]   install Debian postgresql when missing (as root), create and start
#                                            cluster "paperflow" on PORT (5433), user/database paperflow/mlflow;
#                                            prints the backend-store URI for `mlflow server`
#   scripts/local_postgres.sh stop           stop that cluster; its data (every tracked run) is kept
#   scripts/local_postgres.sh stop --purge   stop and drop the cluster with all its tracking data
set -euo pipefail
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
cmd=${1:-start}
port=${2:-5433}
name=paperflow
if ! command -v pg_createcluster >/dev/null; then
  echo "[local_postgres] installing postgresql" >&2
  as_root apt-get update -qq >/dev/null
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql >/dev/null
fi
version=$(ls /usr/lib/postgresql | sort -V | tail -1)
if [ "$cmd" = stop ]; then
  if [ "${2:-}" = --purge ]; then
    as_root pg_dropcluster --stop "$version" "$name" 2>/dev/null || true
    echo "[local_postgres] cluster $name dropped with its data" >&2
  else
    as_root pg_ctlcluster "$version" "$name" stop 2>/dev/null || true
    echo "[local_postgres] cluster $name stopped; its data is kept (stop --purge drops it)" >&2
  fi
  exit 0
fi
if ! pg_lsclusters -h | awk '{print $2}' | grep -qx "$name"; then
  as_root pg_createcluster "$version" "$name" --port "$port" >/dev/null
fi
as_root pg_ctlcluster "$version" "$name" start 2>/dev/null || true
port=$(pg_lsclusters -h | awk -v n="$name" '$2 == n {print $3}')
psql_() { as_root su postgres -c "psql -p $port -qtAc \"$1\""; }
for _ in $(seq 1 30); do psql_ "select 1" >/dev/null 2>&1 && break; sleep 0.5; done
[ "$(psql_ "select 1 from pg_roles where rolname='paperflow'")" = 1 ] || psql_ "create user paperflow password 'paperflow'" >/dev/null
[ "$(psql_ "select 1 from pg_database where datname='mlflow'")" = 1 ] || psql_ "create database mlflow owner paperflow" >/dev/null
echo "postgresql://paperflow:paperflow@127.0.0.1:${port}/mlflow"
