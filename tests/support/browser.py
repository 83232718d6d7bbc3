"""Shared harness of the browser tools' tests (this module holds no tests): real pages served
on 127.0.0.1 by a small http.server, a conversation context the tools run in, and finding the
Chromium processes a test started (by their profile directory under the test's TMPDIR)."""

from __future__ import annotations

import html
import http.server
import json
import struct
import threading
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

from agent.protocols import JSON, SandboxSpec, ToolConfig
from agent.toolbox.context import ConversationContext, Resources
from tools.browser import TOOLSET


def png(width: int, height: int, rgb: tuple[int, int, int]) -> bytes:
    """A real PNG of one colour."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    row = b"\x00" + bytes(rgb) * width
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(row * height))
        + chunk(b"IEND", b"")
    )


INDEX = """<!doctype html><html><head><title>Index page</title></head><body>
<h1>Welcome to the index</h1>
<p>Plain text that is not interactive.</p>
<a href="/next">Next page</a>
<form action="/search" method="get">
  <input name="q" aria-label="Query"><button type="submit">Search</button>
</form>
<img src="/red.png" alt="A red square" width="20" height="20">
<script>
  console.log("hello from the index");
  setTimeout(() => { throw new Error("boom from the index"); }, 0);
</script>
</body></html>"""

NEXT = """<!doctype html><html><head><title>Next page</title></head><body>
<h1>The next page</h1>
<button onclick="document.getElementById('out').textContent = 'Clicked ' + (++window.n || (window.n = 1))">
Press me</button>
<p id="out">Not clicked yet</p>
</body></html>"""

LONG = (
    "<!doctype html><title>Long page</title><body>"
    + "".join(f"<p style='height:60px'>Paragraph number {i}</p>" for i in range(200))
    + "<a href='/next'>Link at the bottom</a></body>"
)


# A page that asks "Leave this page?" on every navigation away (no click needed)
STAY = """<!doctype html><title>Stay page</title><body><h1>Do not leave</h1><script>
window.addEventListener("beforeunload", (e) => { e.preventDefault(); e.returnValue = "stay"; });
</script></body>"""


def private_page(port: int) -> str:
    """A page whose subresource and WebSocket aim at refused addresses."""
    return f"""<!doctype html><title>Private page</title><body><h1>Private resources</h1>
<img src="http://169.254.169.254/latest/meta-data/iam.png" alt="metadata">
<script>try {{ new WebSocket("ws://127.0.0.2:{port}/socket"); }} catch (e) {{}}</script>
</body>"""


class _Pages(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        parts = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parts.query)
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        if parts.path == "/redirect":
            self._send(302, b"", "text/plain", {"Location": query["to"][0]})
        elif parts.path == "/refresh":  # the page itself moves on, by a meta refresh
            target = html.escape(query["to"][0], quote=True)
            self._page(f'<title>Moving on</title><meta http-equiv="refresh" content="0;url={target}">')
        elif parts.path == "/report.bin":
            self._send(200, b"\0" * 1000, "application/octet-stream", {"Content-Disposition": "attachment"})
        elif parts.path == "/sw.js":
            self._send(200, b"self.addEventListener('fetch', () => {});", "text/javascript")
        elif parts.path == "/red.png":
            self._send(200, png(20, 20, (220, 20, 20)), "image/png")
        elif parts.path == "/search":
            found = html.escape(query.get("q", [""])[0])
            self._page(f"<title>Search results</title><h1>Results for: {found}</h1>")
        else:
            port = self.server.server_address[1]
            pages = {"/": INDEX, "/next": NEXT, "/long": LONG, "/stay": STAY, "/private": private_page(port)}
            if parts.path in pages:
                self._page(pages[parts.path])
            else:
                self._send(404, b"not found", "text/plain")

    def do_POST(self) -> None:  # /echo: how many bytes of body arrived, and their checksum
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        answer = {"length": len(body), "crc": zlib.crc32(body)}
        self._send(200, json.dumps(answer).encode(), "application/json")

    def _page(self, text: str) -> None:
        self._send(200, text.encode("utf-8"), "text/html; charset=utf-8")

    def _send(self, status: int, body: bytes, kind: str, headers: Mapping[str, str] = {}) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def serve_pages() -> Iterator[tuple[str, list[str]]]:
    """The test pages on 127.0.0.1: (base URL, the paths requested so far)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    server.paths = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.paths  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def conversation(config: ToolConfig, shared: Resources, model: Any = None) -> ConversationContext:
    """A conversation's tool context without a sandbox (the browser tools need none)."""
    return ConversationContext(config, model, SandboxSpec(run_name="browser", prompt_key="p"), None, shared)


@asynccontextmanager
async def browsing(
    config: ToolConfig, shared: Resources | None = None, model: Any = None
) -> AsyncIterator[ConversationContext]:
    """A conversation's tool context on a worker's resources (its own when `shared` is None),
    closed at the end."""
    own = Resources() if shared is None else None
    tools = conversation(config, shared or own or Resources(), model)
    try:
        yield tools
    finally:
        await tools.aclose()
        if own is not None:
            await own.aclose()


async def call(context: ConversationContext, name: str, **args: Any) -> Any:
    """Call a browser tool's handler as dispatch does; its JSON result as a dict."""
    spec = next(s for s in TOOLSET.tools if s.name == name)
    assert spec.handler is not None
    result: JSON = await spec.handler(args, context)
    return json.loads(json.dumps(result))


def _live_processes() -> Iterator[tuple[int, int, bytes]]:
    """(pid, parent pid, command line) of every process that is not a zombie."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if fields[0] != "Z":
            yield int(entry.name), int(fields[1]), command


def chromium_pids(marker: str | Path) -> list[int]:
    """Live Chromium processes whose command line mentions `marker` (their profile lives under
    the TMPDIR a test gave the runner)."""
    found = []
    for pid, _parent, command in _live_processes():
        argv = command.split(b"\0")
        if b"chrom" in argv[0] and any(str(marker).encode() in a for a in argv):
            found.append(pid)
    return found


def main_chromium_pids(ancestor: int) -> list[int]:
    """Chromium's main (browser) processes below `ancestor`: a Chromium executable run without
    `--type=` (renderers, the GPU and network processes and the zygotes have one; the crash
    handler is chrome_crashpad_handler; a child may have rewritten its command line as one
    string). Told by the command line, not the process name: Debian's launcher scripts
    (`/bin/sh` running /usr/bin/chromium-headless-shell) bear the name and stay the browser's
    parent."""
    parents: dict[int, int] = {}
    mains: list[int] = []
    for pid, parent, command in _live_processes():
        parents[pid] = parent
        program = Path(command.split(b"\0")[0].split(b" ")[0].decode(errors="replace"))
        if program.name.startswith("chromium") and b"--type=" not in command:
            mains.append(pid)

    def below(pid: int) -> bool:
        while pid > 1:
            pid = parents.get(pid, 0)
            if pid == ancestor:
                return True
        return False

    return [pid for pid in mains if below(pid)]
