#!/usr/bin/env bash
# Set up (scripts/setup.sh) and run the whole test suite; .ci/run calls exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export MLFLOW_DISABLE_TELEMETRY=true
exec .venv/bin/python -m pytest -q "$@"
