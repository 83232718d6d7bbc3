"""The bubblewrap backend with real namespaces: isolation, read-only root, private /tmp,
limits, timeouts, file access that cannot escape, cleanup."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.errors import SandboxError, SandboxPathError
from agent.protocols import Sandbox, SandboxSpec
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.sandboxes.blocking import ThreadedSandbox
from agent.sandboxes.bwrap.sandbox import BwrapSandbox, open_sandbox, reap_stale, unavailable_reason
from agent.sandboxes.host import memory_limits
from agent.sandboxes.host.sandbox_process import ProcessOutcome
from tests.fixtures.containers import exercise_tools

pytestmark = [pytest.mark.bwrap, pytest.mark.anyio]
SPEC = SandboxSpec(run_name="run-b", prompt_key="prompt-0")
REPO = Path(__file__).resolve().parent.parent


def _host_processes(marker: str, *, exact: bool = False) -> list[int]:
    """Host pids whose command line contains `marker` (or is exactly `marker`)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        with contextlib.suppress(OSError):
            line = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").strip()
            if line == marker.encode() if exact else marker.encode() in line:
                found.append(int(name))
    return found


def _eventually_none(marker: str) -> bool:
    """True once no host process matches `marker` (the kernel delivers death signals
    asynchronously); False if some still run after 10 s."""
    for _ in range(200):
        if not _host_processes(marker):
            return True
        time.sleep(0.05)
    return False


async def test_commands_run_in_fresh_namespaces(bwrap_options: SandboxOptions) -> None:
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        result = await sandbox.exec(
            "echo pid=$$; ls -d /proc/[0-9]* | wc -l; tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; "
            "hostname; id -u",
            timeout=30,
        )
        lines = result.output.split()
        assert lines[0] in ("pid=1", "pid=2")
        assert int(lines[1]) <= 4  # bwrap, the shell, ls and wc: nothing of the host
        assert lines[2:] == ["lo", "sandbox", "0"]


async def test_the_root_is_read_only_and_only_the_sandbox_places_are_writable(
    bwrap_options: SandboxOptions,
) -> None:
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        for path in ("/usr/x", "/etc/x", "/x", "/proc/x"):
            assert (await sandbox.exec(f"touch {path}", timeout=30)).exit_code != 0, path
        result = await sandbox.exec("touch /workspace/w /tmp/t && echo ok", timeout=30)
        assert result.output == "ok\n"
        assert sandbox.blocking.host_dir is not None
        assert os.path.exists(os.path.join(sandbox.blocking.host_dir, "workspace", "w"))
        with pytest.raises(SandboxPathError):
            await sandbox.write_file("/usr/local/evil", b"x")


async def test_tmp_is_private_and_lasts_for_the_prompt(bwrap_options: SandboxOptions) -> None:
    marker = f"private-{os.getpid()}"
    async with open_sandbox(SPEC, bwrap_options) as first:
        await first.exec(f"echo kept > /tmp/{marker}", timeout=30)
        assert (
            await first.exec(f"cat /tmp/{marker}", timeout=30)
        ).output == "kept\n"  # a later command sees it
        assert not os.path.exists(f"/tmp/{marker}")  # not the host's /tmp
        async with open_sandbox(SandboxSpec("run-b", "prompt-1"), bwrap_options) as second:
            assert (await second.exec(f"cat /tmp/{marker}", timeout=30)).exit_code != 0


