"""Per-sandbox host directories (bwrap): made with an owner record beside the sandbox's own
places, removed even when the sandbox took permissions away, reaped when their owner died.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from typing import Any

from agent.sandboxes.owner import current_owner, owner_is_dead

OWNER_FILE = "owner.json"  # beside workspace/ and tmp/, out of the sandbox's sight


def make_sandbox_dir(prefix: str, root: str | None) -> str:
    directory = tempfile.mkdtemp(prefix=prefix, dir=root)
    with open(os.path.join(directory, OWNER_FILE), "w", encoding="utf-8") as handle:
        json.dump(current_owner(), handle)
    return directory


def remove_tree(directory: str) -> None:
    shutil.rmtree(directory, onerror=_force_remove)


def _force_remove(func: Any, path: str, _exc: Any) -> None:
    # The sandbox may leave directories without write or search permission.
    os.chmod(os.path.dirname(path), 0o700)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o700)
    func(path)


def reap_dirs(root: str, prefix: str) -> list[str]:
    """Removes the `prefix`* directories under `root` whose owner is dead; returns them."""
    removed = []
    for entry in os.scandir(root):
        if not entry.name.startswith(prefix) or not entry.is_dir(follow_symlinks=False):
            continue
        try:
            with open(os.path.join(entry.path, OWNER_FILE), encoding="utf-8") as handle:
                owner = json.load(handle)
        except (OSError, ValueError):
            continue  # not one of ours, or being made right now
        if isinstance(owner, dict) and owner_is_dead(owner):
            remove_tree(entry.path)
            removed.append(entry.path)
    return removed
