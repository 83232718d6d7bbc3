"""User code imported at a run's start (`--tools_module`, `--verifier`) may not end the process
with `os._exit`: it skips every handler, so `os._exit(0)` at import ended a run with exit 0 and
nothing run or written. During the import the call raises `ExitCalled` instead, which the
importer reports as the flag's error (exit 2); only on the importing thread, so another
thread's deliberate exit still happens."""

from __future__ import annotations

import contextlib
import os
import posix
import threading
from collections.abc import Iterator
from typing import NoReturn


class ExitCalled(BaseException):
    """`os._exit(code)` called by the code being imported (a BaseException, as SystemExit is)."""

    def __init__(self, code: int) -> None:
        super().__init__(f"os._exit({code}) called")
        self.code = code


@contextlib.contextmanager
def exit_refused() -> Iterator[None]:
    """Within the block, `os._exit` on this thread raises ExitCalled."""
    real = os._exit
    importing = threading.get_ident()

    def refuse(status: int) -> NoReturn:
        if threading.get_ident() != importing:
            real(status)
        raise ExitCalled(status)

    os._exit = posix._exit = refuse
    try:
        yield
    finally:
        os._exit = posix._exit = real
