"""Following a command a sandbox started: its output until EOF and its exit, either blocking
a thread (`pump`) or on the event loop (`watch`), both waiting on a pidfd for the exit."""

from __future__ import annotations

import asyncio
import os
import selectors
import subprocess
import time
from contextlib import suppress
from functools import cache

from agent.sandboxes.host.output_buffer import OutputBuffer

DRAIN_GRACE = 0.5  # seconds to keep reading after the command exits (background holders)
POLL_INTERVAL = 0.05  # without pidfds: how often the exit is polled


def pump(proc: subprocess.Popen[bytes], output: OutputBuffer, deadline: float) -> bool:
    """Read proc's output until EOF and its exit, or until DRAIN_GRACE after its exit when a
    background child still holds the pipe (True); False at the deadline if it still runs.
    The exit is watched through a pidfd, so a quick command costs two or three wake-ups."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    exit_fd = _pidfd(proc.pid)
    eof, exited_at = False, None
    with selectors.DefaultSelector() as selector:
        selector.register(fd, selectors.EVENT_READ)
        if exit_fd is not None:
            selector.register(exit_fd, selectors.EVENT_READ)
        try:
            while True:
                now = time.monotonic()
                if exited_at is None and exit_fd is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and (eof or now - exited_at >= DRAIN_GRACE):
                    return True
                if now >= deadline:
                    return exited_at is not None
                wait = deadline - now if exited_at is None else min(deadline, exited_at + DRAIN_GRACE) - now
                for key, _ in selector.select(wait if exit_fd is not None else min(wait, POLL_INTERVAL)):
                    if key.fd == exit_fd:
                        exited_at = time.monotonic()
                        selector.unregister(exit_fd)
                    elif chunk := os.read(fd, 65536):
                        output.append(chunk)
                    else:
                        eof = True
                        selector.unregister(fd)
        finally:
            if exit_fd is not None:
                os.close(exit_fd)


async def watch(proc: subprocess.Popen[bytes], output: OutputBuffer, timeout: float) -> bool:
    """`pump` on the event loop: True after the exit and EOF (or DRAIN_GRACE after the exit,
    within the timeout, while a background child holds the pipe); False when it still runs
    after `timeout` s."""
    assert proc.stdout is not None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    fd, exit_fd = proc.stdout.fileno(), os.pidfd_open(proc.pid)
    eof, exited = loop.create_future(), loop.create_future()
    try:
        os.set_blocking(fd, False)
        loop.add_reader(fd, on_output, loop, fd, output, eof)
        loop.add_reader(exit_fd, _on_exit, loop, exit_fd, exited)
        try:
            async with asyncio.timeout_at(deadline):
                await exited
        except TimeoutError:
            return False
        if not eof.done():
            await asyncio.wait([eof], timeout=max(0.0, min(DRAIN_GRACE, deadline - loop.time())))
        return True
    finally:
        loop.remove_reader(fd)
        loop.remove_reader(exit_fd)
        os.close(exit_fd)


def on_output(
    loop: asyncio.AbstractEventLoop, fd: int, output: OutputBuffer, eof: asyncio.Future[None] | None = None
) -> None:
    """A reader callback, one read per wake-up (`yes` must not hold the loop); at EOF the reader
    goes and `eof`, if given, is set."""
    try:
        chunk = os.read(fd, 65536)
    except BlockingIOError:
        return
    except OSError:  # EIO and the like: nothing more will come
        chunk = b""
    if chunk:
        output.append(chunk)
        return
    loop.remove_reader(fd)
    if eof is not None and not eof.done():
        eof.set_result(None)


def _on_exit(loop: asyncio.AbstractEventLoop, exit_fd: int, exited: asyncio.Future[None]) -> None:
    loop.remove_reader(exit_fd)  # a pidfd stays readable once its process has exited
    if not exited.done():  # a timeout or a cancellation may have got there first
        exited.set_result(None)


def read_ready(fd: int, output: OutputBuffer, limit: int = 4 << 20) -> None:
    """Append what a non-blocking pipe holds now, at most `limit` bytes: a stray that left the
    command's group may still be writing to it."""
    with suppress(OSError):  # BlockingIOError: drained; EIO and the like: nothing more
        while limit > 0 and (chunk := os.read(fd, 65536)):
            output.append(chunk)
            limit -= len(chunk)


@cache
def pidfds_work() -> bool:
    """Whether this kernel gives pidfds (Linux 5.3+), which `arun` waits on."""
    fd = _pidfd(os.getpid())
    if fd is None:
        return False
    os.close(fd)
    return True


def _pidfd(pid: int) -> int | None:
    """A descriptor that becomes readable when `pid` exits (Linux 5.3+), else None."""
    try:
        return os.pidfd_open(pid)
    except (AttributeError, OSError):
        return None


def wait_until(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait for proc to exit until the deadline; False when it is still running then."""
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return False
    return True
