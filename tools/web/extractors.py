"""Fetched pages are converted to markdown in child processes (`tools.web.extract_child`), a few
per worker, each page under a time bound it cannot outlive.

Untrusted HTML can be crafted to take minutes of CPU in lxml and trafilatura (repeated nested
`<div><p>` blocks: ~100 s for 768 KB). In a thread that work could not be stopped: the worker
would wait for it past --prompt_timeout and past a SIGTERM. A child past EXTRACT_SECONDS, or
whose caller is cancelled, is killed at once (SIGKILL) and its page gets an error the model
reads; cancellation does not wait for the page. Children are reused while they behave (one
costs ~1 s to start: Python, lxml, trafilatura) and end with the worker.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

from tools.web.extract_child import READY, request_line
from tools.web.fetch import Page

EXTRACT_SECONDS = 20.0  # per page, from when its child has it; a usual page takes well under 1 s
CHILDREN = 2  # pages converted at once per worker: each is one core's work
_REPLY_LIMIT = 1 << 20  # a result is capped near 5,000 characters: far below
_PROJECT = str(Path(__file__).resolve().parents[2])  # where `tools` is importable from


class ExtractionFailed(Exception):
    """The page could not be converted; the message is its tool result's error."""


class _Child:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls) -> _Child:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "tools.web.extract_child",
            str(os.getpid()),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,  # its failures come back as results
            env=_child_env(),
            limit=_REPLY_LIMIT,
        )
        child = cls(process)
        try:
            ready = await child._line()
        except BaseException:
            await child.kill()
            raise
        if ready != READY:
            await child.kill()
            raise ExtractionFailed("the page converter did not start")
        return child

    async def convert(self, page: Page) -> dict[str, Any]:
        assert self.process.stdin is not None
        line = request_line(page.url, page.content_type, page.charset, page.body, page.truncated)
        try:
            self.process.stdin.write(line)
            await self.process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise ExtractionFailed(f"{page.url}: the page converter ended unexpectedly") from None
        reply = await self._line()
        try:
            result = json.loads(reply)
        except ValueError:
            result = None
        if not isinstance(result, dict):
            raise ExtractionFailed(f"{page.url}: the page converter ended unexpectedly")
        return result

    async def _line(self) -> bytes:
        assert self.process.stdout is not None
        try:
            return await self.process.stdout.readline()
        except ValueError:  # a line over _REPLY_LIMIT: not a result
            return b""

    async def kill(self) -> None:
        """SIGKILL it; it is reaped here unless this task is cancelled again meanwhile."""
        if self.process.returncode is None:
            with suppress(ProcessLookupError):
                self.process.kill()
        await asyncio.shield(self.process.wait())


class Extractors:
    """The worker's page converters: at most CHILDREN at work, idle ones kept for the next page."""

    def __init__(self) -> None:
        self._idle: list[_Child] = []
        self._slots = asyncio.Semaphore(CHILDREN)

    async def convert(self, page: Page) -> dict[str, Any]:
        """The tool result of `page` ({url, title, content, chars[, note]} or {url, error})."""
        async with self._slots:
            child = self._idle.pop() if self._idle else await _Child.start()
            try:
                result = await asyncio.wait_for(child.convert(page), EXTRACT_SECONDS)
            except TimeoutError:
                await child.kill()
                return {
                    "url": page.url,
                    "error": f"converting the page took longer than its {EXTRACT_SECONDS:g} s limit "
                    "(too large or too complex) and was stopped; the browser tool may still read it",
                }
            except BaseException:  # cancelled, or the child failed: it may be mid-page
                await child.kill()
                raise
            self._idle.append(child)
            return result

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for child in idle:
            await child.kill()


@asynccontextmanager
async def open_extractors() -> AsyncIterator[Extractors]:
    extractors = Extractors()
    try:
        yield extractors
    finally:
        await extractors.aclose()


def _child_env() -> dict[str, str]:
    """The child's environment: enough to import the project, none of the worker's secrets
    (the child parses hostile input)."""
    path = os.pathsep.join(p for p in (_PROJECT, os.environ.get("PYTHONPATH", "")) if p)
    keep = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "HOME")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, "PYTHONPATH": path}
