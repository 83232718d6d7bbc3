#!/usr/bin/env bash
# The one check command: lint, types, tests. Used by developers and by CI.
set -euo pipefail
cd "$(dirname "$0")/.."
ruff check .
ruff format --check .
# Types and the code's metrics (sizes, import cycles, imports that climb a layer) are checked
# beside the tests, at the lowest priority, in the CPU time the tests leave idle waiting on
# timeouts and engines (mypy without a cache takes ~16 s of a core); their output is printed
# after the tests'. Their own process group, so that an interrupted check stops them too.
static=$(mktemp)
setsid --wait nice -n 19 bash -c 'mypy && python scripts/code_metrics.py --check' >"$static" 2>&1 &
static_pid=$!
trap 'if [ -n "$static_pid" ]; then kill -TERM -- -"$static_pid" 2>/dev/null || true; fi; rm -f "$static"' EXIT
trap 'exit 130' INT TERM
# Every runner and worker process the tests start imports ~250 modules of ours: with
# PYTHONDONTWRITEBYTECODE set (as in some shells and CI images) each compiled them again
# (~0.07 s of CPU a process, hundreds of processes), so it is unset. Bytecode goes where Python
# puts it by default (__pycache__, ignored by git): a PYTHONPYCACHEPREFIX would also leave unused
# the bytecode pip compiled for the installed packages, compiling them again in each new clone.
unset PYTHONDONTWRITEBYTECODE
status=0
# In parallel (pytest-xdist), by default two workers more than this process may use CPUs (at
# most 8): a test often waits on something other than the CPU (a hung command's timeout, a rate
# limit's minute window, a container engine). On 2 cores, 4 workers took 413-441 s where 3 took
# 497 (the cores idle 70 CPU-s of the run instead of 158); many more workers than CPUs overload
# the machine and the tests bound in time (a node lost on Ray, kills racing commands) fail.
# --dist loadgroup keeps the tests sharing a module-scoped fixture, or the Ray cluster, on one
# worker (tests/conftest.py marks them). PYTEST_WORKERS=0 runs them in this process, one after another.
# The 25 slowest tests are listed at the end: where the suite's time goes.
# Tests that talk to a real remote endpoint (marker `live`) are opt-in: LIVE_ENDPOINT_TESTS=1.
live=(-m "not live")
[ "${LIVE_ENDPOINT_TESTS:-}" = 1 ] && live=()
cpus=$(python -c 'import os; print(len(os.sched_getaffinity(0)))')
workers=${PYTEST_WORKERS:-$((cpus < 6 ? cpus + 2 : 8))}
python -m pytest -q -n "$workers" --dist loadgroup --durations=25 "${live[@]}" "$@" || status=$?
echo "--- types and metrics (mypy, scripts/code_metrics.py)"
static_status=0
wait "$static_pid" || static_status=$?
static_pid=
cat "$static"
# pytest exits 5 when no test was collected: that is a failure for us too. Its status first.
exit $((status ? status : static_status))
