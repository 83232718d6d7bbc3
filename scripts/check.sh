#!/usr/bin/env bash
# The one check command: lint, types, tests. Used by developers and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
mypy
python scripts/code_metrics.py --check  # sizes, import cycles, imports that climb a layer
# Every runner and worker process the tests start imports ~250 modules of ours: with
# PYTHONDONTWRITEBYTECODE set (as in some shells and CI images) each compiled them again
# (~0.07 s of CPU a process, hundreds of processes). Their bytecode is cached here instead,
# outside the source tree.
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-$PWD/.pytest_cache/pycache}"
unset PYTHONDONTWRITEBYTECODE
status=0
# In parallel (pytest-xdist), two workers by default: with four on two cores the load passed 40
# and timing-bound tests (a node lost on Ray, kills racing commands) failed that pass alone.
# --dist loadgroup keeps the tests sharing a module-scoped fixture on one worker (tests/conftest.py
# marks them). PYTEST_WORKERS=0 runs them in this process, one after another.
# The 25 slowest tests are listed at the end: where the suite's time goes.
# Tests that talk to a real remote endpoint (marker `live`) are opt-in: LIVE_ENDPOINT_TESTS=1.
live=(-m "not live")
[ "${LIVE_ENDPOINT_TESTS:-}" = 1 ] && live=()
python -m pytest -q -n "${PYTEST_WORKERS:-2}" --dist loadgroup --durations=25 "${live[@]}" "$@" || status=$?
# pytest exits 5 when no test was collected: that is a failure for us too.
exit "$status"
