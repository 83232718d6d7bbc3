"""How a local sandbox presents itself: its directory stands for the sandbox's "/" (as bwrap
and docker show it), so the model reads and writes `/workspace`, `/tmp` and `/home`, never the
host path of the slot (`<root>/<run>/<pool>/<n>/workspace`), which differs per run, process and
slot and would make a local trajectory unlike a bwrap or docker one (issue 21).

Both ways: what a command prints and what the file tools say has the slot's path (and its
pool's and run's) rewritten to the sandbox's; the sandbox's absolute paths in what the model
sends become the slot's, so `cd /workspace` works and a path the model was shown can be used
again. Commands still run on the host and see the host's /tmp and /home: in a command,
`/workspace` (and the dataset's cwd) always names the slot's, while `/tmp/x` and `/home/x` name
the slot's only when the slot holds an `x` there (a file made under $TMPDIR, shown as /tmp/x),
else the host's. A file tool's absolute path always names the slot's.
"""

from __future__ import annotations

import functools
import os
import re

PLACES = ("workspace", "tmp", "home")  # the slot's top-level directories (see slots.SKELETON)
SHARED = ("tmp", "home")  # places the host has too: a command's path names the slot's if it is there
# An absolute path starts where no word, path or expansion character precedes its "/".
_STARTS = r"(?<![\w.~/}\)\]$-])"
_ENDS = r"(?![\w.-])"


class SandboxView:
    """The mapping for the slot at `root` (a realpath); `cwd_top` is the top directory of a
    dataset's absolute cwd (e.g. "app" for /app), also made in the slot."""

    def __init__(self, root: str, cwd_top: str | None = None) -> None:
        self.root = root
        self._places = {*PLACES, *([cwd_top] if cwd_top else [])}
        own = sorted(self._places - set(SHARED), key=len, reverse=True)
        self._own = re.compile(_STARTS + "/(?:" + "|".join(map(re.escape, own)) + ")" + _ENDS)
        self._shared = re.compile(_STARTS + "/(?:" + "|".join(SHARED) + r")/[^/\s'\"`;|&<>()$]+")
        pool = os.path.dirname(root)
        self._run_dir = os.path.dirname(pool)  # a prefix of every path to hide
        hidden = sorted({root, pool, self._run_dir}, key=len, reverse=True)
        self._outbound = re.compile("(?:" + "|".join(map(re.escape, hidden)) + ")" + _ENDS + "/?")

    def shown(self, text: str) -> str:
        """`text` with the slot's host paths as the sandbox's (the slot itself is "/")."""
        return self._outbound.sub("/", text) if self._run_dir in text else text

    def on_host(self, command: str) -> str:
        """`command` with the sandbox's absolute paths (/workspace/x; /tmp/x where the slot
        has x) as the slot's."""
        command = self._own.sub(lambda found: self.root + found.group(0), command)
        return self._shared.sub(self._if_in_slot, command)

    def _if_in_slot(self, found: re.Match[str]) -> str:
        path = found.group(0)
        return self.root + path if os.path.lexists(self.root + path) else path

    def host_path(self, path: str, workdir: str) -> str:
        """The host path (not yet resolved) for a file tool's `path`: relative to `workdir`; `/`,
        the slot; an absolute one in a place of the sandbox (/workspace/x) inside the slot; any other
        absolute path as it is (the host's: the caller refuses it as outside the sandbox)."""
        if not path.startswith("/"):
            return os.path.join(workdir, path)
        normal = os.path.normpath(path)
        if normal == "/":
            return self.root  # the sandbox's root, as the model is shown it
        if normal == self.root or normal.startswith(self.root + "/"):
            return normal  # the slot's host path (what `workdir` holds)
        if normal.split("/")[1] in self._places:
            return self.root + normal
        return normal


@functools.lru_cache(maxsize=1024)
def view_of(root: str, cwd_top: str | None = None) -> SandboxView:
    """The view of the slot at `root`, made once: a pool reuses its slots, and compiling a
    view's patterns again for each prompt cost ~3 % of a worker's CPU (a view never changes)."""
    return SandboxView(root, cwd_top)
