"""`with` for objects that are started and stopped (servers, models): one definition of the
context-manager pair instead of one per class."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class StartStop:
    """Subclasses define `start` and `stop`; `with obj:` starts it and always stops it."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
