"""Run a script (the runner) under tracemalloc and write what holds the parent's memory.

    python bench/million_trace.py OUT.txt batch_runner.py --flag=... ...

Used by `run_size.py --trace=FILE`: a thread snapshots the traced memory every few seconds and
keeps the largest; at exit the top allocation sites (file:line, size, count) of that snapshot go
to OUT.txt. A site whose count grows with the run's prompts is something kept per prompt.
Forked children (the fork server, the workers) stop tracing: only the parent is measured.
"""

from __future__ import annotations

import atexit
import os
import runpy
import sys
import threading
import tracemalloc

TOP = 30


def main() -> None:
    out, script, *args = sys.argv[1:]
    parent = os.getpid()
    tracemalloc.start(1)
    os.register_at_fork(after_in_child=tracemalloc.stop)
    best: list[tracemalloc.Snapshot] = []
    peak = [0]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(3.0):
            traced = tracemalloc.get_traced_memory()[0]
            if traced > peak[0] and os.getpid() == parent:
                peak[0] = traced
                best[:] = [tracemalloc.take_snapshot()]

    def dump() -> None:
        if os.getpid() != parent or not best:
            return
        stop.set()
        stats = best[0].statistics("lineno")
        with open(out, "w") as handle:
            handle.write(f"traced at the largest snapshot: {peak[0] / 2**20:.1f} MiB\n")
            for stat in stats[:TOP]:
                frame = stat.traceback[0]
                handle.write(
                    f"{stat.size / 2**20:8.2f} MiB {stat.count:9d}  {frame.filename}:{frame.lineno}\n"
                )

    threading.Thread(target=sample, daemon=True).start()
    atexit.register(dump)
    sys.argv = [script, *args]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
