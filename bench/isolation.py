"""Isolation figures: what hostile commands leave behind, what process tracking costs, how fast
`--prompt_timeout` frees a bwrap prompt's processes.

    python bench/isolation.py [--cycles 200]              # this checkout
    AGENT_CHECKOUT=/path/to/other/checkout python bench/isolation.py --only cost   # to compare
    (never --only left on a checkout from before mount detaching: its cleanup deletes through
    the bind mount)

  left       processes and mounts left on the host by the hostile commands (setsid after `cd /`
             without HOME, a daemon with HOME=/, one holding a directory fd, a tmpfs and a bind
             mount in the workspace), per backend: the default (`auto`) and local
  cost       local sandbox open + one command (`true`) + close, median over --cycles, in a
             process that adopts orphans as a batch worker does; with the cgroup tracking of
             this machine and without it (the fallback: process groups, cwd/HOME, fresh dirs)
  timeout    batch_runner.py, one prompt whose command is `sleep 600`, --sandbox=bwrap
             --prompt_timeout=3: seconds from the command's start until its process is gone

Runs as root for the mounts; sandboxes live in a fresh 0755 directory (a root runner's bwrap
sandboxes run under their own uid, which must be able to enter it).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, os.environ.get("AGENT_CHECKOUT") or str(Path(__file__).resolve().parents[1]))

from agent.protocols import SandboxFactory, SandboxSpec
from agent.sandboxes import SandboxOptions, resolve_backend, sandbox_pool
from agent.sandboxes.host import orphans

HOSTILE = (
    "cd / && env -u HOME setsid sleep 3105 >/dev/null 2>&1 &",
    "(cd / && HOME=/ setsid sh -c 'sleep 3106 >/dev/null 2>&1 &')",
    "exec 3<. && cd / && env -u HOME setsid sleep 3107 >/dev/null 2>&1 &",
    "mkdir -p t b && mount -t tmpfs tmpfs t; mount --bind {host_dir} b; true",  # never a real host dir
)
MARKERS = (b"sleep\x003105", b"sleep\x003106", b"sleep\x003107")
REPO = Path(__file__).resolve().parent.parent


def _processes_left() -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and any(m in (entry / "cmdline").read_bytes() for m in MARKERS):
                count += 1
        except OSError:
            continue
    return count


def _mounts_left(root: str) -> int:
    with open("/proc/self/mountinfo") as handle:
        return sum(1 for line in handle if f" {root}/" in line)


async def _hostile(options: SandboxOptions, host_dir: Path) -> None:
    async with sandbox_pool(options, "hostile") as factory:
        for prompt in range(3):  # later prompts reuse the slot of the first where they can
            async with factory(SandboxSpec("hostile", f"p{prompt}")) as sandbox:
                for command in HOSTILE:
                    await sandbox.exec(command.format(host_dir=host_dir), timeout=30)


def left(root: str) -> None:
    host_dir = Path(root) / "host-dir"  # bind-mounted into the workspace: must survive the cleanup
    host_dir.mkdir()
    (host_dir / "canary").write_text("host data")
    for flag in (None, "local"):
        name = resolve_backend(flag, root)
        asyncio.run(_hostile(SandboxOptions(backend=name, root=root), host_dir))
        time.sleep(0.2)  # SIGKILLed strays are reaped by init
        label = f"default ({name})" if flag is None else name
        found = f"processes {_processes_left()}, mounts {_mounts_left(root)}"
        print(f"left/{label}: {found}, bind-mounted dir intact: {(host_dir / 'canary').exists()}")


async def _cycle(factory: SandboxFactory, key: str) -> float:
    start = time.perf_counter()
    async with factory(SandboxSpec("cost", key)) as sandbox:
        await sandbox.exec("true", timeout=30)
    return time.perf_counter() - start


async def _interleaved(root: str, cycles: int, patched: dict[str, Callable[[], None]]) -> dict[str, float]:
    """Median ms per cycle of each variant, cycles interleaved so that the machine's load
    weighs on every variant alike; `patched` sets a variant up before each of its cycles."""
    times: dict[str, list[float]] = {name: [] for name in patched}
    async with sandbox_pool(SandboxOptions(backend="local", root=root), "cost") as factory:
        for cycle in range(cycles + 20):  # the first 20 warm up
            for name, prepare in patched.items():
                prepare()
                times[name].append(await _cycle(factory, f"{name}{cycle}"))
    return {name: statistics.median(found[20:]) * 1000 for name, found in times.items()}


def cost(root: str, cycles: int) -> None:
    orphans.adopt_orphans()  # as a batch worker of the local backend does
    try:
        from agent.sandboxes.host import cgroups
        from agent.sandboxes.local import tracking
    except ImportError:  # a checkout from before cgroup tracking
        medians = asyncio.run(_interleaved(root, cycles, {"before": lambda: None}))
        print(f"cost/before cgroups (process groups, cwd/HOME, reuse): {medians['before']:.2f} ms")
        return
    print(f"cost/{tracking.describe()}")
    join = tracking.PoolGroups.env

    def without_join() -> None:  # slots still reused, their commands never join the group
        tracking.PoolGroups.env = lambda self, group, memory=None: {}  # type: ignore[method-assign]

    def with_join() -> None:
        tracking.PoolGroups.env = join  # type: ignore[method-assign]

    medians = asyncio.run(_interleaved(root, cycles, {"cgroup": with_join, "none": without_join}))
    with_join()
    cgroups.hierarchy = lambda: None  # the fallback, as on a machine without a usable cgroup
    fallback = asyncio.run(_interleaved(root, cycles, {"fallback": lambda: None}))["fallback"]
    added = medians["cgroup"] - medians["none"]
    print(
        f"cost/open + `true` + close, median of {cycles}: cgroup {medians['cgroup']:.2f} ms, "
        f"untracked slot reuse {medians['none']:.2f} ms (added by tracking: {added:+.2f} ms); "
        f"fallback without cgroups (fresh dirs) {fallback:.2f} ms"
    )


def timeout(root: str) -> None:
    from agent.servers.simulated.replies import Turn
    from agent.servers.simulated.server import SimulatedEndpoint

    call = (("terminal", json.dumps({"command": "sleep 600"})),)
    with SimulatedEndpoint() as endpoint:
        endpoint.script("Sleep", [Turn(reasoning="r", tool_calls=call), Turn(content="done", reasoning="r")])
        dataset = Path(root) / "d.jsonl"
        dataset.write_text(json.dumps({"prompt": "Sleep"}) + "\n")
        argv = [sys.executable, str(REPO / "batch_runner.py"), f"--dataset_file={dataset}", "--batch_size=1"]
        argv += ["--run_name=t", "--sandbox=bwrap", "--prompt_timeout=3", f"--output_dir={root}/out"]
        argv += [f"--base_url={endpoint.base_url}", "--api_key=bench-key-0000"]
        env = {**os.environ, "TMPDIR": root, "PYTHONPATH": str(REPO)}
        with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as runner:
            started = _when(lambda: _count(b"sleep\x00600") > 0, 60)
            gone = _when(lambda: _count(b"sleep\x00600") == 0, 120)
            code = runner.wait(timeout=120)
            ended = time.monotonic()
    print(
        f"timeout/bwrap --prompt_timeout=3: `sleep 600` gone {gone - started:.2f} s after it started "
        f"(the 3 s count from the prompt's start); runner exited {ended - gone:.2f} s later, code {code}"
    )


def _count(marker: bytes) -> int:
    count = 0
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "cmdline").read_bytes().startswith(marker):
                count += 1
        except OSError:
            continue
    return count


def _when(condition: Callable[[], bool], limit: float) -> float:
    deadline = time.monotonic() + limit
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.01)
    return time.monotonic()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--cycles", type=int, default=200)
    parser.add_argument("--only", choices=("left", "cost", "timeout"))
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="isolation-bench-")
    os.chmod(root, 0o755)
    try:
        if args.only in (None, "left"):
            left(root)
        if args.only in (None, "cost"):
            cost(root, args.cycles)
        if args.only in (None, "timeout"):
            timeout(root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
