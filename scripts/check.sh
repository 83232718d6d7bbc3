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
# In parallel (pytest-xdist), one worker more than the machine has cores by default: a worker
# often waits (a hung command's timeout, a rate limit's minute, a container engine), and on two
# cores three workers kept both busy 74 % of the time where two left 40 % idle (7:03 against
# 9:19 for the tests; four: 6:57 for 15 % more CPU). All passed with three on two cores and with
# this process tree held to 1.25 cores (a cgroup CPU quota, standing in for a slower machine).
# --dist loadgroup keeps the tests sharing a module-scoped fixture on one worker (tests/conftest.py
# marks them). PYTEST_WORKERS=0 runs them in this process, one after another.
# The 25 slowest tests are listed at the end: where the suite's time goes.
# Tests that talk to a real remote endpoint (marker `live`) are opt-in: LIVE_ENDPOINT_TESTS=1.
live=(-m "not live")
[ "${LIVE_ENDPOINT_TESTS:-}" = 1 ] && live=()
workers=${PYTEST_WORKERS:-$(($(nproc) + 1))}
python -m pytest -q -n "$workers" --dist loadgroup --durations=25 "${live[@]}" "$@" || status=$?
# pytest exits 5 when no test was collected: that is a failure for us too.
exit "$status"
