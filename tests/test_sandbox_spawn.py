"""`Sandbox.spawn` on every backend: a long-running program inside the sandbox with its stdin
and stdout as byte streams (what a stdio MCP server needs): round trips, big messages both
ways, the sandbox's environment and cwd, its exit, its stderr, a program not found, and
nothing of it left once its block is left or its sandbox closes (checked from the host)."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from agent.errors import SandboxError
from agent.protocols import Sandbox, SandboxOptions, SandboxProcess, SandboxSpec
from agent.sandboxes.bwrap.sandbox import open_sandbox as open_bwrap
from agent.sandboxes.docker.engine import close_clients
from agent.sandboxes.docker.lifecycle import LABEL_PID, LABEL_PROJECT
from agent.sandboxes.docker.sandbox import open_sandbox as open_docker
from agent.sandboxes.local.sandbox import open_sandbox as open_local
from tests.fixtures.containers import DEFAULT_IMAGE, ENGINES, connect

pytestmark = pytest.mark.anyio
SPEC = SandboxSpec(run_name="spawn", prompt_key="p0")
ECHO = (
    "import sys\nr, w = sys.stdin.buffer, sys.stdout.buffer\n"
    "while c := r.read1(65536):\n    w.write(c); w.flush()"
)
# The program prints "ready" once its child (same process group) and, with "setsid", a child
# in a session of its own run; every process of it carries MARK (its last argument) to be found.
FORKS = (
    "import subprocess, sys, time\n"
    "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', sys.argv[1]],"
    " start_new_session=s) for s in [False] + [True] * ('setsid' in sys.argv)]\n"
    "print('ready', flush=True); time.sleep(300)"
)
SILENT = "import time; print('up', flush=True); time.sleep(300)"
MB = 1 << 20


@dataclass(frozen=True)
class Opener:
    """Opens a fresh sandbox of the backend `name`."""

    name: str
    open: Callable[[], AbstractAsyncContextManager[Sandbox]]

    def __call__(self) -> AbstractAsyncContextManager[Sandbox]:
        return self.open()


BACKENDS = [
    pytest.param("local"),
    pytest.param("bwrap", marks=pytest.mark.bwrap),
    pytest.param("docker", marks=pytest.mark.docker),
    pytest.param("podman", marks=pytest.mark.docker),
]


def _engine(name: str, monkeypatch: pytest.MonkeyPatch) -> docker.DockerClient:
    client = connect(name)
    monkeypatch.setenv("DOCKER_HOST", os.environ[ENGINES[name]])
    return client


@pytest.fixture(params=BACKENDS)
def opener(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Opener]:
    """Opens a fresh sandbox of the backend; the runner's environment holds a secret."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-runner-secret")
    name = request.param
    if name == "local":
        options = SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))
        yield Opener(name, lambda: open_local(SPEC, options))
    elif name == "bwrap":
        request.getfixturevalue("bwrap_available")
        root = tempfile.mkdtemp(prefix="bwrap-spawn-")  # not tmp_path: the sandbox's uid must enter it
        os.chmod(root, 0o755)
        bwrap_options = SandboxOptions(backend="bwrap", memory_mb=512, pids_limit=64, root=root)
        yield Opener(name, lambda: open_bwrap(SPEC, bwrap_options))
        assert os.listdir(root) == [], "a sandbox directory was left behind"
        os.rmdir(root)
    else:
        client = _engine(name, monkeypatch)
        options = SandboxOptions(backend="docker", default_image=DEFAULT_IMAGE, memory_mb=256, pids_limit=64)
        yield Opener(name, lambda: open_docker(SPEC, options))
        close_clients()
        labels = [f"{LABEL_PROJECT}=1", f"{LABEL_PID}={os.getpid()}"]
        left = client.containers.list(all=True, filters={"label": labels})
        for container in left:
            container.remove(force=True)
        client.close()
        assert not left, "a container was left behind"


@asynccontextmanager
async def _sandbox(opener: Opener) -> AsyncIterator[Sandbox]:
    async with opener() as sandbox:
        yield sandbox


async def _line(process: SandboxProcess, timeout: float = 30.0) -> bytes:
    data = b""
    async with asyncio.timeout(timeout):
        while b"\n" not in data:
            chunk = await process.receive()
            assert chunk, f"EOF after {data!r}; stderr: {process.stderr_tail()}"
            data += chunk
    return data


async def _all(process: SandboxProcess, timeout: float = 30.0) -> bytes:
    data = b""
    async with asyncio.timeout(timeout):
        while chunk := await process.receive():
            assert len(chunk) <= 64 * 1024
            data += chunk
    return data


