"""Scheduling prompts (not batches) onto worker processes, and the parent's single-writer loop.

Jobs flow through a bounded queue, so the dataset is streamed, never held; each worker pulls
a job whenever one of its conversation slots frees, so a slow prompt never idles capacity.
Results come back on one event queue; the parent appends them to the run directory, syncs
in groups and rewrites the checkpoint. A worker says which job it starts (`Started`): a
prompt running on a worker that died without answering is recorded as one `worker_lost`
failure, retried on resume; a prompt only waiting in the queue is not a failure, just not
started. `stop_feeding` (the cost budget) ends scheduling: queued jobs are taken back and
in-flight ones finish (past --max_cost the hub starts no model call: they fail as `budget`).
A stopped worker is continued (`agent.batch.stopped`). The run's one rate limit (in-flight,
rpm, tpm, Retry-After pauses, --max_cost) is held here and served to the workers over pipes
(`agent.batch.limit_pipes`), not split among them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import queue
import signal
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.batch import worker_entry
from agent.batch.events import Cancelled, Discarded, Failed, Finished, Started, WorkerEvent, WorkerExit
from agent.batch.jobs import Job
from agent.batch.limit_pipes import HubServer, hub_of
from agent.batch.stopped import StoppedWatch
from agent.config.run_config import RunConfig

log = logging.getLogger("agent.batch.scheduler")
SYNC_EVERY = 1.0  # seconds between group commits (fsync + checkpoint)
STOP_GRACE = 30.0  # seconds workers get to destroy their sandboxes after SIGTERM


@dataclass
class Tally:
    queued: dict[str, Job] = field(default_factory=dict)  # key -> job fed, until answered
    running: dict[str, int] = field(default_factory=dict)  # key -> worker running it, until answered
    dead_workers: set[int] = field(default_factory=set)  # workers that died without a goodbye
    interrupted: bool = False
    stopped_by: str | None = None  # why scheduling ended early: "max_cost", "worker_lost"


class Scheduler:
    """Runs `jobs` on `config.num_workers` processes; `on_event` handles each worker event."""

    def __init__(
        self,
        config: RunConfig,
        on_event: Callable[[WorkerEvent], None],
        on_tick: Callable[[], None],
    ) -> None:
        self.config = config
        self.on_event = on_event
        self.on_tick = on_tick
        self.ctx = multiprocessing.get_context("spawn")
        self.jobs: Any = self.ctx.Queue(maxsize=max(2 * config.max_inflight, 8))
        self.events: Any = self.ctx.Queue()
        self.tally = Tally()
        self._lock = threading.Lock()
        self._stop = threading.Event()  # stop everything: feeding and waiting
        self._no_more = threading.Event()  # start no new job; those running finish
        self._fed = False  # every job and end mark was put (guarded by _lock)
        self._stopped = StoppedWatch()

    def stop_feeding(self, reason: str) -> None:
        """Start no new prompt (queued jobs are taken back); running ones finish."""
        with self._lock:
            if self._no_more.is_set():
                return
            self.tally.stopped_by = reason
            self._no_more.set()
            fed = self._fed
        if fed:  # the feeder is gone: the queue holds jobs and end marks, take the jobs back here
            threading.Thread(target=self._end_early, name="job-recall", daemon=True).start()

    def run(self, jobs: Iterable[Job]) -> Tally:
        pipes = [self.ctx.Pipe() for _ in range(self.config.num_workers)]
        procs = [
            self.ctx.Process(
                target=worker_entry.main,
                args=(i, self.config, self.jobs, self.events, os.getpid(), pipes[i][1]),
                name=f"agent-worker-{i}",
            )
            for i in range(self.config.num_workers)
        ]
        for proc in procs:  # started from the main thread: PDEATHSIG follows the creating thread
            proc.start()
        for _, child_end in pipes:
            child_end.close()  # the worker holds it now: a dead worker's pipe reads EOF
        hub = HubServer(hub_of(self.config), [parent_end for parent_end, _ in pipes])
        hub.start()
        feeder = threading.Thread(target=self._feed, args=(jobs,), name="job-feeder", daemon=True)
        feeder.start()
        try:
            dead = self._drain(procs)
            if dead is not None:
                self.tally.stopped_by = "worker_lost"
                log.error(
                    "worker %d exited unexpectedly (exit code %s; the OOM killer?): stopping the run; "
                    "the prompts it was running are recorded as worker_lost, rerun with --resume",
                    dead,
                    procs[dead].exitcode,
                )
                self._stop_workers(procs)
        except KeyboardInterrupt:
            self.tally.interrupted = True
            log.warning("interrupted: stopping workers and destroying sandboxes…")
            self._stop_workers(procs)
        finally:
            self._stop.set()
            self._reap(procs)
            hub.stop()
        self._account_lost()
        return self.tally

    def _feed(self, jobs: Iterable[Job]) -> None:
        for job in jobs:
            if self._no_more.is_set():
                break
            with self._lock:
                self.tally.queued[job.key] = job
            if not self._put_while(job):
                return
        for _ in range(self.config.num_workers):
            if not self._put_while(None):
                return
        with self._lock:  # from here on, stop_feeding takes queued jobs back itself
            self._fed = True
            late = self._no_more.is_set()
        if late:
            self._end_early()

    def _end_early(self) -> None:
        """Take back every queued job, then put back the end marks taken with them."""
        for _ in range(self._take_back_queued()):
            if not self._put_while(None):
                return

    def _put_while(self, item: Job | None) -> bool:
        """Put `item` unless the run stops (False) or, for a job, feeding ends (True, not put)."""
        while not self._put(item):
            if self._stop.is_set():
                return False
            if item is not None and self._no_more.is_set():
                return True
        return True

    def _take_back_queued(self) -> int:
        """Empty the job queue; returns how many end marks (None) it held."""
        ends = 0
        while True:
            try:
                job = self.jobs.get(timeout=0.2)
            except queue.Empty:
                return ends
            if job is None:
                ends += 1
                continue
            with self._lock:
                self.tally.queued.pop(job.key, None)

    def _put(self, item: Job | None) -> bool:
        try:
            self.jobs.put(item, timeout=0.2)
            return True
        except queue.Full:
            return False

    def _drain(self, procs: list[Any], deadline: float | None = None) -> int | None:
        """Handle events until every worker has exited (or `deadline` passes). Returns the
        index of a worker that died without saying so: it may have died holding a lock of the
        shared job queue, so the others cannot be trusted to finish."""
        exited: set[int] = set()
        next_tick = time.monotonic() + SYNC_EVERY
        while len(exited) < len(procs):
            if deadline is not None and time.monotonic() > deadline:
                return None
            try:
                event = self.events.get(timeout=0.2)
            except queue.Empty:
                event = None
            if event is not None:
                self._handle(event, exited)
            elif all(not p.is_alive() for p in procs):
                self._drain_leftovers(exited)
                return None
            if time.monotonic() >= next_tick:
                self._stopped.check({i: p.pid for i, p in enumerate(procs) if i not in exited})
                self.on_tick()
                next_tick = time.monotonic() + SYNC_EVERY
                if deadline is None and (dead := self._unannounced_death(procs, exited)) is not None:
                    return dead
        return None

    def _unannounced_death(self, procs: list[Any], exited: set[int]) -> int | None:
        if all(p.exitcode is None for i, p in enumerate(procs) if i not in exited):
            return None
        self._drain_leftovers(exited)  # its goodbye may still be in the queue
        dead = {i for i, p in enumerate(procs) if i not in exited and p.exitcode is not None}
        self.tally.dead_workers |= dead
        return min(dead, default=None)

    def _handle(self, event: WorkerEvent | logging.LogRecord, exited: set[int]) -> None:
        match event:
            case logging.LogRecord():
                logging.getLogger(event.name).handle(event)
                return
            case WorkerExit(worker=worker):
                exited.add(worker)
                return
            case Started(key=key, worker=worker):
                with self._lock:
                    self.tally.running[key] = worker
                return
            case Finished() | Discarded() | Failed() | Cancelled():
                with self._lock:
                    self.tally.queued.pop(event.key, None)
                    self.tally.running.pop(event.key, None)
        self.on_event(event)

    def _drain_leftovers(self, exited: set[int]) -> None:
        while True:
            try:
                self._handle(self.events.get(timeout=0.1), exited)
            except queue.Empty:
                return

    def _stop_workers(self, procs: list[Any]) -> None:
        """Stop feeding, ask workers to cancel (destroying sandboxes), keep the results they send."""
        self._stop.set()
        for proc in procs:
            if proc.is_alive() and proc.pid is not None:
                os.kill(proc.pid, signal.SIGTERM)
                os.kill(proc.pid, signal.SIGCONT)  # a stopped worker cannot act on SIGTERM
        while True:
            try:
                self._drain(procs, deadline=time.monotonic() + STOP_GRACE)
                return
            except KeyboardInterrupt:
                log.warning("still stopping workers (sandboxes are being destroyed)…")

    def _reap(self, procs: list[Any]) -> None:
        for proc in procs:
            proc.join(timeout=STOP_GRACE if not self.tally.interrupted else 5)
            if proc.is_alive():
                log.error("worker %s did not stop; killing it", proc.name)
                proc.kill()
                proc.join()
        self.jobs.cancel_join_thread()
        self.jobs.close()
        self.events.close()

    def _account_lost(self) -> None:
        """Prompts a worker was running when it died: one `worker_lost` failure each. When we
        were interrupted, only the dead workers' (the others' were cancelled). Jobs that never
        started are no failures."""
        with self._lock:
            running, self.tally.running = self.tally.running, {}
            jobs = self.tally.queued
        for key, worker in running.items():
            job = jobs.get(key)
            if job is not None and (not self.tally.interrupted or worker in self.tally.dead_workers):
                self.on_event(Failed.of(job, "worker_lost", "the worker process running it exited early"))
