"""The local backend's rate-limit hub: held by the parent, one pipe to each worker process.

A thread of the parent answers each worker's `Report` with the `LimitHub`'s `Grant`; a worker
awaits the answer on its event loop (`PipeLink`), without a thread. Exchanges are small and
rare (a few a second per worker), so one thread serves every worker.
"""

from __future__ import annotations

import asyncio
import threading
from multiprocessing.connection import Connection, wait

from agent.config.run_config import RunConfig
from agent.llm.shared_limit import Grant, LimitHub, Report, dated


def hub_of(config: RunConfig) -> LimitHub:
    """The one limit of a run: its in-flight limit, rpm, tpm and cost budget, whatever the
    process count."""
    return LimitHub(config.max_inflight, rpm=config.rpm, tpm=config.tpm, max_cost=config.max_cost)


class HubServer:
    """Serves `hub` to the workers at the other end of `conns` until `stop`; a replacement
    worker's pipe joins with `add`."""

    def __init__(self, hub: LimitHub, conns: list[Connection]) -> None:
        self.hub = hub
        self.conns = list(conns)
        self._joining: list[Connection] = []
        self._latest: dict[str, Connection] = {}  # member -> the pipe it last reported on
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="limit-hub", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def add(self, conn: Connection) -> None:
        with self._lock:
            self._joining.append(conn)

    def stop(self) -> list[tuple[float, float]]:
        """Stop serving; the limit's history (`LimitHub.limit_history`, on our clock)."""
        self._stop.set()
        self._thread.join(timeout=5)
        with self._lock:
            self.conns += self._joining
        for conn in self.conns:
            conn.close()
        return dated(self.hub.limit_history())

    def _serve(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                self.conns += self._joining
                self._joining = []
            if not self.conns:
                self._stop.wait(0.2)
                continue
            for ready in wait(self.conns, timeout=0.2):
                assert isinstance(ready, Connection)
                try:
                    report = ready.recv()
                    self._latest[report.member] = ready
                    ready.send(self.hub.exchange(report))
                except (EOFError, OSError):  # that worker exited
                    self._gone(ready)

    def _gone(self, conn: Connection) -> None:
        """A worker exited: the hub frees its slots now, not after LAPSE (until then the other
        workers could not use them), and its start permits do not pass to its replacement."""
        self.conns.remove(conn)
        conn.close()
        for member, latest in list(self._latest.items()):
            if latest is conn:
                del self._latest[member]
                self.hub.leave(member)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():  # the pipe stays readable until the answer is read
        future.set_result(None)


class PipeLink:
    """A worker's `LimitLink`: its end of the pipe to the parent's hub."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def exchange(self, report: Report) -> Grant:
        self.conn.send(report)
        loop = asyncio.get_running_loop()
        readable = loop.create_future()
        loop.add_reader(self.conn.fileno(), _settle, readable)
        try:
            await readable
        finally:
            loop.remove_reader(self.conn.fileno())
        try:
            grant: Grant = self.conn.recv()
        except EOFError as exc:
            raise ConnectionError("the parent's rate-limit hub closed its pipe") from exc
        return grant
