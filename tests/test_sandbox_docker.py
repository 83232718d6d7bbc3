"""The Docker backend against real engines: Docker (DOCKER_HOST) and Podman's compat socket
(PODMAN_HOST), with real containers: images, cwd, isolation, limits, timeouts, cleanup, reaping."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import http.client
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent.errors import SandboxError
from agent.protocols import Sandbox, SandboxSpec
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.sandboxes import unavailable_reason as registry_reason
from agent.sandboxes.blocking import ThreadedSandbox
from agent.sandboxes.docker import DockerBackend, disk_image
from agent.sandboxes.docker.container_exec import ExecNotStarted, run_script
from agent.sandboxes.docker.engine import engine_client
from agent.sandboxes.docker.lifecycle import (
    IMAGE,
    LABEL_HOST,
    LABEL_ID,
    LABEL_PID,
    LABEL_PROMPT,
    LABEL_RUN,
    disk_mode,
)
from agent.sandboxes.docker.sandbox import (
    DockerSandbox,
    ensure_image,
    open_sandbox,
    reap_stale,
    unavailable_reason,
)
from agent.sandboxes.host.mounts import mounts_under
from tests.fixtures.containers import MARKED_IMAGE, Engine, exercise_tools

REPO = Path(__file__).resolve().parent.parent
LIST_PROCESSES = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <\"$f\"; echo; done"
pytestmark = [pytest.mark.docker, pytest.mark.anyio]


def _spec(unique_run_name: str, key: str = "prompt-0", **fields: Any) -> SandboxSpec:
    return SandboxSpec(run_name=unique_run_name, prompt_key=key, **fields)


async def test_each_prompt_gets_a_labelled_container_from_its_own_image(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with (
        open_sandbox(_spec(unique_run_name, "a", image=MARKED_IMAGE), docker_options) as marked,
        open_sandbox(_spec(unique_run_name, "b"), docker_options) as plain,
    ):
        assert (await marked.exec("cat /marker", timeout=30)).output == "marked\n"
        assert (await plain.exec("cat /marker", timeout=30)).exit_code != 0
        containers = {
            c.labels[LABEL_PROMPT]: c for c in container_engine.ours(**{LABEL_RUN: unique_run_name})
        }
        assert sorted(containers) == ["a", "b"]
        labels = containers["a"].labels
        assert labels[LABEL_PID] == str(os.getpid())
        assert labels[LABEL_HOST]
        assert containers["a"].attrs["HostConfig"]["NetworkMode"] == "none"
    assert container_engine.ours(**{LABEL_RUN: unique_run_name}) == []


async def test_cwd_is_created_and_used(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with open_sandbox(_spec(unique_run_name, cwd="/app/src"), docker_options) as sandbox:
        assert sandbox.workdir == "/app/src"
        assert (await sandbox.exec("pwd", timeout=30)).output == "/app/src\n"
        await sandbox.write_file("notes/a.txt", b"relative")
        assert (await sandbox.read_file("/app/src/notes/a.txt")) == b"relative"
        assert (await sandbox.exec("pwd", timeout=30, cwd="notes")).output == "/app/src/notes\n"
        assert (await sandbox.exec("true", timeout=30, cwd="/missing")).exit_code == 1
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        result = await sandbox.exec("pwd && touch /workspace/w && echo ok", timeout=30)
        assert result.output == "/workspace\nok\n"


async def test_missing_image_fails_the_prompt_with_a_clear_error(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    image = f"sandbox-test/absent-{uuid.uuid4().hex[:8]}:1"
    with pytest.raises(SandboxError) as caught:
        async with open_sandbox(_spec(unique_run_name, image=image), docker_options):
            pytest.fail("the sandbox must not open")
    message = str(caught.value)
    assert image in message and "docker load" in message and "\n" not in message
    assert container_engine.ours(**{LABEL_RUN: unique_run_name}) == []


class _CountingClient:
    """A real client whose image lookups and pulls are counted (the calls still happen)."""

    def __init__(self, client: Any) -> None:
        self.api = client.api
        self.calls: list[str] = []
        self.images = self
        self._images = client.images

    def get(self, name: str) -> Any:
        self.calls.append(f"get {name}")
        return self._images.get(name)

    def pull(self, repository: str, **kwargs: Any) -> Any:
        self.calls.append(f"pull {repository}")
        return self._images.pull(repository, **kwargs)


def test_each_image_is_checked_once_per_process(container_engine: Engine) -> None:
    client = _CountingClient(container_engine.client)
    tag = uuid.uuid4().hex[:8]
    present, absent = f"sandbox-test/marked:{tag}", f"sandbox-test/absent-{tag}:1"
    container_engine.client.images.get(MARKED_IMAGE).tag("sandbox-test/marked", tag=tag)
    try:
        for _ in range(3):
            ensure_image(client, present)
            with pytest.raises(SandboxError):
                ensure_image(client, absent)
    finally:
        container_engine.client.images.remove(present)
    assert client.calls == [f"get {present}", f"get {absent}", f"pull sandbox-test/absent-{tag}"]


async def test_there_is_no_network_inside(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    probe = (
        "import socket\n"
        "s = socket.socket()\n"
        "s.settimeout(3)\n"
        "try:\n    s.connect(('192.0.2.1', 80))\nexcept OSError as e:\n    print('refused', e.errno)\n"
    )
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        devices = await sandbox.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '", timeout=30)
        assert devices.output.split() == ["lo"]
        await sandbox.write_file("probe.py", probe.encode())
        assert (await sandbox.exec("python3 probe.py", timeout=30)).output.startswith("refused")


async def test_a_memory_hog_is_killed_and_the_sandbox_goes_on(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    hog = "python3 -c 'b = bytearray(1024 * 1024 * 1024); print(len(b))'"
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        result = await sandbox.exec(hog, timeout=60)
        assert result.exit_code == 137 and not result.timed_out
        assert (await sandbox.exec("echo alive", timeout=30)).output.endswith("alive\n")


# Forked once by the shell, before any of it runs (see test_sandbox_bwrap's bomb); the count needs no fork.
FORK_BOMB = """bomb() { bomb | bomb & }; { bomb 2>/dev/null; } &
SECONDS=0; while [ "$SECONDS" -lt 3 ]; do :; done
n=0; for d in /proc/[0-9]*; do n=$((n + 1)); done; echo "count=$n"
"""


async def test_a_fork_bomb_is_held_at_the_pids_limit(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        result = await sandbox.exec(FORK_BOMB, timeout=20)
        count = int(result.output.rsplit("count=", 1)[1].split()[0])
        assert docker_options.pids_limit // 2 <= count <= docker_options.pids_limit
        assert subprocess.run(["true"], check=False).returncode == 0  # the host can still fork
        # The bomb outlives its command; the next command still runs (restarting if need be).
        assert (await sandbox.exec("echo alive", timeout=30)).output.endswith("alive\n")


async def test_an_exec_whose_first_line_is_not_a_pid_did_not_start(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    """When runc cannot start an exec (no pid free: a fork bomb), Docker writes its error where
    our pid line should be and reports exit 126: that must not pass for a command's own exit
    126, or the sandbox is not restarted. Replayed here by a script that prints such a line."""
    refusal = "OCI runtime exec failed: exec failed: unable to start container process: read init-p"
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        await sandbox.exec("true", timeout=30)  # the container is made on the first call
        (container,) = container_engine.ours(**{LABEL_RUN: unique_run_name})
        with pytest.raises(ExecNotStarted, match="exit code 126: OCI runtime exec failed"):
            await asyncio.to_thread(
                run_script,
                container_engine.client,
                container.id,
                f"echo '{refusal}'; echo more; exit 126",
                [],
                timeout=30,
                limit=4096,
                prints_pid=True,
            )
        # A command that itself exits 126 printed its shell's pid first: it ran, once.
        ran = await sandbox.exec("echo ran >> /tmp/runs; exit 126", timeout=30)
        assert ran.exit_code == 126 and ran.output == ""
        assert await sandbox.read_file("/tmp/runs") == b"ran\n"


async def test_a_timeout_kills_the_command_inside_the_container(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        result = await sandbox.exec("echo started; sleep 301 & sleep 302", timeout=2)
        assert result.timed_out and result.exit_code == 124
        assert "started" in result.output
        listing = (await sandbox.exec(LIST_PROCESSES, timeout=30)).output
        assert "sleep 30" not in listing
        assert "sleep 86400" in listing  # the container itself was not restarted


async def test_files_of_one_prompt_are_invisible_to_the_next(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with open_sandbox(_spec(unique_run_name), docker_options) as first:
        await first.write_file("/workspace/secret.txt", b"mine")
        await first.exec("echo tmp > /tmp/left; echo root > /root/left", timeout=30)
    for key in ("prompt-0", "prompt-1"):
        async with open_sandbox(_spec(unique_run_name, key), docker_options) as second:
            for path in ("/workspace/secret.txt", "/tmp/left", "/root/left"):
                with pytest.raises(FileNotFoundError):
                    await second.read_file(path)


async def test_files_round_trip_with_the_semantics_of_the_shell(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    payload = bytes(range(256)) * 1000
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        await sandbox.write_file("deep/dir/blob.bin", payload)
        assert (await sandbox.read_file("/workspace/deep/dir/blob.bin")) == payload
        assert (await sandbox.exec("wc -c < deep/dir/blob.bin", timeout=30)).output.strip() == str(
            len(payload)
        )
        await sandbox.write_file("run.sh", b"echo one")
        await sandbox.exec("chmod +x run.sh && ln -s run.sh link.sh", timeout=30)
        await sandbox.write_file("link.sh", b"echo two")  # through the symlink, keeping the mode
        assert (await sandbox.exec("./run.sh", timeout=30)).output == "two\n"
        with pytest.raises(FileNotFoundError):
            await sandbox.read_file("absent.txt")
        with pytest.raises(IsADirectoryError):
            await sandbox.read_file("deep")
        with pytest.raises(OSError, match="not a regular file"):
            await sandbox.read_file("/dev/zero")


async def test_output_interleaves_and_exit_codes_pass_through(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        result = await sandbox.exec("echo a; echo b >&2; echo c; exit 7", timeout=30)
        assert (result.output, result.exit_code, result.timed_out) == ("a\nb\nc\n", 7, False)
        assert (await sandbox.exec("cat; echo done", timeout=30)).output == "done\n"  # stdin is empty


async def test_host_secrets_do_not_reach_the_container(
    container_engine: Engine,
    docker_options: SandboxOptions,
    unique_run_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-4711")
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        environment = (await sandbox.exec("env; cat /proc/1/environ", timeout=30)).output
        assert "sk-test-secret-4711" not in environment and "OPENAI_API_KEY" not in environment


@pytest.mark.parametrize("failure", [None, RuntimeError, KeyboardInterrupt])
async def test_no_container_remains_after_the_block(
    container_engine: Engine,
    docker_options: SandboxOptions,
    unique_run_name: str,
    failure: type[BaseException] | None,
) -> None:
    for first_command in (True, False):  # with the container up, and while it is being created
        expectation = pytest.raises(failure) if failure else contextlib.nullcontext()
        with expectation:
            async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
                if first_command:
                    await sandbox.exec("true", timeout=30)
                if failure:
                    raise failure()
        assert container_engine.ours(**{LABEL_RUN: unique_run_name}) == []


async def test_a_cancelled_command_is_killed_and_waited_for(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        command = asyncio.create_task(sandbox.exec("touch /workspace/s; sleep 401", timeout=600))
        while (await sandbox.exec("test -e /workspace/s", timeout=30)).exit_code != 0:
            await asyncio.sleep(0.05)
        started = time.monotonic()
        command.cancel()
        with pytest.raises(asyncio.CancelledError):
            await command
        assert time.monotonic() - started < 30  # killed, not waited for until its timeout
        assert "sleep 401" not in (await sandbox.exec(LIST_PROCESSES, timeout=30)).output
        assert (await sandbox.read_file("s")) == b""  # the files are kept


ORPHAN = """
import asyncio, sys
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.docker.sandbox import open_sandbox

