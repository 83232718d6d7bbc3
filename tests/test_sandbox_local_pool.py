"""The local backend's slot pool: a reused slot is as clean as a new one, and nothing outlives the pool."""

from __future__ import annotations

import asyncio
import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.errors import SandboxError
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions, blocking, sandbox_pool, sandbox_session
from agent.sandboxes.blocking import opened_in_thread
from agent.sandboxes.local.sandbox import LocalSandbox, open_pool

SPEC = SandboxSpec(run_name="pool-run", prompt_key="p")
pytestmark = pytest.mark.anyio
REPO = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _run_script(script: str, root: Path) -> Any:
    """Run `script` in a Python process of its own (one that may adopt orphans) with the
    sandbox root as its argument; what it printed, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(root)], capture_output=True, text=True, check=False, cwd=REPO
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_a_reused_slot_is_empty_whatever_the_last_prompt_did(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("host file")
    options = SandboxOptions(root=str(tmp_path / "sandboxes"))
    async with open_pool(options, "pool-run") as factory:
        async with factory(SandboxSpec("pool-run", "first", cwd="/app")) as first:
            slot = first.root
            await first.write_file("notes.txt", b"secret of the first prompt")
            script = (
                f"mkdir -p deep/er && touch deep/er/f ~/.history $TMPDIR/t && rm -rf ../home && "
                f"ln -s {outside} ../home && ln -s {outside} ../link && chmod 000 deep ../workspace"
            )
            assert (await first.exec(script, timeout=30)).exit_code == 0
            pid = int((await first.exec("sleep 300 > /dev/null 2>&1 & echo $!", timeout=30)).output)
        assert not _alive(pid)
        async with factory(SPEC) as second:
            assert second.root == slot  # the same slot, handed out again
            assert sorted(os.listdir(slot)) == ["home", "tmp", "workspace"]
            for name in ("home", "tmp", "workspace"):
                info = os.lstat(os.path.join(slot, name))
                assert stat.S_ISDIR(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o700
                assert os.listdir(os.path.join(slot, name)) == []
            with pytest.raises(FileNotFoundError):
                await second.read_file("notes.txt")
    assert (outside / "keep.txt").read_text() == "host file"  # the symlink was removed, not followed
    assert list((tmp_path / "sandboxes").iterdir()) == []  # pool, marker and run dir are gone


async def test_sandboxes_open_at_once_get_their_own_slots(tmp_path: Path) -> None:
    pool = open_pool(SandboxOptions(root=str(tmp_path)), "pool-run")
    async with pool as factory, factory(SPEC) as a, factory(SPEC) as b:
        await a.write_file("mine.txt", b"a")
        assert a.root != b.root
        with pytest.raises(FileNotFoundError):
            await b.read_file("mine.txt")


async def test_a_closed_sandbox_cannot_touch_its_old_slot(tmp_path: Path) -> None:
    async with open_pool(SandboxOptions(root=str(tmp_path)), "pool-run") as factory:
        async with factory(SPEC) as old:
            pass
        async with factory(SPEC) as new:
            await new.write_file("data.txt", b"the new prompt's")
            assert new.root == old.root
            with pytest.raises(SandboxError, match="closed"):
                await old.read_file("data.txt")
            with pytest.raises(SandboxError, match="closed"):
                await old.write_file("data.txt", b"overwritten")
            with pytest.raises(SandboxError, match="closed"):
                await old.exec("true", timeout=5)
            assert (await new.read_file("data.txt")) == b"the new prompt's"


async def test_leaving_the_pool_kills_what_a_sandbox_left_running(tmp_path: Path) -> None:
    options = SandboxOptions(root=str(tmp_path / "sandboxes"))
    async with open_pool(options, "pool-run") as factory:
        context = factory(SPEC)
        sandbox = await context.__aenter__()  # never closed: the pool must still clean up after it
        pid = int((await sandbox.exec("setsid sleep 300 > /dev/null 2>&1 & echo $!", timeout=30)).output)
        assert _alive(pid)
    assert not _alive(pid)
    assert list((tmp_path / "sandboxes").iterdir()) == []


async def test_the_registry_pools_local_sandboxes_only(tmp_path: Path) -> None:
    async with sandbox_pool(SandboxOptions(root=str(tmp_path)), "pool-run") as factory:
        async with factory(SPEC) as first:
            slot = first.root
        async with factory(SPEC) as second:
            assert second.root == slot


_ADOPTER = """
import asyncio, json, os, sys, threading
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.host import orphans
from agent.sandboxes.local.sandbox import open_pool

