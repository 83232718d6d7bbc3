"""Isolation by default: what a prompt leaves on the local backend (processes that shed their
process group, cwd and HOME; mounts) dies or is detached with it, each cgroup hierarchy kills
a group whole, and `auto` picks bwrap when it works here, else local, said once.

Real sandboxes, real processes, real cgroups and mounts (the runner is root under CI); where
this machine lacks one of them, the test fails under CI=true and skips elsewhere."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions, reap_stale, resolve_backend, unavailable_reason
from agent.sandboxes.host import cgroups, memory_limits
from agent.sandboxes.host.cgroups import Hierarchy
from agent.sandboxes.host.mounts import mounts_under
from agent.sandboxes.local import tracking
from agent.sandboxes.local.sandbox import open_pool
from agent.servers.simulated.server import SimulatedEndpoint
from tests.fixtures.containers import missing
from tests.support.batch import BatchCLI, read_json, tool_then_answer, write_dataset

REPO = Path(__file__).resolve().parent.parent
# Each prints the pid of a process that left the command's process group, its cwd and HOME.
HOSTILE = (
    "cd / && env -u HOME setsid sleep 3105 >/dev/null 2>&1 & echo $!",
    "(cd / && HOME=/ setsid sh -c 'sleep 3106 >/dev/null 2>&1 & echo $!') | cat",  # a daemon
    "exec 3<. && cd / && env -u HOME setsid sleep 3107 >/dev/null 2>&1 & echo $!",  # holds the dir
)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tracked() -> Hierarchy:
    found = cgroups.hierarchy()
    if found is None:
        missing(f"no usable cgroup here: {cgroups.why_untracked()}")
    assert found is not None
    return found


@pytest.fixture
def as_root() -> None:
    if os.geteuid() != 0:
        missing("mounting needs root")


@pytest.mark.anyio
@pytest.mark.usefixtures("tracked")
async def test_strays_that_shed_group_cwd_and_home_die_with_their_prompt(tmp_path: Path) -> None:
    async with open_pool(SandboxOptions(backend="local", root=str(tmp_path)), "iso") as factory:
        async with factory(SandboxSpec("iso", "hostile")) as first:
            strays = [int((await first.exec(command, timeout=10)).output) for command in HOSTILE]
            slot = first.root
            assert all(_alive(pid) for pid in strays)
        assert not [pid for pid in strays if _alive(pid)]
        async with factory(SandboxSpec("iso", "next")) as second:
            assert second.root == slot  # reused: nothing of the last prompt can reach it
            assert os.listdir(second.workdir) == []


@pytest.mark.anyio
@pytest.mark.usefixtures("tracked", "as_root")
async def test_mounts_in_a_sandbox_are_detached_and_never_deleted_through(tmp_path: Path) -> None:
    outside = tmp_path / "host-dir"
    outside.mkdir()
    (outside / "keep.txt").write_text("host data")
    script = (
        f"mkdir -p t b && mount -t tmpfs tmpfs t && echo x > t/f && mount -t tmpfs tmpfs t"
        f" && mount --bind {outside} b && mount -t tmpfs tmpfs ../home && echo mounted"
    )
    async with open_pool(SandboxOptions(backend="local", root=str(tmp_path / "sb")), "iso") as factory:
        async with factory(SandboxSpec("iso", "mounter")) as first:
            assert (await first.exec(script, timeout=10)).output.strip() == "mounted"
            slot = first.root
            assert len(mounts_under(slot, fresh=True)) == 4
        assert mounts_under(slot, fresh=True) == []
        assert (outside / "keep.txt").read_text() == "host data"  # b/ was detached, not emptied
        async with factory(SandboxSpec("iso", "next")) as second:
            assert second.root == slot and os.listdir(second.workdir) == []
    assert mounts_under(str(tmp_path), fresh=True) == mounts_under(str(open_tmp), fresh=True) == []
    assert os.listdir(tmp_path / "sb") == []


_DIES = """
import asyncio, json, os, signal, sys
from agent.protocols import SandboxSpec
from agent.sandboxes import SandboxOptions
from agent.sandboxes.local.sandbox import open_pool