async def main():
    async with open_sandbox(SandboxSpec(sys.argv[1], "orphan"), SandboxOptions(backend="docker")) as sandbox:
        await sandbox.exec("true", timeout=60)
        print("ready", flush=True)
        await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.xdist_group("docker-engine")  # it reaps the shared engine: with the runs that do
async def test_reap_stale_removes_containers_of_a_killed_process(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, unique_run_name],
        stdout=subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"ready\n"
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    orphans = container_engine.ours(**{LABEL_RUN: unique_run_name})
    assert [c.labels[LABEL_PROMPT] for c in orphans] == ["orphan"]
    async with open_sandbox(_spec(unique_run_name, "alive"), docker_options) as sandbox:
        await sandbox.exec("true", timeout=30)
        assert reap_stale(container_engine.client, unique_run_name) == [orphans[0].name]
        assert [c.labels[LABEL_PROMPT] for c in container_engine.ours(**{LABEL_RUN: unique_run_name})] == [
            "alive"
        ]
    assert reap_stale(container_engine.client, unique_run_name) == []
    # Its disk image (where the engine cannot cap a writable layer) goes with it, mount and all.
    orphan_disk = os.path.join(tempfile.gettempdir(), disk_image.DIR_PREFIX + orphans[0].labels[LABEL_ID])
    assert os.path.isdir(orphan_disk) == (disk_mode(engine_client()) == IMAGE)
    reaped = DockerBackend().reap_stale(dataclasses.replace(docker_options, root=None))
    assert (orphan_disk in reaped) == (disk_mode(engine_client()) == IMAGE)
    assert not os.path.exists(orphan_disk)
    assert mounts_under(orphan_disk, fresh=True) == []


