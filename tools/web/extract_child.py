"""The process a worker converts fetched pages in (`python -m tools.web.extract_child PARENT`):
one page per line of JSON on stdin, one result per line of JSON on stdout, until stdin ends.

Why a process: converting untrusted HTML (lxml, trafilatura) can take minutes of CPU on a
crafted page, and a thread cannot be stopped; this process can be killed (`tools.web.extractors`).
It dies with the worker that started it (PR_SET_PDEATHSIG), and ignores Ctrl-C, which reaches
the whole process group: the worker ends it.
"""

from __future__ import annotations

import base64
import ctypes
import json
import os
import signal
import sys
from collections.abc import Callable
from typing import Any

READY = b"ready\n"
_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    _die_with_parent(int(argv[0]) if argv else None)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from tools.web.extract import page_result  # lxml and trafilatura: once, before READY

    out = sys.stdout.buffer
    out.write(READY)
    out.flush()
    for line in sys.stdin.buffer:
        out.write(json.dumps(answer(line, page_result)).encode() + b"\n")
        out.flush()


def answer(line: bytes, page_result: Callable[[Any], dict[str, Any]]) -> dict[str, Any]:
    """The tool result for one request line."""
    from tools.web.fetch import Page

    try:
        request = json.loads(line)
        page = Page(
            url=str(request["url"]),
            content_type=str(request["content_type"]),
            charset=request["charset"] if isinstance(request["charset"], str) else None,
            body=base64.b64decode(request["body"]),
            truncated=bool(request["truncated"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        return {"error": f"bad extraction request ({type(exc).__name__}: {exc})"}
    try:
        return page_result(page)
    except Exception as exc:  # noqa: BLE001 - any failure on an untrusted page is that page's error
        return {"url": page.url, "error": f"the page could not be converted ({type(exc).__name__}: {exc})"}


def request_line(url: str, content_type: str, charset: str | None, body: bytes, truncated: bool) -> bytes:
    """The line `answer` reads (built by the worker)."""
    fields = {
        "url": url,
        "content_type": content_type,
        "charset": charset,
        "truncated": truncated,
        "body": base64.b64encode(body).decode("ascii"),
    }
    return json.dumps(fields).encode() + b"\n"


def _die_with_parent(parent: int | None) -> None:
    """SIGKILL this process when the worker dies, however it dies (a worker killed at its
    grace period must not leave a page being converted for minutes)."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if parent is not None and os.getppid() != parent:  # it died before prctl took effect
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
