"""A bounded buffer for a command's output: keeps the head and the tail, drops the middle.

A runaway command (`yes`, `cat /dev/urandom`) must not exhaust the runner's memory, while the
terminal tool still needs the beginning and the end of long outputs.
"""

from __future__ import annotations

DEFAULT_LIMIT = 8 * 1024 * 1024  # bytes kept per command: half head, half tail


class OutputBuffer:
    def __init__(self, limit: int = DEFAULT_LIMIT) -> None:
        self._half = max(1, limit // 2)
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0

    def append(self, data: bytes) -> None:
        room = self._half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        self._tail += data
        excess = len(self._tail) - self._half
        if excess > 0:
            del self._tail[:excess]
            self._dropped += excess

    def getvalue(self) -> bytes:
        if not self._dropped:
            return bytes(self._head + self._tail)
        marker = f"\n[... {self._dropped} bytes of output omitted ...]\n".encode()
        return bytes(self._head) + marker + bytes(self._tail)

    def text(self) -> str:
        return self.getvalue().decode("utf-8", errors="replace")
