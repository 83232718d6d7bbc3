"""The local sandbox backend, with real processes: isolation of env and paths, killing and cleanup."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from contextlib import AbstractAsyncContextManager
from pathlib import Path

import pytest

from agent.errors import SandboxError, SandboxPathError
from agent.protocols import Sandbox, SandboxFactory, SandboxSpec
from agent.sandboxes import SandboxOptions, local, sandbox_factory
from agent.sandboxes.host.sandbox_dirs import remove_tree
from agent.sandboxes.local.sandbox import LocalSandbox, open_sandbox, unavailable_reason

SPEC = SandboxSpec(run_name="run-1", prompt_key="prompt-a")
REPO = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    """True while pid exists and is not a zombie (an unreaped corpse runs nothing)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _processes_with_home(home: str) -> list[int]:
    """Live processes whose environment says HOME=<home>: everything a sandbox started."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            environ = Path(f"/proc/{name}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"HOME={home}".encode() in environ and _alive(int(name)):
            found.append(int(name))
    return found


pytestmark = pytest.mark.anyio
# Commands are watched by the event loop: asyncio's, and uvloop's as in a batch worker.
on_both_loops = pytest.mark.parametrize(
    "anyio_backend",
    [("asyncio", {"use_uvloop": False}), ("asyncio", {"use_uvloop": True})],
    ids=["asyncio", "uvloop"],
)
LOCAL = local.BACKEND


def _open(root: Path, spec: SandboxSpec = SPEC) -> AbstractAsyncContextManager[LocalSandbox]:
    return open_sandbox(spec, SandboxOptions(root=str(root)))


# ---------------------------------------------------------------- environment and commands


@on_both_loops
async def test_commands_never_see_host_secrets(
    monkeypatch: pytest.MonkeyPatch, local_sandbox_factory: SandboxFactory
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret-value")
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-secret-value")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "aws-secret-value")
    async with local_sandbox_factory(SPEC) as sandbox:
        result = await sandbox.exec("env", timeout=30)
    assert result.exit_code == 0
    for leaked in ("secret-value", "OPENAI_API_KEY", "OPENROUTER_API_KEY", "AWS_SECRET_ACCESS_KEY"):
        assert leaked not in result.output
    env = dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)
    assert env["TERM"] == "dumb"
    assert env["HOME"].endswith("/home") and env["TMPDIR"].endswith("/tmp")
    assert env["PATH"]


@on_both_loops
async def test_exec_merges_output_and_reports_exit_codes(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec("echo out; echo err >&2; exit 3", timeout=30)
    assert (result.output, result.exit_code, result.timed_out) == ("out\nerr\n", 3, False)
    assert (await local_sandbox.exec("kill -9 $$", timeout=30)).exit_code == 128 + signal.SIGKILL
    assert (
        await local_sandbox.exec("cat", timeout=30)
    ).output == ""  # stdin is /dev/null, never the runner's


@on_both_loops
async def test_timeout_kills_the_whole_process_tree(local_sandbox: LocalSandbox, tmp_path: Path) -> None:
    flag, pids = tmp_path / "child-survived", tmp_path / "pids"
    command = f"(sleep 2; touch {flag}) & echo $! > {pids}; sleep 100 & echo $! >> {pids}; sleep 100"
    result = await local_sandbox.exec(command, timeout=1)
    assert (result.timed_out, result.exit_code) == (True, 124)
    children = [int(p) for p in pids.read_text().split()]
    assert len(children) == 2
    assert not any(_alive(pid) for pid in children)
    assert _processes_with_home(os.path.join(local_sandbox.root, "home")) == []
    await asyncio.sleep(3)  # the subshell would have touched the flag by now had it survived
    assert not flag.exists()


@on_both_loops
async def test_fast_commands_are_waited_for_not_killed(local_sandbox: LocalSandbox) -> None:
    # EOF on the output pipe arrives a moment before the exit: it must not be read as "done".
    codes = {(await local_sandbox.exec("/bin/echo ok", timeout=30)).exit_code for _ in range(100)}
    assert codes == {0}


@on_both_loops
async def test_closing_the_output_does_not_escape_the_timeout(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec("echo bye; exec >&- 2>&-; sleep 100", timeout=1)
    assert (result.output, result.exit_code, result.timed_out) == ("bye\n", 124, True)


@on_both_loops
async def test_background_child_does_not_hold_the_command_and_dies_on_close(
    local_sandbox_factory: SandboxFactory, tmp_path: Path
) -> None:
    async with local_sandbox_factory(SPEC) as sandbox:
        result = await sandbox.exec(
            "sleep 300 & echo $!; setsid sleep 301 > /dev/null 2>&1 & echo $!", timeout=60
        )
        assert not result.timed_out and result.exit_code == 0
        in_group, escaped = (int(p) for p in result.output.split())
        assert _alive(in_group) and _alive(escaped)
        home = os.path.join(sandbox.workdir, "..", "home")
    assert not _alive(in_group)
    assert not _alive(escaped)  # left the process group with setsid, still found and killed
    assert _processes_with_home(os.path.realpath(home)) == []


@on_both_loops
async def test_huge_output_keeps_head_and_tail_only(local_sandbox: LocalSandbox) -> None:
    result = await local_sandbox.exec(
        "echo START; head -c 5000000 /dev/zero | tr '\\0' a; echo; echo END", timeout=60
    )
    assert result.exit_code == 0
    assert len(result.output) < 2 * 1024 * 1024 + 200
    assert result.output.startswith("START\naaa")
    assert result.output.endswith("aaa\nEND\n")
    assert "bytes of output omitted" in result.output


@on_both_loops
async def test_exec_after_close_is_refused(local_sandbox_factory: SandboxFactory) -> None:
    async with local_sandbox_factory(SPEC) as sandbox:
        pass
    with pytest.raises(SandboxError, match="closed"):
        await sandbox.exec("true", timeout=5)


# ---------------------------------------------------------------- directories and cleanup


@pytest.mark.parametrize("error", [None, ValueError("boom"), KeyboardInterrupt()], ids=repr)
async def test_leaving_the_block_removes_everything(
    local_sandbox_root: Path, error: BaseException | None
) -> None:
    try:
        async with _open(local_sandbox_root) as sandbox:
            root = Path(sandbox.root)
            await sandbox.write_file("data.txt", b"x")
            await sandbox.exec("sleep 300 > /dev/null 2>&1 &", timeout=30)
            assert root.is_dir() and len(list(local_sandbox_root.rglob("*.owner"))) == 1
            if error is not None:
                raise error
    except (ValueError, KeyboardInterrupt) as caught:
        assert caught is error
    assert not root.exists()
    assert list(local_sandbox_root.iterdir()) == []  # no marker, no empty run dir
    assert _processes_with_home(str(root / "home")) == []


async def test_each_sandbox_gets_its_own_directory(local_sandbox_factory: SandboxFactory) -> None:
    async with local_sandbox_factory(SPEC) as first, local_sandbox_factory(SPEC) as second:
        await first.write_file("mine.txt", b"first")
        assert first.workdir != second.workdir
        with pytest.raises(FileNotFoundError):
            await second.read_file("mine.txt")


async def test_names_are_sanitised_into_the_root(local_sandbox_root: Path) -> None:
    spec = SandboxSpec(run_name="../../evil run", prompt_key="a/b\\c")
    async with _open(local_sandbox_root, spec) as sandbox:
        assert Path(sandbox.root).is_relative_to(local_sandbox_root.resolve())
        pool = Path(sandbox.root).parent  # <root>/<run>/<pool>/<slot>
        assert pool.parent == local_sandbox_root.resolve() / "evil_run"
        assert pool.name.startswith("a_b_c-")


@pytest.mark.parametrize(
    ("cwd", "relative"), [(None, "workspace"), ("/app", "app"), ("src/pkg", "workspace/src/pkg")]
)
async def test_dataset_cwd_is_honoured_inside_the_sandbox(
    local_sandbox_root: Path, cwd: str | None, relative: str
) -> None:
    spec = SandboxSpec(run_name="r", prompt_key="k", cwd=cwd)
    async with _open(local_sandbox_root, spec) as sandbox:
        assert sandbox.workdir == os.path.join(sandbox.root, relative)
        assert (await sandbox.exec("pwd", timeout=30)).output.strip() == "/" + relative  # as in bwrap


async def test_cwd_leaving_the_sandbox_is_refused_and_nothing_is_left(local_sandbox_root: Path) -> None:
    spec = SandboxSpec(run_name="r", prompt_key="k", cwd="../../..")
    with pytest.raises(SandboxPathError):
        async with _open(local_sandbox_root, spec):
            pass
        pass
    assert list(local_sandbox_root.iterdir()) == []


@on_both_loops
async def test_exec_cwd_argument(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_file("sub/file.txt", b"")
    assert (await local_sandbox.exec("ls", timeout=30, cwd="sub")).output == "file.txt\n"
    with pytest.raises(SandboxPathError):
        await local_sandbox.exec("ls", timeout=30, cwd="/etc")
    with pytest.raises(FileNotFoundError):
        await local_sandbox.exec("ls", timeout=30, cwd="missing")


# ---------------------------------------------------------------- files


async def test_files_round_trip_relative_and_absolute(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_file("a/b/c.txt", b"hello")
    absolute = os.path.join(local_sandbox.workdir, "a/b/c.txt")
    assert (await local_sandbox.read_file(absolute)) == b"hello"
    await local_sandbox.write_file(absolute, b"again")
    assert Path(absolute).read_bytes() == b"again"
    assert os.listdir(os.path.dirname(absolute)) == ["c.txt"]  # the temp file was renamed away


async def test_write_keeps_the_mode_of_an_existing_file(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_file("run.sh", b"#!/bin/sh\necho one\n")
    await local_sandbox.exec("chmod 755 run.sh", timeout=30)
    await local_sandbox.write_file("run.sh", b"#!/bin/sh\necho two\n")
    assert (await local_sandbox.exec("./run.sh", timeout=30)).output == "two\n"


@pytest.mark.parametrize("path", ["/etc/passwd", "../../../../../../etc/passwd", "escape/passwd"])
async def test_paths_outside_the_sandbox_are_refused(local_sandbox: LocalSandbox, path: str) -> None:
    await local_sandbox.exec("ln -s /etc escape", timeout=30)
    with pytest.raises(SandboxPathError, match="outside the sandbox") as refused:
        await local_sandbox.read_file(path)
    assert local_sandbox.root not in str(refused.value)
    with pytest.raises(SandboxPathError, match="outside the sandbox"):
        await local_sandbox.write_file(path.replace("passwd", "agent-test-should-not-exist"), b"x")
    assert not Path("/etc/agent-test-should-not-exist").exists()


async def test_symlinks_inside_the_sandbox_are_followed(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.write_file("real.txt", b"data")
    await local_sandbox.exec("ln -s real.txt link.txt", timeout=30)
    assert (await local_sandbox.read_file("link.txt")) == b"data"


async def test_reading_odd_files_fails_cleanly(local_sandbox: LocalSandbox) -> None:
    await local_sandbox.exec("mkdir dir && mkfifo pipe", timeout=30)
    with pytest.raises(IsADirectoryError):
        await local_sandbox.read_file("dir")
    with pytest.raises(OSError, match="Not a regular file"):
        await local_sandbox.read_file("pipe")  # a FIFO would block a plain open() forever
    with pytest.raises(FileNotFoundError):
        await local_sandbox.read_file("missing")


# ---------------------------------------------------------------- stale sandboxes


_ORPHAN_MAKER = """
import asyncio, os, signal, sys
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.local.sandbox import open_sandbox

