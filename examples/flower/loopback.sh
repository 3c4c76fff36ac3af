#!/usr/bin/env bash
# A real Flower deployment on this machine: a SuperLink and one SuperNode per client on 127.0.0.1, `flwr run` of this
# app against them, every process stopped at the end. Exits non-zero when the run ends without a stored result.
#   examples/flower/loopback.sh --output results-flower [--experiment run.json] [--round-timeout 60]
# Run it from the repository root after `make env` (it uses .venv's Python unless PYTHON is set).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-$here/../../.venv/bin/python}"
exec "$python" -m fedcompanion.flower.loopback "$@"
