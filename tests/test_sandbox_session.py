"""The sandbox registry and a sandbox's lifecycle from the loop: backends by name, loaded lazily,
and the throttle on concurrent creations."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ConfigError
from agent.protocols import SandboxSpec
from agent.sandboxes import BACKENDS, backend, sandbox_session, throttled
from agent.sandboxes.blocking import opened_in_thread

REPO = Path(__file__).resolve().parent.parent
SPEC = SandboxSpec(run_name="session-run", prompt_key="p")


def test_every_backend_is_found_by_name_and_only_local_pools() -> None:
    assert BACKENDS == ("local", "bwrap", "docker")
    assert backend("local").pool is not None
    assert backend("bwrap").pool is None
    assert backend("docker").pool is None
    with pytest.raises(ConfigError, match="unknown sandbox backend 'nope'"):
        backend("nope")


_WITHOUT_DOCKER_SDK = """
import asyncio, sys
sys.modules["docker"] = None  # the optional SDK is not installed
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions, sandbox_factory, unavailable_reason

async def main():
    async with sandbox_factory(SandboxOptions(root=sys.argv[1]))(SandboxSpec("r", "k")) as sandbox:
        print((await sandbox.exec("echo local works", timeout=30)).output, end="")

print(unavailable_reason(SandboxOptions(backend="docker")))
asyncio.run(main())
"""


def test_a_backend_whose_dependency_is_missing_breaks_no_other(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_DOCKER_SDK, str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    reason, works = done.stdout.splitlines()
    assert reason.startswith("backend module failed to import") and "docker" in reason
    assert works == "local works"


def test_throttled_creations_wait_for_a_turn() -> None:
    """Blocking creations (bwrap, docker) are the ones a burst could pile up: at most `starts`
    run at once, and every sandbox still opens. `Slow` is a test double of a blocking sandbox
    manager: what is under test is how many creations overlap."""
    lock, creating, most = threading.Lock(), [0], [0]

    class Slow:
        def __enter__(self) -> Any:
            with lock:
                creating[0] += 1
                most[0] = max(most[0], creating[0])
            time.sleep(0.05)
            with lock:
                creating[0] -= 1
            return object()

        def __exit__(self, *_: object) -> None:
            pass

    async def main() -> int:
        factory = throttled(lambda spec: opened_in_thread(Slow()), 2)

        async def prompt() -> None:
            async with sandbox_session(factory, SPEC):
                await asyncio.sleep(0.05)

        await asyncio.gather(*(prompt() for _ in range(8)))
        return most[0]

    assert asyncio.run(main()) == 2