async def main():
    context = open_sandbox(SandboxSpec("run-1", "dead"), SandboxOptions(root=sys.argv[1]))
    sandbox = await context.__aenter__()  # never left: the process dies with the sandbox open
    result = await sandbox.exec("sleep 300 > /dev/null 2>&1 & echo $!", timeout=30)
    print(sandbox.root, result.output.strip(), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)

asyncio.run(main())
"""


async def test_reap_stale_removes_dead_owners_sandboxes_only(local_sandbox_root: Path) -> None:
    made = subprocess.run(
        [sys.executable, "-c", _ORPHAN_MAKER, str(local_sandbox_root)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert made.returncode == -signal.SIGKILL, made.stderr
    dead_root, sleeper = made.stdout.split()
    assert Path(dead_root).is_dir() and _alive(int(sleeper))  # kill -9 left both behind
    orphan = local_sandbox_root / "run-1" / "orphan-0123456789ab"  # a dir whose marker is gone
    orphan.mkdir()
    foreign = local_sandbox_root / "run-1" / "notes"  # not ours: never touched
    foreign.mkdir()
    dead_pool = str(Path(dead_root).parent)
    async with _open(local_sandbox_root) as live:
        removed = LOCAL.reap_stale(SandboxOptions(root=str(local_sandbox_root)))
        assert sorted(removed) == sorted([dead_pool, str(orphan)])
        assert Path(live.root).is_dir()
    assert not Path(dead_pool).exists() and not Path(dead_pool + ".owner").exists()
    assert not _alive(int(sleeper))
    assert foreign.is_dir()


async def test_reap_stale_treats_a_reused_pid_as_dead(local_sandbox_root: Path) -> None:
    async with _open(local_sandbox_root) as sandbox:
        pool = str(Path(sandbox.root).parent)
        marker = Path(pool + ".owner")
        owner = json.loads(marker.read_text())
        assert owner["pid"] == str(os.getpid())
        marker.write_text(json.dumps({**owner, "start": "1"}))  # our pid, another process's start
        assert LOCAL.reap_stale(SandboxOptions(root=str(local_sandbox_root))) == [pool]


# ---------------------------------------------------------------- registry


async def test_local_backend_through_the_registry(local_sandbox_root: Path) -> None:
    options = SandboxOptions(backend="local", root=str(local_sandbox_root))
    assert unavailable_reason(options) is None
    async with sandbox_factory(options)(SPEC) as sandbox:
        assert isinstance(sandbox, Sandbox)
        assert (await sandbox.exec("echo hi", timeout=30)).output == "hi\n"


async def test_close_spares_a_group_whose_id_was_reused(local_sandbox_factory: SandboxFactory) -> None:
    # A remembered group can die on its own and its id go to an unrelated process group;
    # simulate that by making the sandbox remember an innocent group started outside it.
    innocent = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        async with local_sandbox_factory(SPEC) as sandbox:
            sandbox._processes._groups.add(innocent.pid)  # type: ignore[attr-defined]
        assert innocent.poll() is None and _alive(innocent.pid)
    finally:
        innocent.kill()
        innocent.wait()


# ---------------------------------------------------------------- commands on the event loop


@on_both_loops
async def test_a_cancelled_command_dies_with_its_group(local_sandbox: LocalSandbox) -> None:
    task = asyncio.create_task(local_sandbox.exec("sleep 301 & echo $! > pid; sleep 300", timeout=600))
    pid_file = Path(local_sandbox.workdir, "pid")
    # The redirection creates the file before echo writes it: a loaded machine let the test
    # cancel in between, and read an empty file. Wait for the whole line.
    while not (pid_file.exists() and pid_file.read_text().endswith("\n")):
        await asyncio.sleep(0.02)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    background = int(await local_sandbox.read_file("pid"))
    for _ in range(250):  # SIGKILLed at once, not waited for: give the kernel a moment
        if not _alive(background):
            break
        await asyncio.sleep(0.02)
    assert not _alive(background)
    assert _processes_with_home(os.path.join(local_sandbox.root, "home")) == []


@on_both_loops
async def test_a_flooding_command_does_not_hold_the_event_loop(local_sandbox: LocalSandbox) -> None:
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.01)
            ticks += 1

    ticker = asyncio.create_task(tick())
    try:
        result = await local_sandbox.exec("yes", timeout=1)
    finally:
        ticker.cancel()
    assert result.timed_out and result.output.startswith("y\ny\n")
    assert ticks >= 20  # about 100 if the loop turns; none if reading the pipe held it


NOBODY = 65534


def test_a_tree_a_command_locked_is_removed_by_an_unprivileged_owner(tmp_path: Path) -> None:
    """chmod 000 and read-only directories left by a command: root ignores them, any other
    user (bwrap runs unprivileged) must restore permissions first. The removal runs in a
    forked child that dropped to `nobody`."""
    if os.geteuid() != 0:
        pytest.skip("needs root, to drop to another user in a child")
    base = Path(tempfile.mkdtemp(prefix="locked-", dir="/tmp"))
    try:
        tree = base / "sandbox"
        (tree / "a" / "b").mkdir(parents=True)
        (tree / "a" / "b" / "f").write_text("x")
        (tree / "c" / "d").mkdir(parents=True)
        for path in (base, *base.rglob("*")):
            os.chown(path, NOBODY, NOBODY)
        (tree / "a" / "b").chmod(0)
        (tree / "c").chmod(0o500)
        pid = os.fork()
        if pid == 0:  # the child: no pytest machinery from here on, only os._exit
            code = 2
            try:
                os.setgroups([])
                os.setgid(NOBODY)
                os.setuid(NOBODY)
                remove_tree(str(tree))
                code = 0 if not tree.exists() else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)
