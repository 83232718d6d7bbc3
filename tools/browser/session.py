"""A conversation's browser: its own browser context (fresh profile, no downloads, service
workers blocked, every request through its policy proxy), the page it is on, the console
messages and page errors collected since the page opened, and waiting for what an action set
off (a click that navigates) before the next snapshot.

Opened on the conversation's first browser call (`ToolContext.resource("browser", …)`) and
closed with the conversation; the Chromium process is the worker's (`host.BrowserHost`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from agent.common.network_policy import NetworkPolicy
from agent.protocols import ToolContext
from tools.browser.host import BrowserHost, open_host
from tools.browser.proxy import REFUSED_HEADER, PolicyProxy, open_proxy, origin_of

if TYPE_CHECKING:
    from playwright.async_api import BrowserContext, ConsoleMessage, Dialog, Page, Request, Response

log = logging.getLogger(__name__)
VIEWPORT = {"width": 1280, "height": 800}
NAVIGATION_TIMEOUT_MS = 30_000
ACTION_TIMEOUT_MS = 10_000
CLOSE_DEADLINE = 15.0  # seconds a conversation's browser context may take to close
LOAD_GRACE_MS = 2_000  # after DOMContentLoaded, how long to wait for images and styles
ACTION_START = 0.1  # seconds an action gets to start a navigation before we look
MAX_CONSOLE = 300  # messages kept (the newest)
MAX_MESSAGE_CHARS = 2_000
MAX_ORIGINS = 500  # the page requests' origins kept, to tell their refusals from Chromium's own


class ConsoleLog:
    """Console messages, dialogs and uncaught errors of the conversation's pages, oldest first."""

    def __init__(self) -> None:
        self.messages: deque[dict[str, str]] = deque(maxlen=MAX_CONSOLE)
        self.errors: deque[dict[str, str]] = deque(maxlen=MAX_CONSOLE)

    def watch(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", self._error)
        page.on("dialog", self._dialog)

    def clear(self) -> None:
        self.messages.clear()
        self.errors.clear()

    def _console(self, message: ConsoleMessage) -> None:
        self.messages.append({"type": message.type, "text": message.text[:MAX_MESSAGE_CHARS]})

    def _error(self, error: Exception) -> None:
        self.errors.append({"message": str(error)[:MAX_MESSAGE_CHARS]})

    async def _dialog(self, dialog: Dialog) -> None:
        from playwright.async_api import Error as PlaywrightError

        # Nobody can answer a dialog: note it and dismiss it so the page goes on. "Leave this
        # page?" is accepted instead: dismissed, it kept the model on a hostile page for good.
        self.messages.append({"type": f"dialog:{dialog.type}", "text": dialog.message[:MAX_MESSAGE_CHARS]})
        with contextlib.suppress(PlaywrightError):  # the page may be gone already: nothing to answer
            await (dialog.accept() if dialog.type == "beforeunload" else dialog.dismiss())


class BrowserSession:
    """What the browser tools act on: the current page (a popup becomes the current page)."""

    def __init__(self, host: BrowserHost, context: BrowserContext, page: Page, proxy: PolicyProxy) -> None:
        self.host, self.context, self.page, self.proxy = host, context, page, proxy
        self.console = ConsoleLog()
        self._pending: Request | None = None  # a main-frame navigation not yet committed
        self._asked: deque[str] = deque(maxlen=MAX_ORIGINS)  # origins the pages requested, newest last
        self._committed = asyncio.Event()
        # Whether the current page is the proxy's refusal, however it was reached: a goto, a
        # redirect, a meta refresh, a script, a form or a popup
        self.refused = False
        self._watch(page)
        context.on("page", self._adopt)

    def _watch(self, page: Page) -> None:
        page.set_default_timeout(ACTION_TIMEOUT_MS)
        page.set_default_navigation_timeout(NAVIGATION_TIMEOUT_MS)
        self.console.watch(page)
        page.on("request", self._request)
        page.on("websocket", lambda socket: self._asked.append(origin_of(socket.url)))
        page.on("requestfailed", self._request_ended)
        page.on("requestfinished", self._request_ended)
        page.on("response", lambda response: self._response(page, response))
        page.on("framenavigated", lambda frame: self._committed.set() if frame == page.main_frame else None)

    def _adopt(self, page: Page) -> None:
        self._watch(page)
        self.page = page

    def _request(self, request: Request) -> None:
        self._asked.append(origin_of(request.url))
        if request.is_navigation_request() and request.frame == self.page.main_frame:
            self._pending = request
            self._committed.clear()

    def _response(self, page: Page, response: Response) -> None:
        request = response.request
        if page is self.page and request.is_navigation_request() and request.frame == page.main_frame:
            self.refused = bool(response.headers.get(REFUSED_HEADER.lower()))

    def _request_ended(self, request: Request) -> None:
        if request is self._pending:  # committed (it finished) or failed / became a download
            self._pending = None
            self._committed.set()

    def refusals_since(self, count: int) -> list[str]:
        """Why the requests of the pages were refused, after the proxy's first `count` refusals
        (read `proxy.refused_total` before): Chromium's own refused requests are left out."""
        new = self.proxy.refused_total - count
        recent = list(self.proxy.refusals)[-new:] if new > 0 else []
        asked = set(self._asked)
        return [why for origin, why in recent if origin in asked or not origin]

    async def settle(self) -> None:
        """Wait for what the last action set off: a navigation it started, then the page's
        DOMContentLoaded and (briefly) its load event."""
        await asyncio.sleep(ACTION_START)
        if self._pending is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._committed.wait(), NAVIGATION_TIMEOUT_MS / 1000)
        await self.loaded()

    async def loaded(self) -> None:
        from playwright.async_api import Error as PlaywrightError

        with contextlib.suppress(PlaywrightError):  # a timeout or a page closing: snapshot what there is
            await self.page.wait_for_load_state("domcontentloaded", timeout=NAVIGATION_TIMEOUT_MS)
            await self.page.wait_for_load_state("load", timeout=LOAD_GRACE_MS)


