"""What starting a long-running process in a sandbox costs (`Sandbox.spawn`, what a stdio MCP
server pays once per conversation): per backend, the time from `spawn` to the first line
echoed back by `cat`, and the time to leave its block (the kill, waited for). Medians over
--rounds, in one sandbox per backend.

    python bench/sandbox_spawn.py [--rounds 20] [--backends local,bwrap,docker,podman]

docker and podman need DOCKER_HOST / PODMAN_HOST (source /work/devenv.sh); a backend that
cannot run here is reported as such and skipped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.protocols import Sandbox, SandboxOptions, SandboxSpec
from agent.sandboxes.bwrap.sandbox import open_sandbox as open_bwrap
from agent.sandboxes.bwrap.sandbox import unavailable_reason as bwrap_unavailable
from agent.sandboxes.docker.engine import close_clients
from agent.sandboxes.docker.sandbox import open_sandbox as open_docker
from agent.sandboxes.docker.sandbox import unavailable_reason as docker_unavailable
from agent.sandboxes.local.sandbox import open_sandbox as open_local

SPEC = SandboxSpec(run_name="bench-spawn", prompt_key="p0")
IMAGE = "python:3.11-slim"
Opener = Callable[[], AbstractAsyncContextManager[Sandbox]]


def _opener(name: str, root: str) -> tuple[Opener | None, str]:
    """How to open the backend's sandbox, or why it cannot run here."""
    if name == "local":
        options = SandboxOptions(backend="local", root=root)
        return (lambda: open_local(SPEC, options)), ""
    if name == "bwrap":
        options = SandboxOptions(backend="bwrap", root=root)
        why = bwrap_unavailable(options)
        return (None, why) if why else ((lambda: open_bwrap(SPEC, options)), "")
    url = os.environ.get("DOCKER_HOST" if name == "docker" else "PODMAN_HOST", "")
    if not url:
        return None, "no engine address in the environment"
    os.environ["DOCKER_HOST"] = url
    close_clients()
    options = SandboxOptions(backend="docker", default_image=IMAGE)
    why = docker_unavailable(options)
    return (None, why) if why else ((lambda: open_docker(SPEC, options)), "")


async def _measure(opener: Opener, rounds: int) -> tuple[list[float], list[float]]:
    firsts, exits = [], []
    async with opener() as sandbox:
        for _ in range(rounds + 1):  # the first round warms caches (an image's first exec, imports)
            started = time.perf_counter()
            spawned = sandbox.spawn(["cat"])
            process = await spawned.__aenter__()
            await process.send(b"ping\n")
            line = b""
            while b"\n" not in line:
                line += await process.receive()
            first = time.perf_counter()
            await spawned.__aexit__(None, None, None)
            firsts.append(first - started)
            exits.append(time.perf_counter() - first)
    return firsts[1:], exits[1:]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--backends", default="local,bwrap,docker,podman")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="bench-spawn-")
    os.chmod(root, 0o755)  # a root runner's bwrap enters it under another uid
    print(f"{'backend':8} {'first line (median ms)':>24} {'block exit (median ms)':>24}")
    for name in args.backends.split(","):
        opener, why = _opener(name, root)
        if opener is None:
            print(f"{name:8} not measured: {why}")
            continue
        firsts, exits = asyncio.run(_measure(opener, args.rounds))
        first, leave = statistics.median(firsts) * 1000, statistics.median(exits) * 1000
        print(f"{name:8} {first:>24.1f} {leave:>24.1f}")
    os.rmdir(root)


if __name__ == "__main__":
    main()