def _marked(mark: str) -> list[int]:
    """Live host processes whose command line holds `mark` (zombies are dead)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if mark.encode() not in handle.read().split(b"\0"):
                    continue
            with open(f"/proc/{name}/stat") as handle:
                if handle.read().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(name))
        except (OSError, ValueError, IndexError):
            continue
    return found


def _seen(mark: str, least: int, wait: float = 10.0) -> int:
    """How many processes of `mark` run, once at least `least` do (or `wait` s passed)."""
    deadline = time.monotonic() + wait
    while len(found := _marked(mark)) < least and time.monotonic() < deadline:
        time.sleep(0.05)
    return len(found)


def _gone(mark: str, wait: float = 10.0) -> list[int]:
    """What still runs of `mark` once SIGKILLs had `wait` s to land."""
    deadline = time.monotonic() + wait
    while (left := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


async def test_lines_make_a_round_trip(opener: Opener) -> None:
    async with _sandbox(opener) as sandbox, sandbox.spawn(["python3", "-c", ECHO]) as process:
        for n in range(5):
            await process.send(f'{{"id": {n}}}\n'.encode())
            assert await _line(process) == f'{{"id": {n}}}\n'.encode()
        assert process.returncode is None


async def test_a_megabyte_goes_each_way(opener: Opener) -> None:
    message = (b"x" * 1023 + b"\n") * 1024
    async with _sandbox(opener) as sandbox, sandbox.spawn(["python3", "-c", ECHO]) as process:
        sending = asyncio.ensure_future(process.send(message))
        got = b""
        async with asyncio.timeout(60):
            while len(got) < len(message):
                chunk = await process.receive()
                assert chunk and len(chunk) <= 64 * 1024
                got += chunk
        await sending
        assert got == message


async def test_env_is_given_on_top_of_the_scrubbed_one_in_cwd(opener: Opener) -> None:
    program = "import json, os; print(json.dumps([dict(os.environ), sorted(os.listdir('.'))]))"
    async with _sandbox(opener) as sandbox:
        await sandbox.write_file("/workspace/sub/here.txt", b"x")
        await sandbox.write_file("/tmp/show.py", program.encode())  # named by its sandbox path
        spawned = sandbox.spawn(["python3", "/tmp/show.py"], env={"GIVEN": "a b=c"}, cwd="/workspace/sub")
        async with spawned as process:
            env, listing = json.loads(await _all(process))
        async with sandbox.spawn(["python3", "-c", program], cwd="sub") as process:  # relative to workdir
            assert json.loads(await _all(process))[1] == ["here.txt"]
    assert env["GIVEN"] == "a b=c"
    assert "OPENAI_API_KEY" not in env and "sk-runner-secret" not in json.dumps(env)
    assert "PATH" in env
    assert listing == ["here.txt"]


async def test_it_sees_and_shows_the_sandboxs_paths_not_the_hosts(opener: Opener) -> None:
    """A path sent names the sandbox's file, and what it prints holds no host path: on local, an
    MCP server once showed the model its slot's directory and could not open /workspace/x."""
    program = (
        "import json, os, sys\npath = sys.stdin.readline().strip()\n"
        "print(json.dumps([os.getcwd(), os.environ['HOME'], open(path).read()]), flush=True)"
    )
    async with _sandbox(opener) as sandbox:
        await sandbox.write_file("/workspace/sub/here.txt", b"found")
        async with sandbox.spawn(["python3", "-c", program], cwd="/workspace/sub") as process:
            await process.send(b"/workspace/sub/here.txt\n")
            cwd, home, text = json.loads(await _line(process))
    assert (cwd, text) == ("/workspace/sub", "found")
    assert home in ("/home", "/workspace", "/root"), home  # the sandbox's HOME, never the host's


async def test_a_message_of_many_lines_names_the_sandboxs_paths_in_each(opener: Opener) -> None:
    """Past 64 KB, local rewrites what is sent in slices of whole lines (8 MB at once held the
    loop for a second): every line's path still names the sandbox's file, none cut in two."""
    program = (
        "import sys\nopened = 0\nfor line in sys.stdin:\n"
        "    opened += open(line.split()[0]).read() == 'found'\n"
        "    if line.startswith('/workspace/last'):\n        break\nprint(opened, flush=True)"
    )
    lines = [f"/workspace/sub/here.txt {'p' * (i % 90)}\n" for i in range(3000)]
    message = ("".join(lines) + "/workspace/last.txt\n").encode()
    assert len(message) > 3 * 64 * 1024
    async with _sandbox(opener) as sandbox:
        await sandbox.write_file("/workspace/sub/here.txt", b"found")
        await sandbox.write_file("/workspace/last.txt", b"found")
        async with sandbox.spawn(["python3", "-c", program]) as process:
            await process.send(message)
            assert await _line(process) == b"3001\n"


async def test_a_missing_cwd_or_program_is_a_sandbox_error(opener: Opener) -> None:
    async with _sandbox(opener) as sandbox:
        with pytest.raises(SandboxError, match="no such directory"):
            async with sandbox.spawn(["python3", "-c", ECHO], cwd="/workspace/nowhere"):
                pass
        with pytest.raises(SandboxError, match="no-such-program"):
            async with sandbox.spawn(["no-such-program", "--stdio"]):
                pass
        async with sandbox.spawn(["python3", "-c", ECHO]) as process:  # the sandbox still works
            await process.send(b"ok\n")
            assert await _line(process) == b"ok\n"