def context_options(proxy: PolicyProxy) -> dict[str, Any]:
    return {
        "proxy": {"server": proxy.url},
        "viewport": VIEWPORT,
        "service_workers": "block",  # a worker serving the page would outlive our checks
        "accept_downloads": False,
        "java_script_enabled": True,
    }


@asynccontextmanager
async def open_session(tools: ToolContext) -> AsyncIterator[BrowserSession]:
    """The conversation's browser context and page, on the worker's Chromium."""
    host = await host_of(tools)
    policy = NetworkPolicy.from_allow_list(tools.config.allow_hosts)
    async with open_proxy(policy) as proxy:
        browser = await host.browser()
        context = await browser.new_context(**context_options(proxy))
        try:
            yield BrowserSession(host, context, await context.new_page(), proxy)
        finally:
            await _close(context)


async def _close(context: BrowserContext) -> None:
    from playwright.async_api import Error as PlaywrightError

    try:
        async with asyncio.timeout(CLOSE_DEADLINE):
            await context.close()
    except PlaywrightError as exc:  # Chromium died meanwhile: the context went with it
        log.info("browser context already gone: %s", str(exc).splitlines()[0])
    except TimeoutError:  # a renderer stuck in a loop: the worker's Chromium ends with the worker
        log.warning("a browser context did not close within %g s", CLOSE_DEADLINE)


async def host_of(tools: ToolContext) -> BrowserHost:
    """The worker's browser host (Playwright's driver started on first use)."""
    return await tools.shared("browser", lambda: open_host(tools.config))


async def session_of(tools: ToolContext) -> BrowserSession:
    """The conversation's browser session, opened on its first browser call."""
    return await tools.resource("browser", lambda: open_session(tools))