async def test_the_environment_is_cleared(
    bwrap_options: SandboxOptions, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-4711")
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        environment = (await sandbox.exec("env", timeout=30)).output
        assert "sk-test-secret-4711" not in environment and "OPENAI_API_KEY" not in environment
        assert "HOME=/workspace" in environment.splitlines()


async def test_a_timeout_kills_everything_the_command_started(bwrap_options: SandboxOptions) -> None:
    marker = f"sleep 3{os.getpid()}.5"  # this worker's own: tests run side by side
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        result = await sandbox.exec(f"echo started; ({marker} &); setsid {marker} & {marker}", timeout=2)
        assert result.timed_out and result.exit_code == 124 and "started" in result.output
        assert _host_processes(marker) == []


async def test_limits_hold_memory_and_process_count(bwrap_options: SandboxOptions) -> None:
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        hog = await sandbox.exec("python3 -c 'b = bytearray(1024 * 1024 * 1024)'", timeout=60)
        # a memory cgroup bounds the whole sandbox (see test_sandbox_memory_limit); else an rlimit
        told = "memory limit" if memory_limits.hierarchy() is not None else "MemoryError"
        assert hog.exit_code != 0 and told in hog.output
        # The shell forks the bomb once, before any of it runs: `bomb | bomb &` in the shell itself
        # forks twice, and on a busy machine the first half can take every pid before the second
        # fork (bash then retries for 15 s and exits 254). The count needs no fork.
        bomb = await sandbox.exec(
            "bomb() { bomb | bomb & }; { bomb 2>/dev/null; } & "
            "SECONDS=0; while [ $SECONDS -lt 2 ]; do :; done; "
            'n=0; for d in /proc/[0-9]*; do n=$((n + 1)); done; echo "count=$n"',
            timeout=120,  # the bomb's processes share the CPUs with the count: slow on a busy machine
        )
        assert "count=" in bomb.output, bomb  # its exit code and output say why when it is not
        count = int(bomb.output.rsplit("count=", 1)[1].split()[0])
        assert bwrap_options.pids_limit // 2 <= count <= bwrap_options.pids_limit + 1  # + bwrap's pid 1
        assert subprocess.run(["true"], check=False).returncode == 0
        assert (
            await sandbox.exec("echo alive", timeout=30)
        ).output == "alive\n"  # the bomb died with its command


async def test_files_map_to_the_workspace_and_symlinks_cannot_escape(bwrap_options: SandboxOptions) -> None:
    async with open_sandbox(SandboxSpec("run-b", "prompt-0", cwd="src"), bwrap_options) as sandbox:
        assert sandbox.workdir == "/workspace/src"
        await sandbox.write_file("pkg/mod.py", b"print('hi')")
        assert (await sandbox.exec("python3 pkg/mod.py", timeout=30)).output == "hi\n"
        assert (await sandbox.read_file("/workspace/src/pkg/mod.py")) == b"print('hi')"
        await sandbox.exec(
            "ln -s /etc/shadow shadow; ln -s /root/.bashrc rc; ln -s pkg/mod.py mine", timeout=30
        )
        for escaping in ("shadow", "rc"):  # host paths the sandbox cannot see
            with pytest.raises(FileNotFoundError):
                await sandbox.read_file(escaping)
        assert (await sandbox.read_file("mine")) == b"print('hi')"
        assert (await sandbox.read_file("/etc/os-release")).startswith(b"PRETTY_NAME")  # read inside
        with pytest.raises(IsADirectoryError):
            await sandbox.read_file("pkg")
        with pytest.raises(OSError, match="not a regular file"):
            await sandbox.read_file("/dev/zero")


async def test_a_cwd_outside_the_workspace_becomes_writable(bwrap_options: SandboxOptions) -> None:
    async with open_sandbox(SandboxSpec("run-b", "p", cwd="/app"), bwrap_options) as sandbox:
        assert (await sandbox.exec("pwd && touch made && echo ok", timeout=30)).output == "/app\nok\n"
        assert (await sandbox.read_file("made")) == b""
    with pytest.raises(SandboxPathError):
        async with open_sandbox(SandboxSpec("run-b", "p", cwd="/usr/nowhere"), bwrap_options):
            pytest.fail("the sandbox must not open")


async def test_an_unpacked_image_root_is_used(bwrap_options: SandboxOptions, image_root: str) -> None:
    async with open_sandbox(SandboxSpec("run-b", "p", image=image_root), bwrap_options) as sandbox:
        assert (await sandbox.exec("test -d /var/lib/dpkg && echo image", timeout=30)).output == "image\n"
        assert (await sandbox.exec("touch /usr/x", timeout=30)).exit_code != 0
    async with open_sandbox(SPEC, bwrap_options) as sandbox:  # the host root has no /var
        assert (await sandbox.exec("test -d /var/lib/dpkg || echo host", timeout=30)).output == "host\n"
    with pytest.raises(SandboxError, match="not an unpacked root"):
        async with open_sandbox(SandboxSpec("run-b", "p", image="/nonexistent-root"), bwrap_options):
            pytest.fail("the sandbox must not open")


@pytest.mark.parametrize("failure", [None, RuntimeError, KeyboardInterrupt])
async def test_the_sandbox_directory_is_removed(
    bwrap_options: SandboxOptions, failure: type[BaseException] | None
) -> None:
    expectation = pytest.raises(failure) if failure else contextlib.nullcontext()
    with expectation:
        async with open_sandbox(SPEC, bwrap_options) as sandbox:
            await sandbox.exec(
                "mkdir -p locked/inner && touch locked/inner/f && chmod 000 locked/inner locked", timeout=30
            )
            host_dir = sandbox.blocking.host_dir
            if failure:
                raise failure()
    assert host_dir is not None and not os.path.exists(host_dir)


async def test_the_registry_reports_and_opens_bwrap(bwrap_options: SandboxOptions) -> None:
    assert unavailable_reason(bwrap_options) is None
    async with sandbox_factory(bwrap_options)(SPEC) as sandbox:
        assert isinstance(sandbox, Sandbox) and isinstance(sandbox, ThreadedSandbox)
        assert isinstance(sandbox.blocking, BwrapSandbox)
        assert (await sandbox.exec("echo $((6 * 7))", timeout=30)).output == "42\n"


async def test_the_terminal_and_file_tools_work_in_bwrap(bwrap_options: SandboxOptions) -> None:
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        await exercise_tools(sandbox)


async def test_a_cancelled_command_is_killed_and_waited_for(bwrap_options: SandboxOptions) -> None:
    marker = f"sleep 4{os.getpid()}.5"
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        command = asyncio.create_task(sandbox.exec(f"echo started > /workspace/s; {marker}", timeout=600))
        host_dir = sandbox.blocking.host_dir
        assert host_dir is not None
        while not os.path.exists(os.path.join(host_dir, "workspace", "s")):
            await asyncio.sleep(0.02)
        started = time.monotonic()
        command.cancel()
        with pytest.raises(asyncio.CancelledError):
            await command
        assert time.monotonic() - started < 10  # killed, not waited for until its timeout
        assert _host_processes(marker) == []  # and gone once the cancelled call returned
        assert (await sandbox.exec("echo still usable", timeout=30)).output == "still usable\n"


ORPHAN = """
import asyncio, sys
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.bwrap import command as bwrap_command
from agent.sandboxes.blocking import ThreadedSandbox
from agent.sandboxes.bwrap.sandbox import open_sandbox
if sys.argv[3] == "escape":  # as if the runner died while bwrap started (a race bwrap cannot close):
    # bwrap's parent becomes a shell that outlives the runner
    bwrap_command.DIE_WITH_RUNNER[:] = ["/bin/sh", "-c", '"$@"; exit $?']

async def main():
    options = SandboxOptions(backend="bwrap", root=sys.argv[1])
    async with open_sandbox(SandboxSpec("run-b", "orphan"), options) as sandbox:
        await sandbox.exec("touch /workspace/left", timeout=60)
        print("ready", flush=True)
        await sandbox.exec(sys.argv[2], timeout=900)

asyncio.run(main())
"""


def _orphan(bwrap_root: str, command: str, mode: str) -> str:
    """Runs ORPHAN until `command` runs in its sandbox, SIGKILLs it, returns its sandbox dir."""
    child = subprocess.Popen(
        [sys.executable, "-c", ORPHAN, bwrap_root, command, mode],
        stdout=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert child.stdout is not None
    try:
        assert child.stdout.readline() == b"ready\n"
        for _ in range(200):  # until the command itself runs: bwrap has set itself up
            if _host_processes(command, exact=True):
                break
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
    [orphan] = os.listdir(bwrap_root)
    assert os.path.exists(os.path.join(bwrap_root, orphan, "workspace", "left"))
    return os.path.join(bwrap_root, orphan)


async def test_reap_stale_removes_what_a_killed_runner_left(
    bwrap_options: SandboxOptions, bwrap_root: str
) -> None:
    orphan = _orphan(bwrap_root, "sleep 3601", "normal")
    assert _eventually_none("sleep 3601")  # the sandbox died with its runner (PDEATHSIG)
    async with open_sandbox(SPEC, bwrap_options) as alive:
        assert reap_stale(bwrap_root) == [orphan]
        assert alive.blocking.host_dir is not None and os.path.isdir(alive.blocking.host_dir)
    assert os.listdir(bwrap_root) == []


def test_reap_stale_kills_a_sandbox_that_outlived_its_runner(bwrap_root: str) -> None:
    orphan = _orphan(bwrap_root, "sleep 3602", "escape")
    assert _host_processes("sleep 3602")
    assert reap_stale(bwrap_root) == [orphan]
    assert _host_processes("sleep 3602") == [] and os.listdir(bwrap_root) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a stale sandbox's disk cap is a tmpfs: root mounts it")
def test_reap_stale_spares_a_process_that_only_sees_the_stale_filesystem(
    bwrap_root: str, tmp_path: Path
) -> None:
    """A copy of the host's mount table shows a stale sandbox's disk cap whole (root "/"): so
    does bwrap's pid 1 of any other sandbox while it sets up (the host's mounts under
    /oldroot). Reaping killed such a process (another run's sandbox starting) as if it used
    the stale one; a bind of the whole directory elsewhere, in a namespace of its own, stands
    in for it here, where it lasts."""
    orphan = _orphan(bwrap_root, "sleep 3603", "normal")
    assert _eventually_none("sleep 3603") and os.path.ismount(orphan)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    bystander = subprocess.Popen(
        ["unshare", "--mount", "--propagation=private", "sh", "-c",
         'mount --rbind "$0" "$1" && echo ready && exec sleep 3604', bwrap_root, str(elsewhere)],
        stdout=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert bystander.stdout is not None and bystander.stdout.readline() == b"ready\n"
        moved = Path(f"/proc/{bystander.pid}/mountinfo").read_text()
        assert f"{elsewhere}/{os.path.basename(orphan)} " in moved  # seen whole, somewhere else
        assert reap_stale(bwrap_root) == [orphan]
        assert bystander.poll() is None, "a process that only saw the stale filesystem was killed"
    finally:
        bystander.kill()
        bystander.wait()
        bystander.stdout.close()
    assert os.listdir(bwrap_root) == []


@pytest.mark.parametrize(
    ("outcome", "said"),
    [
        (
            ProcessOutcome(b"", b"bwrap: Creating new namespace failed\n", 1, False),
            "namespace failed (exit 1)",
        ),
        (ProcessOutcome(b"", b"", 137, True), "(timed out, nothing printed)"),
        (ProcessOutcome(b"", b"", 1, False), "(exit 1, nothing printed)"),
    ],
)
async def test_a_sandbox_that_cannot_start_says_how_it_failed(
    bwrap_options: SandboxOptions, monkeypatch: pytest.MonkeyPatch, outcome: ProcessOutcome, said: str
) -> None:
    """The first launch's failure, whatever its kind, reaches the operator's line (an empty
    reason left a failure seen under load unexplained)."""

    async def failing(self: BwrapSandbox, script: str, args: list[str], *, timeout: float) -> ProcessOutcome:
        return outcome

    monkeypatch.setattr(BwrapSandbox, "launch", failing)
    with pytest.raises(SandboxError) as raised:
        async with open_sandbox(SPEC, bwrap_options):
            pass
    assert str(raised.value).startswith("bwrap could not start the sandbox: ")
    assert str(raised.value).endswith(said)
