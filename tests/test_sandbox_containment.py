"""What a bwrap command leaves once its call has returned: nothing of its pid namespace
(issue 20 item 5: after a fork bomb a process of the sandbox's user outlived the run); and
what a prompt may write: `disk_mb` in all (issue 20 item 5: 3,000 MB went unchecked, also in a
docker sandbox on an engine that cannot cap a container's writable layer)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.bwrap.sandbox import open_sandbox
from agent.sandboxes.docker import disk_image
from agent.sandboxes.docker.container_exec import restart_container
from agent.sandboxes.docker.engine import engine_client
from agent.sandboxes.docker.lifecycle import LABEL_RUN, disk_capped
from agent.sandboxes.docker.sandbox import open_sandbox as open_docker_sandbox
from agent.sandboxes.host.mounts import mounts_under
from agent.sandboxes.host.owner import current_owner
from agent.sandboxes.host.sandbox_dirs import OWNER_FILE, kill_processes_using, make_sandbox_dir, remove_tree
from tests.fixtures.containers import MARKED_IMAGE, Engine

pytestmark = pytest.mark.anyio
SPEC = SandboxSpec(run_name="run-c", prompt_key="prompt-0")
NAMESPACE = "readlink /proc/self/ns/pid; "
# Many processes that hold no descriptor of the command's output (the old launcher waited
# for the output's EOF, which only the processes holding it delayed).
SPREAD = "for i in $(seq 40); do sleep 900 >/dev/null 2>&1 </dev/null & done; "
BOMB = "f() { f >/dev/null 2>&1 & f >/dev/null 2>&1 & }; f; "


def _in_namespace(namespace: str) -> list[int]:
    """Host pids of the live processes in the pid namespace `namespace` (zombies have none)."""
    found = []
    for name in os.listdir("/proc"):
        try:
            if name.isdigit() and os.readlink(f"/proc/{name}/ns/pid") == namespace:
                with open(f"/proc/{name}/stat") as handle:
                    if handle.read().rsplit(")", 1)[1].split()[0] != "Z":
                        found.append(int(name))
        except OSError:
            continue
    return found


@pytest.mark.bwrap
@pytest.mark.parametrize(
    ("command", "timeout"),
    [
        (SPREAD + "echo spawned", 30.0),  # the command exits: its background processes die
        (BOMB + "sleep 1; echo done", 30.0),  # a fork bomb bounded by the process limit
        (BOMB + "sleep 600", 3.0),  # the same, killed at its timeout
        (SPREAD + "exec sleep 600", 3.0),
    ],
)
async def test_nothing_of_a_command_outlives_its_call(
    bwrap_options: SandboxOptions, command: str, timeout: float
) -> None:
    async with open_sandbox(SPEC, bwrap_options) as sandbox:
        for _ in range(3):  # a race shows up in some rounds only
            result = await sandbox.exec(NAMESPACE + command, timeout=timeout)
            namespace = result.output.split("\n", 1)[0]
            assert namespace.startswith("pid:["), result.output
            assert _in_namespace(namespace) == []
        assert (await sandbox.exec("echo alive", timeout=30)).output == "alive\n"


WRITE_PAST = "dd if=/dev/zero of={path} bs=1M count={count} 2>&1; echo exit=$?; du -sm {path} | cut -f1"


@pytest.mark.bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the disk cap of bwrap sandboxes is a tmpfs: root mounts it")
async def test_a_bwrap_sandbox_cannot_write_past_its_disk_cap(bwrap_options: SandboxOptions) -> None:
    options = dataclasses.replace(bwrap_options, disk_mb=32)
    async with open_sandbox(SPEC, options) as sandbox:
        host_dir = sandbox.blocking.host_dir
        assert host_dir is not None
        for path in ("/workspace/big", "/tmp/big"):
            result = await sandbox.exec(WRITE_PAST.format(path=path, count=100), timeout=60)
            lines = result.output.splitlines()
            assert "No space left on device" in result.output and "exit=1" in lines, result.output
            assert int(lines[-1]) <= 32  # what was written before the cap stays, within it
            await sandbox.exec(f"rm {path}", timeout=30)
        usage = shutil.disk_usage(host_dir)  # the cap's filesystem, not the host's disk
        assert usage.total <= 32 << 20
        assert (await sandbox.exec("echo goes on > /workspace/f && cat /workspace/f", timeout=30)).output == (
            "goes on\n"
        )
    assert not os.path.exists(host_dir)


@pytest.mark.docker
async def test_a_docker_sandbox_cannot_write_past_its_disk_cap(
    container_engine: Engine, docker_options: SandboxOptions, unique_run_name: str, tmp_path: Path
) -> None:
    """Where the engine cannot cap a container's writable layer (overlay on ext4, as on CI),
    /workspace and /tmp are on a disk image of `disk_mb`, which a restart keeps and close
    removes; only where no disk image can be mounted (a remote engine, a non-root runner)
    does the sandbox work uncapped (and the log says so)."""
    options = dataclasses.replace(docker_options, disk_mb=32, root=str(tmp_path))
    spec = SandboxSpec(run_name=unique_run_name, prompt_key="disk", cwd="sub", image=MARKED_IMAGE)
    async with open_docker_sandbox(spec, options) as sandbox:
        for path in ("/workspace/big", "/tmp/big"):
            result = await sandbox.exec(WRITE_PAST.format(path=path, count=100), timeout=60)
            lines = result.output.splitlines()
            if disk_capped(engine_client()):
                assert "No space left on device" in result.output and "exit=1" in lines, result.output
                assert int(lines[-1]) <= 32
            else:
                assert disk_image.unavailable_reason() is not None and "exit=0" in lines, result.output
            await sandbox.exec(f"rm {path}", timeout=30)
        await sandbox.write_file("f", b"goes on\n")  # through the container, into its workdir
        await sandbox.exec("echo kept > /tmp/t", timeout=30)
        [container] = container_engine.ours(**{LABEL_RUN: unique_run_name})
        restart_container(engine_client(), container.id)  # how a fork bomb is stopped
        result = await sandbox.exec("pwd; cat f /tmp/t ../marker; stat -c %a /tmp", timeout=30)
        assert result.output == "/workspace/sub\ngoes on\nkept\nmarked\n1777\n"  # and what the image holds
    assert container_engine.ours(**{LABEL_RUN: unique_run_name}) == []
    _assert_no_disk_image_left(tmp_path)


def _assert_no_disk_image_left(root: Path) -> None:
    """No directory, mount or loop device of a disk image under `root` (the kernel frees a loop
    device once its last user is gone: the container's mounts may go a moment after it)."""
    assert list(root.iterdir()) == []
    assert mounts_under(str(root), fresh=True) == []
    deadline = time.monotonic() + 10
    while any(str(root) in backing for backing in _loop_backing_files()):
        assert time.monotonic() < deadline, _loop_backing_files()
        time.sleep(0.1)


def _loop_backing_files() -> list[str]:
    return [path.read_text() for path in Path("/sys/block").glob("loop*/loop/backing_file")]


@pytest.mark.docker
@pytest.mark.skipif(disk_image.unavailable_reason() is not None, reason="no disk image can be mounted here")
def test_reaping_removes_the_disk_image_of_a_dead_runner(container_engine: Engine, tmp_path: Path) -> None:
    client = engine_client()
    # Names of this test's own: an engine may be shared with another run of the suite (xdist
    # workers, another checkout), whose volumes the last check must not see.
    dead_owner, live_owner = (f"{role}-owner-{os.urandom(4).hex()}" for role in ("dead", "live"))
    disk_image.make(client, str(tmp_path), dead_owner, 8)
    disk_image.make(client, str(tmp_path), live_owner, 8)
    dead = subprocess.Popen(["true"])
    dead.wait()
    owner_file = tmp_path / (disk_image.DIR_PREFIX + dead_owner) / OWNER_FILE
    owner_file.write_text(json.dumps({**current_owner(), "pid": str(dead.pid)}))
    reaped = disk_image.reap(client, str(tmp_path))
    volumes = [f"{disk_image.VOLUME_PREFIX}{dead_owner}-{place}" for place in ("tmp", "workspace")]
    dead = [str(owner_file.parent), *volumes]
    assert set(dead) <= set(reaped) and not [name for name in reaped if live_owner in name], reaped
    assert [path.name for path in tmp_path.iterdir()] == [disk_image.DIR_PREFIX + live_owner]
    disk_image.remove(client, str(tmp_path), live_owner)
    label = f"{disk_image.VOLUME_LABEL}=1"
    # the name is matched here: Podman's `name` filter does not narrow the list (another run's
    # volumes came back), Docker's matches a substring, as this does
    names = [v.name for v in client.volumes.list(filters={"label": label})]
    assert [name for name in names for owner in (dead_owner, live_owner) if owner in name] == []
    _assert_no_disk_image_left(tmp_path)


@pytest.mark.bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the disk cap of bwrap sandboxes is a tmpfs: root mounts it")
def test_reaping_a_capped_sandbox_kills_only_its_own_processes(bwrap_root: str) -> None:
    """The cap's mount is in the host's mount table: the host's processes, and a copy of that
    table in another namespace, show it at its own path; only a sandbox binds it elsewhere."""
    directory = make_sandbox_dir("bwrap-reap-", bwrap_root, 8)
    os.makedirs(os.path.join(directory, "workspace"))
    bystanders = [
        subprocess.Popen(["sleep", "300"]),
        subprocess.Popen(["unshare", "--mount", "--propagation=private", "sleep", "300"]),
    ]
    sandboxed = subprocess.Popen(
        [
            "bwrap",
            "--dev-bind",
            "/",
            "/",
            "--bind",
            os.path.join(directory, "workspace"),
            "/mnt",
            "sleep",
            "300",
        ]
    )
    try:
        time.sleep(1)  # bwrap and unshare have set up their namespaces
        kill_processes_using(directory)
        assert sandboxed.wait(timeout=10) in (-9, 137)  # killed (or its child, which bwrap reports)
        assert [proc.poll() for proc in bystanders] == [None, None]
    finally:
        for proc in [*bystanders, sandboxed]:
            proc.kill()
            proc.wait()
        remove_tree(directory)


def test_no_disk_image_for_an_engine_on_another_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """It could not see the image mounted here: the run goes on uncapped, and the log says why."""
    monkeypatch.setenv("DOCKER_HOST", "tcp://10.0.0.7:2375")
    assert "not on this host" in str(disk_image.unavailable_reason())
    monkeypatch.setenv("DOCKER_HOST", "ssh://builder")
    assert "not on this host" in str(disk_image.unavailable_reason())
