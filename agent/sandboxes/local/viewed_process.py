"""A local sandbox's long-running process as the model's side sees it (`SandboxView`): what it
prints, and its stderr, with the slot's host paths as the sandbox's; what it is sent with the
sandbox's paths as the slot's. A stdio MCP server run by `--sandbox=local` otherwise handed the
model its host working directory, HOME and TMPDIR, and could not open the `/workspace/x` the
model named. It rewrites whole lines (an MCP server speaks one JSON message a line, so a path
never spans two reads); a line longer than `MAX_HELD` passes as it came. What is sent is
rewritten in slices of lines, the loop run between them: 8 MB rewritten at once held the loop
for 0.3–1.5 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from agent.protocols import SandboxProcess
from agent.sandboxes.local.view import SandboxView

MAX_HELD = 1 << 20  # bytes of an unfinished line held back for its end
SLICE = 64 << 10  # bytes of whole lines sent rewritten before the loop gets a turn


def _rewritten(data: bytes, rewrite: Callable[[str], str]) -> bytes:
    # surrogateescape: bytes that are not UTF-8 come back as they were
    return rewrite(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")


def _slice_end(data: bytes, start: int) -> int:
    """The end of the whole lines from `start` that fill at most SLICE bytes; of one line when
    even the first is longer (or of `data`, when no line end follows)."""
    end = data.rfind(b"\n", start, start + SLICE) + 1
    if end > start:
        return end
    found = data.find(b"\n", start)
    return len(data) if found == -1 else found + 1


class ViewedProcess:
    """`process` seen through `view` (an `agent.protocols.SandboxProcess`)."""

    def __init__(self, process: SandboxProcess, view: SandboxView) -> None:
        self._process, self._view = process, view
        self._held = b""  # the start of a line not yet ended

    async def send(self, data: bytes) -> None:
        start = 0
        while start < len(data):
            end = _slice_end(data, start)
            piece = data[start:end]  # a line longer than MAX_HELD passes as it came
            await self._process.send(
                piece if end - start > MAX_HELD else _rewritten(piece, self._view.on_host)
            )
            start = end
            await asyncio.sleep(0)  # the loop's turn between slices

    async def receive(self) -> bytes:
        while True:
            chunk = await self._process.receive()
            if not chunk:  # the end: what is held goes out first
                held, self._held = self._held, b""
                return _rewritten(held, self._view.shown)
            data = self._held + chunk
            end = data.rfind(b"\n") + 1
            if end == 0 and len(data) <= MAX_HELD:
                self._held = data
                continue
            end = end or len(data)
            self._held = data[end:]
            return _rewritten(data[:end], self._view.shown)

    @property
    def returncode(self) -> int | None:
        return self._process.returncode

    def stderr_tail(self) -> str:
        return self._view.shown(self._process.stderr_tail())
