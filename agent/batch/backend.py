"""What every run backend shares (`agent.protocols.run_backend`): the tally of what is in
flight, the one handling of each event a worker sends (`EventRoute`), and the one driver
(`drive`) that opens, serves, cancels on Ctrl-C and shuts a backend down.

A backend (worker processes here: `agent.batch.scheduler`; actors on a Ray cluster:
`agent.cluster.scheduler`) only carries jobs out and events back; which backend runs is chosen
by name in `agent.backends`, never here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from agent.batch.events import (
    Cancelled,
    Discarded,
    Failed,
    Finished,
    Started,
    WorkerEvent,
    WorkerExit,
    WorkerReady,
)
from agent.batch.jobs import Job
from agent.batch.losses import LossBook
from agent.config.run_config import RunConfig
from agent.protocols.run_backend import RunBackend, RunBackendFactory


@dataclass
class Tally:
    queued: dict[str, Job] = field(default_factory=dict)  # key -> job fed, until answered (Ray)
    running: dict[str, int] = field(default_factory=dict)  # key -> worker running it, until answered
    dead_workers: set[int] = field(default_factory=set)  # workers that died without a goodbye
    interrupted: bool = False
    stopped_by: str | None = None  # why scheduling ended early: "max_cost", "crash_loop", "worker_lost",
    # "dataset_changed"
    losses: LossBook | None = None  # workers lost and replaced
    # The run's in-flight limit at each change, on this process's monotonic clock (the hub's,
    # read as scheduling ends): not the workers' own, whose clocks start when each does.
    limit_history: list[tuple[float, float]] = field(default_factory=list)


Backend = RunBackend[Job, Tally]
BackendFactory = RunBackendFactory[RunConfig, WorkerEvent, Backend]


class Holder(Protocol):
    """A worker as its backend's scheduler sees it: the jobs it holds."""

    @property
    def id(self) -> int: ...

    since: float | None  # a replacement not yet started on a job: when its predecessor died

    def said_ready(self) -> None: ...  # `WorkerReady`

    def said_goodbye(self) -> None: ...  # `WorkerExit`

    def took(self, key: str) -> None: ...  # `Started`

    def release(self, key: str) -> Job | None: ...  # answered or cancelled: no longer held


class EventRoute:
    """What happens to each event a worker sends, for every backend: log records are logged
    here, bookkeeping (ready, goodbye, started, answered) updates the holder and the tally, and
    the answers and notices the run needs go on to `on_event`. A job cancelled while the run
    is not stopping (its worker alone was stopped) runs again (`requeue`)."""

    def __init__(
        self,
        tally: Tally,
        book: LossBook,
        on_event: Callable[[WorkerEvent], None],
        requeue: Callable[[Job], None],
    ) -> None:
        self.tally, self.book, self.on_event, self.requeue = tally, book, on_event, requeue
        self.stopping = False  # the run is being stopped: a cancelled job is not run again

    def handle(self, holder: Holder, item: WorkerEvent | logging.LogRecord) -> None:
        match item:
            case logging.LogRecord():
                logging.getLogger(item.name).handle(item)
                return
            case WorkerExit():
                holder.said_goodbye()
                return
            case WorkerReady():
                holder.said_ready()
                return
            case Started(key=key):
                self._started(holder, key)
                return
            case Finished() | Discarded() | Failed():
                self.book.progress()
                self._release(holder, item.key)
            case Cancelled(key=key):
                job = self._release(holder, key)
                if job is not None and not self.stopping:
                    self.requeue(job)  # it was SIGTERMed alone: the run goes on, its job too
        self.on_event(item)

    def cancel_running(self, holder: Holder) -> None:
        """A worker killed past the stop's grace never says what it gave up: what it was
        running was in flight when the run stopped (it counted as not started)."""
        for key in [key for key, worker in self.tally.running.items() if worker == holder.id]:
            self.handle(holder, Cancelled(key))

    def _started(self, holder: Holder, key: str) -> None:
        holder.took(key)
        self.tally.running[key] = holder.id
        if holder.since is not None:  # a replacement's first job
            self.book.replace_seconds.append(time.monotonic() - holder.since)
            holder.since = None

    def _release(self, holder: Holder, key: str) -> Job | None:
        self.tally.queued.pop(key, None)
        self.tally.running.pop(key, None)
        return holder.release(key)


def drive(backend: Backend, jobs: Iterable[Job]) -> Tally:
    """Run `jobs` on `backend`: Ctrl-C (or SIGTERM) cancels what runs, keeping its answers;
    the workers and the hub go in every case."""
    backend.open()
    try:
        backend.serve(jobs)
    except KeyboardInterrupt:
        backend.tally.interrupted = True
        backend.cancel()
    finally:
        backend.shutdown()
    return backend.tally
