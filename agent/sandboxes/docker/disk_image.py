"""A prompt's disk cap where the engine cannot cap a container's writable layer (overlay on
ext4 refuses `storage_opt` size): a sparse ext4 image file of `disk_mb` per sandbox, loop-
mounted by the runner on the host, whose `workspace` and `tmp` are the container's /workspace
and /tmp (named volumes of the engine's `local` driver binding them). Past the cap a write
there fails with ENOSPC. Unlike a tmpfs mount, a volume survives the restart that stops a fork
bomb or a command that cannot be killed.

It needs the engine to see this host's mounts (a unix socket: a local engine) and a root
runner (mount). The directory, `docker-disk-<sandbox id>` under the sandbox root, holds an
owner record like a bwrap sandbox's, so a runner killed with SIGKILL leaves nothing that
`reap` (called at start) does not remove: its mount is detached lazily, the image deleted, its
volumes (naming a directory now gone) removed; the kernel frees the loop device (autoclear)
once the last container using it is gone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from contextlib import suppress
from typing import Any

from docker.errors import NotFound
from docker.types import Mount

from agent.errors import SandboxError
from agent.sandboxes.host.owner import current_owner
from agent.sandboxes.host.sandbox_dirs import OWNER_FILE, reap_dirs, remove_tree

DIR_PREFIX = "docker-disk-"
IMAGE_FILE = "disk.img"
MOUNT_DIR = "mnt"
PLACES = ("/workspace", "/tmp")
VOLUME_PREFIX = "agent-disk-"
VOLUME_LABEL = "io.agent-batch-runner.disk-image"
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


def make(client: Any, root: str | None, sandbox_id: str, disk_mb: int) -> list[Mount]:
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
        return [_volume(client, sandbox_id, mounted, place) for place in PLACES]
    except BaseException:
        remove(client, root, sandbox_id)
        raise


def _volume(client: Any, sandbox_id: str, mounted: str, place: str) -> Mount:
    """A named volume binding the image's directory for `place`: the engine fills an empty
    named volume from the image (a bind would hide what the image holds there) and gives it
    that directory's owner and mode (root's 1777 for /tmp); made here, it would not be empty."""
    folder = os.path.join(mounted, place.strip("/"))
    os.mkdir(folder, 0o755)
    os.chmod(folder, 0o1777 if place == "/tmp" else 0o755)  # for a place the image lacks
    name = f"{VOLUME_PREFIX}{sandbox_id}-{place.strip('/')}"
    options = {"type": "none", "o": "bind", "device": folder}
    client.volumes.create(name, driver="local", driver_opts=options, labels={VOLUME_LABEL: "1"})
    return Mount(place, name, type="volume")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        problem = (done.stderr or done.stdout).strip().splitlines() or [f"exit status {done.returncode}"]
        raise SandboxError(f"cannot make the sandbox's disk image ({command[0]}): {problem[-1]}")


def remove(client: Any, root: str | None, sandbox_id: str) -> None:
    """Removes the sandbox's volumes (after its container), then detaches (lazily: the engine
    may not have let go of it yet) and deletes its disk image."""
    for place in PLACES:
        try:
            client.api.remove_volume(f"{VOLUME_PREFIX}{sandbox_id}-{place.strip('/')}", force=True)
        except NotFound:
            continue  # never made, or already gone
    remove_tree(_directory(root, sandbox_id))


def reap(client: Any, root: str | None) -> list[str]:
    """Removes the disk images whose owner process is dead, then the volumes whose directory
    is gone (a live sandbox's directory is made before them and deleted after them); returns
    the directories and volumes removed."""
    removed = reap_dirs(root or tempfile.gettempdir(), DIR_PREFIX)
    for volume in client.volumes.list(filters={"label": f"{VOLUME_LABEL}=1"}):
        device = (volume.attrs.get("Options") or {}).get("device", "")
        if device and not os.path.lexists(device):
            with suppress(NotFound):
                client.api.remove_volume(volume.name, force=True)
                removed.append(volume.name)
    return removed
