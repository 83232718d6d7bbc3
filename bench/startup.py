"""Start-up benchmark (issue 26): how long the real `batch_runner.py` takes to answer `--help`,
and from process start (the moment this bench spawns it) to the first request at the endpoint,
for `--sandbox=local` and a 10,000-line JSONL dataset, with the model key in the environment
(so `conceal()` re-executes the script, as for a user who exported OPENAI_API_KEY).

    cd bench && python startup.py [--runs=5]                       # this tree
    git worktree add --detach /tmp/startup-base <commit>
    cd bench && python startup.py --base=/tmp/startup-base          # interleaved: base, this, …
    cd bench && python startup.py --breakdown                       # where the time of one run goes

Beside the figures, the floors on this machine: `python -c pass` and `python -c 'import openai'`
(the SDK builds its pydantic models at import: a cost no change of ours removes, paid by the
worker that makes the first request). The simulated endpoint runs in a process of its own,
started fresh for each run and idle before the runner is spawned; it records when its first
chat request arrived (`EndpointStats.first_request_at`, time.monotonic(), one clock for every
process). The run is stopped (SIGTERM, as Ctrl-C) as soon as that request came.

`--breakdown` runs once more with an audit hook (`sys.addaudithook`, from a sitecustomize put
first on PYTHONPATH, so in every process of the run) that notes, per process and relative to the
spawn: its start, the secret re-exec, the first import of a few modules, each open of the
dataset, each connection, and in workers `ctypes.dlopen` (worker_entry's `set_not_dumpable`
before the worker's imports, `_die_with_parent` after). The hook costs a little itself:
read it for the shape, the headline figures come from runs without it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from trees import tree_env

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the endpoint: this tree's, for both trees measured

KEY_ENV = {"OPENAI_API_KEY": "sk-bench-startup"}  # a key in the environment: conceal() re-executes
TRACE_ENV = "STARTUP_TRACE_FILE"
TRACED_IMPORTS = (
    "agent.cli.flags",
    "agent.cli.batch_cli",
    "agent.batch.run",
    "openai",
    "agent.batch.scheduler",
    "agent.batch.worker_entry",
    "agent.batch.worker",
    "uvloop",
)
SITECUSTOMIZE = """
import os, sys, time
_fd = os.open(os.environ[{trace!r}], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
_imports = set({imports!r})
def _note(what):
    os.write(_fd, ("%d %d %.6f %s\\n" % (os.getpid(), os.getppid(), time.monotonic(), what)).encode())
def _started():
    # this process's start (exec), from /proc: clock ticks since boot, CLOCK_BOOTTIME's zero
    ticks = int(open("/proc/self/stat").read().rsplit(")", 1)[1].split()[19])
    since = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    return time.monotonic() - since
_note("exec_at %.6f %s" % (_started(), " ".join(sys.argv)[:80]))
def _hook(event, args):
    if event == "import" and args[0] in _imports:
        _imports.discard(args[0])
        _note("import " + args[0])
    elif event == "open" and isinstance(args[0], str) and args[0].endswith("startup.jsonl"):
        _note("open dataset")
    elif event == "socket.connect" and "connect" not in _imports:  # a process's first only
        _imports.add("connect")
        _note("first connect " + str(args[1]))
    elif event == "os.exec":
        _note("exec")
    elif event == "ctypes.dlopen":
        _note("dlopen")
sys.addaudithook(_hook)
"""


def _serve(conn: Connection) -> None:
    """The simulated endpoint: says its URL, then when its first chat request came, then stops
    when told."""
    import uvloop

    from agent.servers.simulated.server import SimulatedEndpoint

    endpoint = SimulatedEndpoint(latency=0.0, record=False)

    async def serve() -> None:
        server = asyncio.create_task(endpoint.serve_forever(on_ready=lambda: conn.send(endpoint.base_url)))
        while endpoint.stats.first_request_at is None:
            await asyncio.sleep(0.002)
        conn.send(endpoint.stats.first_request_at)
        await asyncio.get_running_loop().run_in_executor(None, conn.recv)
        server.cancel()

    uvloop.run(serve())


def _wall(cmd: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one command: on a machine shared with other jobs the CPU
    seconds say what the command costs, the wall seconds what it cost to wait for a core too."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run(cmd, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def help_s(tree: Path) -> tuple[float, float]:
    return _wall([sys.executable, "batch_runner.py", "--help"], tree, tree_env(tree))


def floor_s(code: str) -> tuple[float, float]:
    return _wall([sys.executable, "-c", code], ROOT, tree_env(ROOT))


TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and every descendant alive now (and the children they reaped)."""
    total, stack = 0.0, [pid]
    while stack:
        current = stack.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            for task in os.listdir(f"/proc/{current}/task"):
                stack += map(int, Path(f"/proc/{current}/task/{task}/children").read_text().split())
        except OSError:  # gone meanwhile
            continue
        total += sum(int(x) for x in fields[11:15]) / TICKS  # utime, stime, cutime, cstime
    return total


def first_request_s(
    tree: Path, workdir: Path, label: str, trace: Path | None = None
) -> tuple[float, float, float]:
    """(when the runner was spawned, seconds from then to the endpoint's first chat request,
    CPU seconds the runner's processes had used by then)."""
    ours, theirs = multiprocessing.Pipe()
    endpoint = multiprocessing.get_context("spawn").Process(target=_serve, args=(theirs,))
    endpoint.start()
    theirs.close()
    base_url = ours.recv()
    time.sleep(0.3)  # the endpoint idle, as a remote one: the runner has the cores to itself
    cmd = [
        sys.executable, "batch_runner.py", f"--dataset_file={workdir / 'startup.jsonl'}", "--batch_size=100",
        f"--run_name={label}", f"--output_dir={workdir / 'runs'}", f"--base_url={base_url}",
        "--model=sim-model", "--distribution=terminal_only", "--sandbox=local",
    ]  # fmt: skip
    extra = dict(KEY_ENV)
    if trace is not None:
        extra |= {TRACE_ENV: str(trace), "PYTHONPATH": f"{trace.parent}:{tree_env(tree)['PYTHONPATH']}"}
    started = time.monotonic()
    runner = subprocess.Popen(
        cmd, cwd=tree, env=tree_env(tree, extra), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        if not ours.poll(60):
            raise SystemExit(f"{label}: no request in 60 s:\n{_stop(runner)}")
        first: float = ours.recv()
        cpu = tree_cpu_s(runner.pid)
    finally:
        err = _stop(runner)
        ours.send("stop")
        endpoint.join()
    if runner.returncode not in (0, 1, 130, -signal.SIGTERM):
        raise SystemExit(f"{label}: runner exited {runner.returncode}:\n{err[-3000:]}")
    return started, first - started, cpu


def _stop(runner: subprocess.Popen[bytes]) -> str:
    runner.send_signal(signal.SIGTERM)  # as Ctrl-C: workers stop, sandboxes are destroyed
    try:
        _, err = runner.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        runner.kill()
        _, err = runner.communicate()
    return err.decode(errors="replace")


def _dataset(path: Path, lines: int) -> None:
    with path.open("w") as fh:
        for i in range(lines):
            fh.write(json.dumps({"prompt": f"Start-up task number {i}: list the files."}) + "\n")


def _summary(name: str, values: list[float]) -> dict[str, Any]:
    return {
        "measure": name,
        "median_s": round(statistics.median(values), 3),
        "min_s": round(min(values), 3),
        "max_s": round(max(values), 3),
        "runs": [round(v, 3) for v in values],
    }


def breakdown(tree: Path, workdir: Path) -> None:
    """One traced run: each process's milestones, seconds after the spawn."""
    trace_dir = workdir / "trace"
    trace_dir.mkdir(exist_ok=True)
    (trace_dir / "sitecustomize.py").write_text(SITECUSTOMIZE.format(trace=TRACE_ENV, imports=TRACED_IMPORTS))
    trace = trace_dir / "events.txt"
    trace.unlink(missing_ok=True)
    started, first, _ = first_request_s(tree, workdir, "traced", trace)
    names: dict[int, str] = {}
    for line in trace.read_text().splitlines():
        pid, ppid, at, what = line.split(" ", 3)
        if what.startswith("exec_at "):
            _, exec_at, argv = what.split(" ", 2)
            kind = "worker" if "multiprocessing" in argv else "parent" if "batch_runner" in argv else argv
            names.setdefault(int(pid), f"{kind}[{pid}]")
            print(f"{float(exec_at) - started:7.3f}  {names[int(pid)]:22} process image starts (ppid {ppid})")
            what = "its Python starts (sitecustomize)"
        if float(at) - started <= first + 0.05:
            print(f"{float(at) - started:7.3f}  {names.get(int(pid), pid):22} {what[:70]}")
    print(f"{first:7.3f}  endpoint               first chat request")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--lines", type=int, default=10_000)
    parser.add_argument("--base", type=Path, help="another checkout, measured interleaved with this tree")
    parser.add_argument("--breakdown", action="store_true", help="one traced run of this tree, no figures")
    args = parser.parse_args()
    trees = {"this": ROOT} if args.base is None else {"base": args.base.resolve(), "this": ROOT}
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        workdir = Path(tmp)
        _dataset(workdir / "startup.jsonl", args.lines)
        if args.breakdown:
            breakdown(ROOT, workdir)
            return
        found: dict[str, list[float]] = {}

        def note(name: str, measured: tuple[float, float]) -> None:
            found.setdefault(f"{name} (wall)", []).append(measured[0])
            found.setdefault(f"{name} (CPU)", []).append(measured[1])

        for index in range(args.runs):
            note("python -c pass", floor_s("pass"))
            note("python -c 'import openai'", floor_s("import openai"))
            for name, tree in trees.items():
                note(f"{name}: --help", help_s(tree))
                note(f"{name}: spawn to first request", first_request_s(tree, workdir, f"{name}{index}")[1:])
            print(json.dumps({"run": index, **{k: round(v[-1], 3) for k, v in found.items()}}), flush=True)
        for name, values in found.items():
            print(json.dumps(_summary(name, values)))


if __name__ == "__main__":
    main()
