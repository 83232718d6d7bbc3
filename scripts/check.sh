#!/usr/bin/env bash
# The one check command: lint, types, tests. Used by developers and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
mypy
python scripts/code_metrics.py --check  # sizes, import cycles, imports that climb a layer
status=0
python -m pytest -q "$@" || status=$?
# pytest exits 5 when no test was collected: that is a failure for us too.
exit "$status"