async def main():
    async with open_pool(SandboxOptions(root=sys.argv[1]), "dead") as factory:
        async with factory(SandboxSpec("dead", "p")) as sandbox:
            out = await sandbox.exec(sys.argv[2], timeout=10)
            print(json.dumps(int(out.output.split()[-1])), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup at all

asyncio.run(main())
"""


@pytest.mark.usefixtures("tracked", "as_root")
def test_what_a_killed_worker_left_running_or_mounted_is_reaped_at_the_next_start(tmp_path: Path) -> None:
    outside = tmp_path / "host-dir"
    outside.mkdir()
    (outside / "keep.txt").write_text("host data")
    root = tmp_path / "sb"
    command = f"mkdir b && mount --bind {outside} b && {HOSTILE[0]}"
    argv = [sys.executable, "-c", _DIES, str(root), command]
    done = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False)
    stray = int(done.stdout)
    assert _alive(stray) and mounts_under(str(root), fresh=True)
    removed = reap_stale(SandboxOptions(backend="local", root=str(root)))
    assert [path for path in removed if path.startswith(str(root))] != []
    assert not _alive(stray) and mounts_under(str(root), fresh=True) == []
    assert (outside / "keep.txt").read_text() == "host data"
    assert os.listdir(root) == []


def test_a_killed_workers_strays_die_at_the_next_start_even_without_its_directory(
    tmp_path: Path, tracked: Hierarchy
) -> None:
    root = tmp_path / "sb"
    argv = [sys.executable, "-c", _DIES, str(root), HOSTILE[0]]
    stray = int(subprocess.run(argv, capture_output=True, text=True, cwd=REPO, check=False).stdout)
    assert _alive(stray)
    shutil.rmtree(root)  # e.g. a cleaned TMPDIR: no pool directory tells of the dead worker
    lines = [line for line in Path(f"/proc/{stray}/cgroup").read_text().splitlines() if "/agent-" in line]
    (line,) = [line for line in lines if _in_hierarchy(line, tracked.kind)]  # (also its memory group)
    group = tracked.base + line[line.index("/agent-") :]  # its slot's group, under our own
    assert os.path.isdir(group)
    assert reap_stale(SandboxOptions(backend="local", root=str(tmp_path / "elsewhere"))) == []
    assert not _alive(stray) and not os.path.exists(os.path.dirname(group))
    memory = memory_limits.hierarchy()
    if memory is not None:  # its slot's memory group went with it
        (line,) = [line for line in lines if _in_hierarchy(line, memory.kind)]
        assert not os.path.exists(os.path.dirname(memory.base + line[line.index("/agent-") :]))


def _in_hierarchy(line: str, kind: str) -> bool:
    """Whether a line of /proc/PID/cgroup is of the hierarchy of `kind` (cgroup2: `0::`)."""
    controllers = line.split(":")[1]
    return (kind == "cgroup2" and line.startswith("0::")) or kind in controllers.split(",")


@pytest.mark.anyio
async def test_a_command_that_cannot_join_its_cgroup_is_refused_not_run_untracked(
    tmp_path: Path, tracked: Hierarchy
) -> None:
    options = SandboxOptions(backend="local", root=str(tmp_path))
    async with open_pool(options, "iso") as factory, factory(SandboxSpec("iso", "p")) as sandbox:
        pool_dir, slot = os.path.split(sandbox.root)
        os.rmdir(os.path.join(tracked.base, tracking.group_name(pool_dir), slot))  # this process owns it
        result = await sandbox.exec("touch ran", timeout=10)
        assert result.exit_code == 125 and "could not join" in result.output
        assert not os.path.exists(os.path.join(sandbox.workdir, "ran"))


@pytest.mark.anyio
async def test_without_a_cgroup_each_prompt_gets_a_fresh_directory_and_the_log_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cgroups, "hierarchy", lambda: None)  # a kernel or user without cgroups
    monkeypatch.setattr(cgroups, "why_untracked", lambda: "cgroup2: not mounted here")
    assert "no usable cgroup here" in tracking.describe() and "not mounted here" in tracking.describe()
    async with open_pool(SandboxOptions(backend="local", root=str(tmp_path)), "iso") as factory:
        async with factory(SandboxSpec("iso", "a")) as first:
            await first.exec("exec 3<. && sleep 30 >/dev/null 2>&1 &", timeout=10)  # cwd inside: killed
            used = first.root
        assert not os.path.exists(used)
        async with factory(SandboxSpec("iso", "b")) as second:
            assert second.root != used and os.listdir(second.workdir) == []


STRAYS = (
    'echo $$ >"$1" || exit 1; setsid sh -c "sleep 3108 & sleep 3109 & wait" >/dev/null 2>&1 &'
    " (cd / && sleep 3110 >/dev/null 2>&1 &); (while :; do sleep 3111 & sleep 0.02; done) >/dev/null 2>&1 &"
    " echo ready; wait"
)


@pytest.fixture(
    params=[("cgroup2", True), ("cgroup2", False), ("freezer", False), ("pids", False)],
    ids=["cgroup2-kill", "cgroup2-freeze", "freezer", "pids"],
)
def hierarchy_kind(request: pytest.FixtureRequest) -> Iterator[Hierarchy]:
    kind, kill_file = request.param
    found, why = cgroups.probe(kind)
    if found is None:
        missing(f"{kind}: {why}")
    assert found is not None
    if kill_file and not found.kill_file:
        missing("cgroup.kill needs Linux 5.14+")
    yield Hierarchy(kind, found.base, kill_file=kill_file)


def test_each_hierarchy_kills_a_group_whole_and_removes_it(hierarchy_kind: Hierarchy) -> None:
    group = hierarchy_kind.group(f"agent-test-{secrets.token_hex(4)}").make()
    proc = subprocess.Popen(["/bin/sh", "-c", STRAYS, "sh", group.procs], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        deadline = time.monotonic() + 5
        while len(group.members()) < 7 and time.monotonic() < deadline:  # the loop forks on
            time.sleep(0.01)
        members = group.members()
        assert len(members) >= 7 and not group.empty()
        assert group.kill()
        assert group.empty() and not [pid for pid in members if _alive(pid)]
        assert group.remove() and not os.path.exists(group.path)
    finally:
        group.remove(wait=2.0)
        proc.kill()
        proc.communicate()


def _resolve(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = (
        "from agent.sandboxes import SandboxOptions, resolve_backend as r, sandbox_factory\n"
        "chosen = r(None)\n"
        "print(chosen, r('auto'), flush=True)\n"
        "sandbox_factory(SandboxOptions(backend=chosen))  # a run starts: the choice is said\n"
    )
    return subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO, check=False
    )


def test_auto_is_bwrap_where_it_works_else_local_said_once(tmp_path: Path) -> None:
    if unavailable_reason(SandboxOptions(backend="bwrap")) is not None:
        missing("bwrap is not usable here")
    base = {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), "TMPDIR": str(tmp_path)}
    assert resolve_backend(None) == resolve_backend("auto") == "bwrap"
    no_bwrap = tmp_path / "bin"
    no_bwrap.mkdir()
    for tool in ("bash", "sh", "sleep"):
        (no_bwrap / tool).symlink_to(f"/bin/{tool}")
    chose = _resolve({**base, "PATH": str(no_bwrap)})
    assert chose.returncode == 0 and chose.stdout.split() == ["local", "local"], chose.stderr
    said = [line for line in chose.stderr.splitlines() if "sandbox backend:" in line]
    assert len(said) == 1 and "`bwrap` is not installed" in said[0], chose.stderr
    picked = _resolve({**base, "TERMINAL_ENV": "local"})
    assert picked.stdout.split() == ["local", "local"] and "sandbox backend:" not in picked.stderr
    if os.geteuid() == 0:  # pytest's tmp_path is private (0700): a root runner's bwrap cannot enter it
        private = _resolve(base)
        assert private.stdout.split() == ["local", "local"], private.stderr
        assert "must be o+x" in private.stderr, private.stderr


def _running(marker: bytes) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and marker in (entry / "cmdline").read_bytes()
                and _alive(int(entry.name))
            ):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A TMPDIR a root runner's bwrap sandboxes can enter (pytest's tmp_path is private, 0700:
    there `auto` finds bwrap unusable and says so)."""
    root = tempfile.mkdtemp(prefix="isolation-test-")
    os.chmod(root, 0o755)
    try:
        yield Path(root)
    finally:
        shutil.rmtree(root)


@pytest.mark.parametrize("sandbox", [None, "local"])
def test_a_hostile_prompt_leaves_no_process_nor_mount_on_the_default_backend(
    tmp_path: Path, open_tmp: Path, sandbox: str | None
) -> None:
    if unavailable_reason(SandboxOptions(backend="bwrap", root=str(open_tmp))) is not None:
        missing("bwrap is not usable here")
    # Its own sleep: both parameters of this test may run at once on two pytest workers.
    seconds = f"{3112 + (sandbox is not None)}.{os.getpid()}"
    hostile = f"{HOSTILE[0].replace('3105', seconds)}; mkdir -p m && mount -t tmpfs tmpfs m; echo done"
    with SimulatedEndpoint() as endpoint:
        endpoint.script("Hostile", tool_then_answer(command=hostile))
        write_dataset(tmp_path / "d.jsonl", [{"prompt": "Hostile"}, {"prompt": "Hostile"}])
        cli = BatchCLI(tmp_path, endpoint)
        cli.tmpdir = open_tmp
        chosen = [f"--sandbox={sandbox}"] if sandbox else []
        done = cli.run("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=h", *chosen, timeout=120)
    assert done.returncode == 0, done
    recorded = read_json(cli.run_dir("h") / "run_config.json")["sandbox"]["backend"]
    assert recorded == (sandbox or "bwrap")
    assert done.stderr.count("sandbox backend:") == (0 if sandbox else 1), done
    assert _running(f"sleep\0{seconds}\0".encode()) == []
    assert mounts_under(str(tmp_path), fresh=True) == mounts_under(str(open_tmp), fresh=True) == []
