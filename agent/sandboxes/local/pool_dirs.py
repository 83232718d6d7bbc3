"""The local backend's pool directories on disk: claiming one (owner marker first, then the
dir), and reaping those whose owner died (kill -9, the OOM killer) with whatever they left
running and mounted.

    <root>/<run_name>/<pool>.owner   JSON {host, pid, start, boot} of the owning process
    <root>/<run_name>/<pool>/        the pool: its slots and its cgroup join script

The marker is written before the pool dir is made and removed after it is deleted: a pool dir
without a marker is an orphan.
"""

from __future__ import annotations

import json
import logging
import os
import re
import secrets
from contextlib import suppress
from pathlib import Path

from agent.errors import SandboxError
from agent.sandboxes.host.mounts import detach_under
from agent.sandboxes.host.owner import current_owner, owner_is_dead
from agent.sandboxes.host.process_groups import kill_strays
from agent.sandboxes.host.sandbox_dirs import remove_tree
from agent.sandboxes.local import tracking

log = logging.getLogger(__name__)

POOL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*-[0-9a-f]{12}")  # <prefix>-<random>


def safe_name(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._")[:64]
    return cleaned or "_"


def claim_dir(run_dir: str, prefix: str) -> tuple[str, str]:
    """Write an owner marker, then make the dir it owns; returns (realpath of dir, marker path)."""
    for _ in range(5):  # a concurrent reap_stale may remove the empty run dir under us
        os.makedirs(run_dir, exist_ok=True)
        name = f"{prefix}-{secrets.token_hex(6)}"
        path, marker = os.path.join(run_dir, name), os.path.join(run_dir, name + ".owner")
        try:
            _write_atomic(marker, json.dumps(current_owner()).encode())
            os.mkdir(path, 0o700)
        except FileNotFoundError:
            with suppress(FileNotFoundError):
                os.unlink(marker)
            continue
        return os.path.realpath(path), marker
    raise SandboxError(f"could not create a sandbox directory under {run_dir}")


def remove_pool(path: str) -> None:
    """Kill what still runs in the pool, detach its mounts, delete it (OSError/SandboxError
    when something stays: then nothing under a mount was touched)."""
    tracking.reap(path)
    kill_strays(path)
    detach_under(path)
    remove_tree(path)


def reap_stale(root: str) -> list[str]:
    """Delete the pools under `root` whose owner is dead, and pool dirs without a marker;
    returns the paths removed. Entries we cannot recognise are never touched."""
    base = Path(os.path.realpath(root))
    removed: list[str] = []
    for run_dir in (p for p in _entries(base) if p.is_dir()):
        for entry in _entries(run_dir):
            if not POOL_NAME.fullmatch(entry.name.removesuffix(".owner")):
                continue
            if entry.suffix == ".owner" and _owner_dead(entry):
                removed += _reap(entry.with_suffix(""), entry)
            elif entry.is_dir() and not entry.with_name(entry.name + ".owner").exists():
                removed += _reap(entry, None)  # markers outlive their dirs: this is an orphan
        with suppress(OSError):
            run_dir.rmdir()
    return removed


def _write_atomic(path: str, data: bytes) -> None:
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)


def _owner_dead(marker: Path) -> bool:
    try:
        owner = json.loads(marker.read_text())
        return owner_is_dead({str(k): str(v) for k, v in owner.items()})
    except (OSError, ValueError, AttributeError):
        return True  # unreadable marker: markers are written atomically, so its owner died


def _reap(path: Path, marker: Path | None) -> list[str]:
    existed = path.is_dir()
    try:
        remove_pool(str(path))
        if marker is not None:
            marker.unlink(missing_ok=True)
    except (OSError, SandboxError) as exc:
        log.warning("could not reap stale sandbox %s: %s", path, exc)
        return []
    return [str(path)] if existed else []


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []
