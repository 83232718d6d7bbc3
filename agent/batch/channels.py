"""A local worker's own pipes to the parent: jobs in, events (and log records) out.

Each worker has its own pair, never a queue shared with the other workers: a worker killed
while it held a shared queue's lock (a SIGKILL lands mid-`get` or mid-`put` often) would
block every other worker for good, and a message it left half-written would garble theirs.
With one pipe each, a death only closes that worker's pipes: the parent reads EOF, replaces
it, and the others never notice. The parent closes its copies of the worker's ends, so EOF
comes as soon as the worker is gone, also in the middle of a message.
"""

from __future__ import annotations

import asyncio
import pickle
import queue
import sys
import threading
import traceback
from multiprocessing.connection import Connection
from typing import Any

from agent.batch.jobs import Job

_END = object()  # the sink's sender ends after sending everything put before it
FLUSH_TIMEOUT = 30.0  # seconds a worker waits at exit for its last events to reach the parent


class PipeJobs:
    """The local backend's `JobSource`: this worker's pipe from the parent. The parent sends
    a job only while the worker has a free conversation slot, and None when the run has no
    more for it; EOF (the parent is gone) is None too."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    async def next(self, stopping: asyncio.Event) -> Job | None:
        try:
            if self.conn.poll(0):  # usually one is waiting: take it without a thread
                job: Job | None = self.conn.recv()
                return job
            while not stopping.is_set():
                ready, job = await asyncio.to_thread(self._take, 0.2)
                if ready:
                    return job
        except (EOFError, OSError):
            return None
        return None

    def _take(self, timeout: float) -> tuple[bool, Job | None]:
        if not self.conn.poll(timeout):
            return False, None
        job: Job | None = self.conn.recv()
        return True, job


class PipeSink:
    """The local backend's `EventSink`: a thread sends what is put, in order, so the event loop
    never blocks on a full pipe. `put_nowait` makes it a `logging.handlers.QueueHandler` queue."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._items: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._send, name="event-sender", daemon=True)
        self._thread.start()

    def put(self, item: Any) -> None:
        self._items.put(item)

    put_nowait = put

    def close(self) -> None:
        """Send what was put, then close the pipe (the parent reads EOF after our goodbye)."""
        self._items.put(_END)
        self._thread.join(timeout=FLUSH_TIMEOUT)
        self.conn.close()

    def _send(self) -> None:
        while (item := self._items.get()) is not _END:
            try:
                self.conn.send(item)
            except (BrokenPipeError, EOFError):  # the parent is gone: nobody to tell
                return
            except (pickle.PicklingError, TypeError, AttributeError):  # one bad item, not the channel
                traceback.print_exc(file=sys.stderr)