def in_a_thread(sandbox, command):
    # A command started from another thread's event loop: its orphans go to our main thread.
    return asyncio.run(sandbox.exec(command, timeout=30))

async def main(seen):
    async with open_pool(SandboxOptions(root=sys.argv[1]), "adopt") as factory:
        async with factory(SandboxSpec("adopt", "b")) as b:
            escaped_b = int((await b.exec("setsid sleep 303 > /dev/null 2>&1 & echo $!", timeout=30)).output)
            async with factory(SandboxSpec("adopt", "a")) as a:
                script = "setsid sleep 301 >/dev/null 2>&1 & echo $!; (setsid sleep 302 >/dev/null & echo $!)"
                escaped_a = [int(p) for p in (await a.exec(script, timeout=30)).output.split()]
                # A stray of a command another thread started, that thread still alive when a
                # closes: the kernel gives the orphan to our main thread, whose children we read.
                leave = "setsid sleep 304 >/dev/null 2>&1 & echo $!"
                started, release = threading.Event(), threading.Event()
                def side():
                    escaped_a.append(int(in_a_thread(a, leave).output))
                    started.set()
                    release.wait()
                starter = threading.Thread(target=side)
                starter.start()
                await asyncio.to_thread(started.wait)
                await a.exec("(sleep 0.05 &)", timeout=30)  # an orphan that ends on its own: our zombie
                await asyncio.sleep(0.3)
                late = lambda: seen.update(code=in_a_thread(b, "sleep 0.5; exit 7").exit_code)
                running = threading.Thread(target=late)
                running.start()
                await asyncio.sleep(0.1)
            release.set()
            starter.join()
            stat = lambda pid: open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
            states = {pid: stat(pid) for pid in orphans._children()}
            seen.update(escaped_a=escaped_a, escaped_b=escaped_b, children_after_a=states)
            running.join()

assert orphans.adopt_orphans()
seen = {}
asyncio.run(main(seen))
print(json.dumps(seen))
"""


def test_an_adopting_process_finds_strays_among_its_children_and_reaps_only_orphans(tmp_path: Path) -> None:
    seen = _run_script(_ADOPTER, tmp_path)
    assert all(not _alive(pid) for pid in seen["escaped_a"])
    assert not _alive(seen["escaped_b"])  # killed when b closed
    children = {int(pid): state for pid, state in seen["children_after_a"].items()}
    assert seen["escaped_b"] in children and children[seen["escaped_b"]] != "Z"  # b's stray lived on
    assert "Z" not in children.values()  # a's ended orphan was reaped, not left a zombie
    assert seen["code"] == 7  # b's command, running while a closed, was not reaped by a's close
    assert list(tmp_path.iterdir()) == []


_ON_THE_LOOP = """
import asyncio, json, os, sys
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions, blocking, sandbox_session
from agent.sandboxes.host import orphans
from agent.sandboxes.local.sandbox import open_pool

class Counting:  # every thread the sandboxes start (blocking.in_thread: one per call)
    handed = 0
    def __init__(self, start):
        self.start = start
    def __call__(self, func):
        Counting.handed += 1
        return self.start(func)

blocking.own_thread = Counting(blocking.own_thread)

assert orphans.adopt_orphans()
PROMPTS = {
    "few_files": "echo a > a; echo b > ~/b; echo c > $TMPDIR/c",
    "a_tree": "mkdir -p deep/er && touch deep/er/f",
    "many_files": "touch f{1..70}",
    "a_stray": "setsid sleep 300 > /dev/null 2>&1 & echo $!",
}

