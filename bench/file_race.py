"""The file-tool escape race (issue 20), longer than the tests run it: a process in the sandbox
exchanges a workspace directory with a symlink to a host directory holding a root-only canary
while the file tools read, write, patch and make directories through it.

    python bench/file_race.py                          # local, bwrap, docker; 5000 calls each
    python bench/file_race.py --backends bwrap --attempts 20000 --seconds 60

Prints, per backend: calls made, canary reads, files made in the host directory, whether the
canary changed, and the swaps the hostile process made meanwhile. Docker needs DOCKER_HOST
(and the python:3.11-slim image).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from contextlib import AbstractAsyncContextManager
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from tests.fixtures.file_race import make_host_dir, race


def _open(backend: str, base: str) -> AbstractAsyncContextManager[Any]:
    spec = SandboxSpec(run_name="file-race", prompt_key="p0")
    if backend == "local":
        from agent.sandboxes.local.sandbox import open_sandbox as local

        return local(spec, SandboxOptions(backend="local", root=os.path.join(base, "sandboxes")))
    if backend == "bwrap":
        from agent.sandboxes.bwrap.sandbox import open_sandbox as bwrap

        root = tempfile.mkdtemp(prefix="bwrap-race-")  # not under `base`: the sandbox uid must enter it
        os.chmod(root, 0o755)
        return bwrap(spec, SandboxOptions(backend="bwrap", memory_mb=512, pids_limit=64, root=root))
    from agent.sandboxes.docker.sandbox import open_sandbox as docker

    return docker(spec, SandboxOptions(backend="docker", default_image="python:3.11-slim", pids_limit=64))


async def _one(backend: str, attempts: int, seconds: float) -> None:
    with tempfile.TemporaryDirectory(prefix="file-race-") as base:
        host_dir = make_host_dir(base)
        async with _open(backend, base) as sandbox:
            lanes = 1 if backend == "local" else 4
            result = await race(sandbox, host_dir, attempts=attempts, seconds=seconds, lanes=lanes)
    print(
        f"{backend:6} calls={result.attempts:6} canary_reads={result.canary_reads:5} "
        f"created_outside={len(result.created_outside):5} canary_changed={bool(result.canary_changed)!s:5} "
        f"swaps={result.swaps}",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--backends", default="local,bwrap,docker")
    parser.add_argument("--attempts", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args()
    for backend in args.backends.split(","):
        asyncio.run(_one(backend, args.attempts, args.seconds))


if __name__ == "__main__":
    main()
