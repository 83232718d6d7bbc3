"""The worker's browser: one Playwright driver and one headless Chromium per worker process,
shared by its conversations (each gets its own browser context), and whether this machine can
run it at all.

Chromium is the system's (Debian's `chromium-headless-shell` or `chromium`, or
`--browser_executable`): Playwright's own browser download is not used. The runner runs as
root, where Chromium's sandbox cannot start, so it is off (`--no-sandbox`); what isolates a
conversation is its own browser context (fresh profile: cookies, storage and cache of its own),
its network policy proxy, and no downloads.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING

from agent.protocols import ToolConfig

if TYPE_CHECKING:
    from playwright.async_api import Browser, Playwright

# Chromium's headless shell first (Debian's `chromium-headless-shell`, what Playwright itself runs
# headless): no browser UI underneath, one process per browser context where the full browser
# starts about four, ~1/4 of the CPU per conversation. The full browser works the same.
CHROMIUM_NAMES = ("chromium-headless-shell", "chromium", "chromium-browser")
LAUNCH_ARGS = (
    "--headless",
    "--no-sandbox",  # we run as root: Chromium's sandbox needs an unprivileged user
    "--disable-gpu",
    "--disable-dev-shm-usage",  # containers' /dev/shm is often 64 MB: renderers crash in it
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
    "--disable-quic",  # QUIC is UDP: it would not go through the policy proxy
    # nor would WebRTC's UDP (STUN, TURN, peers). The full browser reads the first switch and
    # ignores the second; the headless shell reads only the second (without it 48 STUN packets
    # reached a test's canary, as 4 did from the full browser without the first).
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
)
LAUNCH_TIMEOUT_MS = 60_000
ACTIONS_AT_ONCE = 4  # per worker: browser actions (and context openings) running together
MAX_TMPDIR_BYTES = 60  # + "/org.chromium.Chromium.XXXXXX/SingletonSocket" stays within 107
VERSION_TIMEOUT = 20.0  # seconds `--browser_executable --version` may take (~0.1 s)


def chromium_path(config: ToolConfig) -> str | None:
    """The Chromium executable these settings use, None when there is none."""
    if config.browser_executable:
        path = config.browser_executable
        return path if os.path.isfile(path) and os.access(path, os.X_OK) else shutil.which(path)
    return next((p for p in map(shutil.which, CHROMIUM_NAMES) if p), None)


def unavailable(config: ToolConfig) -> str | None:
    """Why the browser tools cannot run with these settings here (None: they can)."""
    playwright = 'Playwright: pip install -e ".[browser]"'
    chromium = "Chromium: apt-get install chromium-headless-shell (or chromium), or --browser_executable=PATH"
    has_playwright = importlib.util.find_spec("playwright") is not None
    path = chromium_path(config)
    if path is None:
        if config.browser_executable:
            return f"--browser_executable={config.browser_executable}: no executable file there"
        return f"the browser tools need {chromium}" + ("" if has_playwright else f"; and {playwright}")
    if config.browser_executable and (why := _not_a_browser(path)) is not None:
        return f"--browser_executable={config.browser_executable}: {why}"
    return None if has_playwright else f"the browser tools need {playwright}"


@functools.cache
def _not_a_browser(path: str) -> str | None:
    """Why the executable a user named is no Chromium, asked once per process: `--version`
    must succeed and print something (else every browser call of the run would fail to launch
    it, and the run would go on making error trajectories). The packages found on PATH are
    not asked."""
    try:
        answer = subprocess.run(
            [path, "--version"], stdin=subprocess.DEVNULL, capture_output=True, timeout=VERSION_TIMEOUT
        )
    except subprocess.TimeoutExpired:
        return f"{path} --version did not answer within {VERSION_TIMEOUT:g} s: is it Chromium?"
    except OSError as exc:
        return f"{path} cannot be run: {exc.strerror or exc}"
    said = answer.stdout.decode(errors="replace").strip().splitlines()
    if answer.returncode != 0 or not said:
        first = repr(said[0][:80]) if said else "nothing"
        return f"{path} --version exited {answer.returncode}, printing {first}: is it Chromium?"
    return None


class BrowserHost:
    """The worker's Chromium; relaunched on the next use if it crashed or was killed."""

    def __init__(self, playwright: Playwright, executable: str, tmpdir: str) -> None:
        self._playwright = playwright
        self._executable = executable
        self._env: dict[str, str | float | bool] = {**os.environ, "TMPDIR": tmpdir}
        self._browser: Browser | None = None
        self._lock = asyncio.Lock()
        self.launches = 0
        # Page work at once in this worker: more only thrash the cores (every renderer wants
        # CPU), so a navigation waits its turn rather than running out its timeout.
        self.busy = asyncio.Semaphore(ACTIONS_AT_ONCE)

    async def browser(self) -> Browser:
        async with self._lock:
            if self._browser is None or not self._browser.is_connected():
                self._browser = await self._playwright.chromium.launch(
                    executable_path=self._executable,
                    args=list(LAUNCH_ARGS),
                    headless=True,
                    timeout=LAUNCH_TIMEOUT_MS,
                    env=self._env,
                )
                self.launches += 1
            return self._browser

    async def aclose(self) -> None:
        async with self._lock:
            if self._browser is not None:
                await self._browser.close()
                self._browser = None


@asynccontextmanager
async def open_host(config: ToolConfig) -> AsyncIterator[BrowserHost]:
    """The Playwright driver for this worker; Chromium is launched on first use."""
    from playwright.async_api import async_playwright  # the browser extra: imported when used

    executable = chromium_path(config)
    if executable is None:
        raise RuntimeError(unavailable(config))
    with _short_tmpdir() as tmpdir:
        playwright = await async_playwright().start()
        host = BrowserHost(playwright, executable, tmpdir)
        try:
            yield host
        finally:
            try:
                await host.aclose()
            finally:
                await playwright.stop()


@contextmanager
def _short_tmpdir() -> Iterator[str]:
    """Chromium's TMPDIR: the usual one, or a private one under /tmp when that is too long.
    Chromium puts its singleton socket at $TMPDIR/org.chromium.Chromium.XXXXXX/SingletonSocket
    and aborts at start when the path passes the 107 bytes a Unix socket's path may have."""
    usual = tempfile.gettempdir()
    if len(usual.encode()) <= MAX_TMPDIR_BYTES:
        yield usual
        return
    short = tempfile.mkdtemp(prefix="chromium-", dir="/tmp")
    try:
        yield short
    finally:
        shutil.rmtree(short, ignore_errors=True)