async def main():
    seen = {}
    async with open_pool(SandboxOptions(root=sys.argv[1]), "loop") as factory:
        for name, script in PROMPTS.items():
            before = Counting.handed
            async with sandbox_session(factory, SandboxSpec("loop", name)) as sandbox:
                slot = sandbox.root
                result = await sandbox.exec(script, timeout=30)
                assert result.exit_code == 0, result
            left = {d: os.listdir(os.path.join(slot, d)) for d in sorted(os.listdir(slot))}
            seen[name] = {"slot": slot, "left": left, "output": result.output,
                          "threads_used": Counting.handed - before}
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_sandboxes_open_and_close_on_the_event_loop_and_only_heavy_closes_take_a_thread(
    tmp_path: Path,
) -> None:
    seen = _run_script(_ON_THE_LOOP, tmp_path)
    assert len({prompt["slot"] for prompt in seen.values()}) == 1  # one slot, reused every time
    empty = {"home": [], "tmp": [], "workspace": []}
    assert all(prompt["left"] == empty for prompt in seen.values())
    assert seen["few_files"]["threads_used"] == 0  # commands, opening and closing: all on the loop
    assert seen["a_tree"]["threads_used"] == 1  # deleting a directory tree went to a thread
    assert seen["many_files"]["threads_used"] == 1  # so did deleting more than a few files
    assert seen["a_stray"]["threads_used"] == 1  # and killing what was left running
    assert not _alive(int(seen["a_stray"]["output"]))  # killed when its sandbox closed
    assert list(tmp_path.iterdir()) == []


class _Counting:
    """Counts the threads the sandboxes start (`blocking.in_thread`: one per call)."""

    def __init__(self, start: Callable[[Callable[[], Any]], Any]) -> None:
        self.start = start
        self.handed = 0

    def __call__(self, func: Callable[[], Any]) -> Any:
        self.handed += 1
        return self.start(func)


def test_a_sandbox_closed_from_the_loop_outside_an_adopting_process_is_cleaned_in_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    executor = _Counting(blocking.own_thread)
    monkeypatch.setattr(blocking, "own_thread", executor)

    async def prompt() -> tuple[str, int]:
        async with open_pool(SandboxOptions(root=str(tmp_path)), "pool-run") as factory:
            async with sandbox_session(factory, SPEC) as sandbox:
                assert isinstance(sandbox, LocalSandbox)
                command = "touch kept; setsid sleep 300 > /dev/null 2>&1 & echo $!"
                out = await sandbox.exec(command, timeout=30)
                assert executor.handed == 0  # opening and the command: on the loop
            assert executor.handed == 1  # closing: strays are known cheaply only to an adopter
            assert os.listdir(os.path.join(sandbox.root, "workspace")) == []
            return sandbox.root, int(out.output)

    _, pid = asyncio.run(prompt())
    assert not _alive(pid)


def test_a_blocking_sandbox_opening_in_a_thread_is_destroyed_when_cancelled_twice_meanwhile() -> None:
    """The thread path (bwrap and docker, through `opened_in_thread`): a cancellation, even a
    second one, while the sandbox is being created waits for the creation, destroys the
    sandbox, then goes on. `Slow` is a test double of a blocking sandbox manager: what is under
    test is the lifecycle's timing, which a real backend cannot hold still for."""
    events: list[str] = []
    entering = threading.Event()

    class Slow:
        def __enter__(self) -> Any:
            entering.set()
            time.sleep(0.3)
            events.append("created")
            return object()

        def __exit__(self, *_: object) -> None:
            time.sleep(0.1)
            events.append("destroyed")

    async def main() -> None:
        async def use() -> None:
            async with sandbox_session(lambda spec: opened_in_thread(Slow()), SPEC):
                events.append("used")  # never reached

        task = asyncio.create_task(use())
        await asyncio.to_thread(entering.wait, 5)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        events.append("cancellation seen")

    asyncio.run(main())
    assert events == ["created", "destroyed", "cancellation seen"]