def test_unavailable_reason_names_the_missing_image(container_engine: Engine) -> None:
    assert unavailable_reason(SandboxOptions(backend="docker")) is None
    assert registry_reason(SandboxOptions(backend="docker")) is None
    reason = unavailable_reason(SandboxOptions(backend="docker", default_image="sandbox-test/none:0"))
    assert reason is not None and "sandbox-test/none:0" in reason and "docker load" in reason


async def test_the_registry_opens_docker_sandboxes(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    factory = sandbox_factory(docker_options)
    async with factory(_spec(unique_run_name)) as sandbox:
        assert isinstance(sandbox, Sandbox) and isinstance(sandbox, ThreadedSandbox)
        assert isinstance(sandbox.blocking, DockerSandbox)
        assert (await sandbox.exec("echo $((6 * 7))", timeout=30)).output == "42\n"


async def test_output_is_complete_when_the_client_reads_headers_late(
    container_engine: Engine,
    docker_options: SandboxOptions,
    unique_run_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Under load the client may parse the exec response headers after the process has
    # written: without the handshake that output was lost (docker-py reads the raw socket).
    begin: Callable[[http.client.HTTPResponse], None] = http.client.HTTPResponse.begin

    def slow_begin(response: http.client.HTTPResponse) -> None:
        time.sleep(0.3)  # every response, once the container is up: the exec's among them
        begin(response)

    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        await sandbox.exec("true", timeout=30)
        monkeypatch.setattr(http.client.HTTPResponse, "begin", slow_begin)
        assert (await sandbox.exec("echo first; echo second", timeout=30)).output == "first\nsecond\n"


def test_without_an_engine_the_reason_says_how_to_start_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/agent-test/docker.sock")
    reason = unavailable_reason(SandboxOptions(backend="docker"))
    assert reason is not None
    assert "unix:///nonexistent/agent-test/docker.sock" in reason and "DOCKER_HOST" in reason
    assert "dockerd" in reason


async def test_the_terminal_and_file_tools_work_in_a_container(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str
) -> None:
    async with open_sandbox(_spec(unique_run_name), docker_options) as sandbox:
        await exercise_tools(sandbox)
