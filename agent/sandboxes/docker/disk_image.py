"""A prompt's disk cap where the engine cannot cap a container's writable layer (overlay on
ext4 refuses `storage_opt` size): a sparse ext4 image file of `disk_mb` per sandbox, loop-
mounted by the runner on the host, whose `workspace` and `tmp` are bind-mounted into the
container at /workspace and /tmp. Past the cap a write there fails with ENOSPC. Unlike a tmpfs
mount, a bind survives the restart that stops a fork bomb or a command that cannot be killed.

It needs the engine to see this host's mounts (a unix socket: a local engine) and a root
runner (mount). The directory, `docker-disk-<sandbox id>` under the sandbox root, holds an
owner record like a bwrap sandbox's, so a runner killed with SIGKILL leaves nothing that
`reap` (called at start) does not remove: its mount is detached lazily and the image deleted;
the kernel frees the loop device (autoclear) once the last container using it is gone.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
import subprocess
import tempfile

from docker.types import Mount

from agent.errors import SandboxError
from agent.sandboxes.host.owner import current_owner
from agent.sandboxes.host.sandbox_dirs import OWNER_FILE, reap_dirs, remove_tree

DIR_PREFIX = "docker-disk-"
IMAGE_FILE = "disk.img"
MOUNT_DIR = "mnt"
WORKSPACE = "/workspace"
MKFS = "mkfs.ext4"
# No journal and no blocks reserved for root: the prompt gets close to `disk_mb`, and making
# the filesystem writes under a megabyte (about 10 ms for 1 GB, the image stays sparse).
MKFS_ARGS = ["-q", "-F", "-m", "0", "-O", "^has_journal", "-E", "root_owner=0:0"]


def unavailable_reason() -> str | None:
    """Why this runner cannot give a container a disk image (None: it can)."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return f"the engine at {host} is not on this host: it cannot see a disk image mounted here"
    if os.geteuid() != 0:
        return "mounting a disk image for it needs a root runner"
    if _tool(MKFS) is None:
        return f"{MKFS} is not installed (Debian: e2fsprogs)"
    return None


def _tool(name: str) -> str | None:
    return shutil.which(name, path=os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"]))


def _directory(root: str | None, sandbox_id: str) -> str:
    return os.path.join(root or tempfile.gettempdir(), DIR_PREFIX + sandbox_id)


def make(root: str | None, sandbox_id: str, disk_mb: int, workdir: str) -> list[Mount]:
    """Makes and mounts the sandbox's disk image; returns the container's mounts of it.
    SandboxError when it cannot; whatever was made is then removed."""
    directory = _directory(root, sandbox_id)
    os.mkdir(directory, 0o700)
    try:
        with open(os.path.join(directory, OWNER_FILE), "w", encoding="utf-8") as handle:
            json.dump(current_owner(), handle)
        image, mounted = os.path.join(directory, IMAGE_FILE), os.path.join(directory, MOUNT_DIR)
        with open(image, "wb") as handle:
            handle.truncate(disk_mb << 20)  # sparse: costs nothing until written
        os.mkdir(mounted, 0o700)
        _run([_tool(MKFS) or MKFS, *MKFS_ARGS, image])
        _run(["mount", "-o", "loop,nosuid,nodev", image, mounted])
        _make_places(mounted, workdir)
    except BaseException:
        remove_tree(directory)
        raise
    return [
        Mount(WORKSPACE, os.path.join(mounted, "workspace"), type="bind"),
        Mount("/tmp", os.path.join(mounted, "tmp"), type="bind"),
    ]


def _make_places(mounted: str, workdir: str) -> None:
    """workspace (root's, as the engine would make it) with the prompt's workdir inside it,
    made here: the engine makes a missing workdir in the image, beneath the bind; tmp 1777."""
    os.mkdir(os.path.join(mounted, "workspace"), 0o755)
    inside = posixpath.relpath(workdir, WORKSPACE)
    if inside != "." and not inside.startswith(".."):
        os.makedirs(os.path.join(mounted, "workspace", inside), 0o755, exist_ok=True)
    tmp = os.path.join(mounted, "tmp")
    os.mkdir(tmp)
    os.chmod(tmp, 0o1777)  # mkdir's mode is masked by the umask


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        problem = (done.stderr or done.stdout).strip().splitlines() or [f"exit status {done.returncode}"]
        raise SandboxError(f"cannot make the sandbox's disk image ({command[0]}): {problem[-1]}")


def remove(root: str | None, sandbox_id: str) -> None:
    """Detaches (lazily: a container may still hold it) and deletes the sandbox's disk image."""
    remove_tree(_directory(root, sandbox_id))


def reap(root: str | None) -> list[str]:
    """Removes the disk images whose owner process is dead; returns their directories."""
    return reap_dirs(root or tempfile.gettempdir(), DIR_PREFIX)
