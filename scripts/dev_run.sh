#!/usr/bin/env bash
# Run one paper's workflow in its own scratch workspace, so several papers can be worked on at once without
# Snakemake's directory lock or a shared results/ (developer tool; tests use tests/conftest.py's workspace).
#   bash scripts/dev_run.sh PAPER [PROFILE] [extra snakemake args...]
# The workspace (/tmp/paperflow-dev/PAPER-PROFILE) links this checkout's src/, params.yaml, resources/ and
# sources/, so edits take effect at once; its results/, logs/, reports/ and mlflow.db are its own.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PAPER=${1:?usage: dev_run.sh PAPER [PROFILE] [snakemake args]}
PROFILE=${2:-smoke}
shift $(( $# >= 2 ? 2 : 1 ))
WS=${PAPERFLOW_DEV_ROOT:-/tmp/paperflow-dev}/$PAPER-$PROFILE
mkdir -p "$WS"
rm -rf "$WS/workflow" "$WS/profiles" && cp -r "$ROOT/workflow" "$WS/workflow" && cp -r "$ROOT/profiles" "$WS/profiles"
cp "$ROOT/Snakefile" "$WS/Snakefile"
for link in src params.yaml resources sources preregistration.lock; do
  [ -e "$WS/$link" ] || ln -s "$ROOT/$link" "$WS/$link"
done
cd "$WS"
[ -d .git ] || git init -q
exec "$ROOT/.venv/bin/snakemake" --cores "${CORES:-2}" all --config profile="$PROFILE" "only=[$PAPER]" "$@"
