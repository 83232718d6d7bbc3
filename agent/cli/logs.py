"""Logging for both command lines: one handler on the root logger, so each record is one line.

On a terminal a RichHandler prints above the live progress bar; it gets a `%(message)s`
formatter of its own, because `logging.basicConfig` gives every handler without one its
`LEVEL:name:message` format, and a RichHandler adds its own level column: each line read
`WARNING  WARNING:agent.sandboxes:…`. Elsewhere (a file, a pipe, CI) lines are plain and whole
(`LEVEL message`), since a RichHandler wraps each record at the console width and shreds
`[B<n>:P<i>]` log lines.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable

from rich.console import Console
from rich.logging import RichHandler

from agent.common.redaction import RedactingFilter

PLAIN = "%(levelname)s %(message)s"


def log_handler(console: Console | None) -> logging.Handler:
    """The one handler: rich on a terminal `console`, plain lines otherwise (or without one)."""
    handler: logging.Handler
    if console is not None and console.is_terminal:
        handler = RichHandler(console=console, show_path=False)
        handler.setFormatter(logging.Formatter("%(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(PLAIN))
    handler.addFilter(RedactingFilter())  # workers' records too: they are handled here
    return handler


def configure_logging(console: Console | None = None, *, informative: Iterable[str] = ()) -> None:
    """Warnings and errors from every logger; INFO too from the `informative` ones (what an
    operator is told once per run, such as which sandbox backend was chosen)."""
    root = logging.getLogger()
    root.handlers[:] = [log_handler(console)]
    root.setLevel(logging.WARNING)
    for name in informative:
        logging.getLogger(name).setLevel(logging.INFO)
