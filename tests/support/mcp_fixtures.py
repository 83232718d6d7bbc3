"""The test MCP servers as the tests start them: paths and argv of the stdio server, and the
streamable-HTTP server run as a subprocess (`running_mcp_http_server`, and the module-scoped
fixture `mcp_http_server`, registered for every test module in tests/conftest.py)."""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

import pytest

SUPPORT = Path(__file__).resolve().parent
STDIO_SERVER = SUPPORT / "mcp_stdio_server.py"
HTTP_SERVER = SUPPORT / "mcp_http_server.py"
STDIO_TOOLS = (
    "add",
    "echo",
    "note_write",
    "note_read",
    "env_value",
    "image",
    "resource",
    "fail",
    "crash",
    "hang",
    "sleep",
    "big",
)
HTTP_TOOLS = ("add", "echo", "image", "fail", "sleep")
START_TIMEOUT = 60.0  # a liveness bound on a loaded machine (importing the SDK takes a second)


def stdio_server_argv(*modes: str, python: str = "python3") -> list[str]:
    """The command line of the stdio test server (`modes`: `--crash-at-start`, `--slow-start=2`...);
    plain `python3` by default, as inside a sandbox, where the SDK is not installed."""
    return [python, str(STDIO_SERVER), *modes]


class McpHttpServer(NamedTuple):
    url: str  # http://127.0.0.1:PORT/mcp
    token: str  # the bearer token it requires: `Authorization: Bearer <token>`


def _read_line(proc: subprocess.Popen[bytes], timeout: float) -> str | None:
    """The first line `proc` prints, or None when it exits or stays silent for `timeout`."""
    assert proc.stdout is not None
    fd, data = proc.stdout.fileno(), b""
    deadline = time.monotonic() + timeout
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 4096)
        if not chunk:
            return None
        data += chunk
    return data.decode().strip()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then SIGKILL, to its whole process group: nothing it started outlives the test."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


@contextlib.contextmanager
def running_mcp_http_server(token: str | None = None) -> Iterator[McpHttpServer]:
    """The streamable-HTTP test server on 127.0.0.1 (its own process group), killed after."""
    token = token or secrets.token_hex(16)
    argv = [sys.executable, str(HTTP_SERVER), f"--token={token}"]
    with (
        tempfile.TemporaryFile() as errors,
        subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors, start_new_session=True
        ) as proc,
    ):
        try:
            url = _read_line(proc, START_TIMEOUT)
            if url is None:
                errors.seek(0)
                raise RuntimeError(
                    f"the MCP HTTP test server did not start: {errors.read().decode()[-2000:]}"
                )
            yield McpHttpServer(url, token)
        finally:
            _stop(proc)


@pytest.fixture(scope="module")
def mcp_http_server() -> Iterator[McpHttpServer]:
    """A started streamable-HTTP test server: `(url, token)`, stopped after the module."""
    with running_mcp_http_server() as server:
        yield server