async def test_an_exit_is_eof_and_a_returncode(opener: Opener) -> None:
    program = "import sys; print('bye'); sys.stderr.write('last words\\n'); sys.exit(3)"
    async with _sandbox(opener) as sandbox, sandbox.spawn(["python3", "-c", program]) as process:
        assert await _all(process) == b"bye\n"
        assert await process.receive() == b""
        assert process.returncode == 3
        assert process.stderr_tail().endswith("last words\n")
        with pytest.raises(SandboxError):
            await process.send(b"anyone?\n")


async def test_stderr_is_drained_and_its_tail_kept(opener: Opener) -> None:
    program = (
        "import sys\nfor _ in range(1024): sys.stderr.write('e' * 1023 + '\\n')\n"
        "sys.stderr.write('the end\\n'); sys.stderr.flush(); print('done', flush=True); sys.stdin.read()"
    )
    async with _sandbox(opener) as sandbox, sandbox.spawn(["python3", "-c", program]) as process:
        assert await _line(process) == b"done\n"  # 1 MB of stderr nobody asked for did not block it
        deadline = time.monotonic() + 10
        while not process.stderr_tail().endswith("the end\n") and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        tail = process.stderr_tail()
        assert tail.endswith("e\nthe end\n") and 1000 < len(tail) <= 8192


async def test_leaving_the_block_kills_it_and_its_children(opener: Opener) -> None:
    mark = f"spawn-{uuid.uuid4().hex}"
    async with _sandbox(opener) as sandbox:
        async with sandbox.spawn(["python3", "-c", FORKS, mark]) as process:
            assert await _line(process) == b"ready\n"
            # the program (MARK is its argument) and its child; under bwrap its launcher too
            assert _seen(mark, 2) >= 2
        assert _gone(mark) == []
        assert (await sandbox.exec("echo alive", timeout=30)).output == "alive\n"


# Local (a cgroup of its own, v2) and bwrap (its pid namespace) only: in a container a kill
# reaches the exec's session and process group, the rest dies with the container.
@pytest.mark.parametrize("opener", BACKENDS[:2], indirect=True)
async def test_leaving_the_block_kills_a_child_that_left_its_session(opener: Opener) -> None:
    mark = f"spawn-{uuid.uuid4().hex}"
    async with _sandbox(opener) as sandbox:
        async with sandbox.spawn(["python3", "-c", FORKS, mark, "setsid"]) as process:
            assert await _line(process) == b"ready\n"
        assert _gone(mark) == []


async def test_closing_the_sandbox_kills_it_and_everything_it_started(opener: Opener) -> None:
    mark = f"spawn-{uuid.uuid4().hex}"
    spawned = None
    async with _sandbox(opener) as sandbox:
        spawned = sandbox.spawn(["python3", "-c", FORKS, mark, "setsid"])
        process = await spawned.__aenter__()
        assert await _line(process) == b"ready\n"
        assert _seen(mark, 3) >= 3
    assert _gone(mark) == []
    started = time.monotonic()
    await spawned.__aexit__(None, None, None)  # the block left after its sandbox closed
    assert time.monotonic() - started < 15
    assert process.returncode is not None
    with pytest.raises(SandboxError):
        await process.send(b"late\n")


async def test_a_program_that_never_reads_cannot_block_the_loop_or_the_exit(opener: Opener) -> None:
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            await asyncio.sleep(0.01)
            ticks.append(time.monotonic())

    async with _sandbox(opener) as sandbox:
        ticker = asyncio.ensure_future(tick())
        try:
            async with sandbox.spawn(["python3", "-c", SILENT]) as process:
                assert await _line(process) == b"up\n"
                sent = time.monotonic()
                with pytest.raises(TimeoutError):  # 8 MB: more than an engine buffers on the way
                    await asyncio.wait_for(process.send(b"y" * (8 * MB)), timeout=1.0)
                # The loop ran all along: never held for half the second. Judged on the widest
                # gap, not the count of 10 ms ticks, which a loaded CI machine of 2 cores cut
                # to 11; a send that blocked the loop leaves one gap of about the second.
                points = [sent, *(t for t in ticks if t > sent), time.monotonic()]
                assert max(b - a for a, b in itertools.pairwise(points)) < 0.5, points
                started = time.monotonic()
            assert time.monotonic() - started < 15
        finally:
            ticker.cancel()


async def test_a_receive_waiting_in_another_task_ends_with_the_block(opener: Opener) -> None:
    async with _sandbox(opener) as sandbox:
        async with sandbox.spawn(["python3", "-c", SILENT]) as process:
            assert await _line(process) == b"up\n"
            waiting = asyncio.ensure_future(process.receive())
            await asyncio.sleep(0.1)
        with suppress(SandboxError):  # EOF if the kill's came first, else the block's end
            assert await asyncio.wait_for(waiting, timeout=10) == b""
        with pytest.raises(SandboxError):
            await process.receive()
