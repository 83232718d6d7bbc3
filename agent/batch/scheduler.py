"""Scheduling prompts (not batches) onto worker processes, and the parent's single-writer loop.

Each worker has its own pipes (`agent.batch.channels`): the parent sends it a job whenever one
of its conversation slots is free, so the dataset is streamed, never held, and a slow prompt
never idles capacity. The parent appends the answers to the run directory, syncs in groups and
rewrites the checkpoint. A worker says which job it starts (`Started`).

A worker that exits unexpectedly (the OOM killer, an operator's kill) is replaced by a fresh
one in its slot; the prompts it was running lose one attempt and are requeued, the others it
held are requeued as they were; the other workers never notice (`agent.batch.losses`: poison
prompts and the crash-loop guard). `stop_feeding` (the cost budget) ends scheduling: in-flight
prompts finish (past --max_cost the hub starts no model call: they fail as `budget`). A stopped
worker is continued (`agent.batch.stopped`). The run's one rate limit (in-flight, rpm, tpm,
Retry-After pauses, --max_cost) is held here and served to the workers over pipes
(`agent.batch.limit_pipes`), not split among them.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.connection import wait

from agent.batch.backend import BackendFactory, EventRoute, Tally
from agent.batch.collection import space_collections
from agent.batch.crew import Member, spawn
from agent.batch.events import Failed, WorkerEvent, WorkerLost
from agent.batch.fork_server import worker_context
from agent.batch.jobs import Job
from agent.batch.limit_pipes import HubServer, hub_of
from agent.batch.losses import Loss, LossBook, crash_loop_limit
from agent.batch.stopped import StoppedWatch
from agent.common.stop_signals import raise_dropped_stop
from agent.config.run_config import RunConfig
from agent.errors import FailureClass, SandboxError
from agent.sandboxes import reap_stale

log = logging.getLogger("agent.batch.scheduler")
SYNC_EVERY = 1.0  # seconds between group commits (fsync + checkpoint)
STOP_GRACE = 30.0  # seconds workers get to destroy their sandboxes after SIGTERM


class Scheduler:
    """The local `RunBackend`: `config.num_workers` processes; `on_event` handles each worker
    event (through the shared `EventRoute`)."""

    def __init__(
        self,
        config: RunConfig,
        on_event: Callable[[WorkerEvent], None],
        on_tick: Callable[[], None],
    ) -> None:
        self.config = config
        self.on_event = on_event
        self.on_tick = on_tick
        self.ctx = worker_context()  # forked by a fork server that imported the worker once
        self.book = LossBook(config.max_prompt_attempts, crash_loop_limit(config.num_workers))
        self.tally = Tally(losses=self.book)
        self.members: list[Member] = []  # the live worker processes
        self.pending: deque[Job] = deque()  # jobs to send before the dataset's next (requeued)
        self._source: Iterator[Job] = iter(())
        self._exhausted = False  # the dataset gave its last job
        self._no_more = False  # start no new job; those running finish
        self._stopping = False  # the workers were told to stop (SIGTERM)
        self._stopped = StoppedWatch()
        self.hub = HubServer(hub_of(config), [])
        self.route = EventRoute(self.tally, self.book, on_event, self.pending.appendleft)

    def stop_feeding(self, reason: str) -> None:
        """Start no new prompt; running ones finish."""
        if not self._no_more:
            self.tally.stopped_by = reason
            self._no_more = True

    def open(self) -> None:
        self.hub.start()

    def serve(self, jobs: Iterable[Job]) -> None:
        self._source = iter(jobs)
        self.members = [spawn(self.ctx, self.config, i, self.hub) for i in range(self.config.num_workers)]
        before = space_collections()  # each event's objects: see agent.batch.collection
        try:
            self._loop(deadline=None)
        finally:
            gc.set_threshold(*before)

    def cancel(self) -> None:
        log.warning("interrupted: stopping workers and destroying sandboxes…")
        self._stop_workers()

    def shutdown(self) -> None:
        for member in self.members:  # past STOP_GRACE: killed
            self.route.cancel_running(member)
            member.reap()
        self.tally.limit_history = self.hub.stop()

    def _loop(self, deadline: float | None) -> None:
        """Send jobs and handle events until every worker has exited (or `deadline` passes)."""
        next_tick = time.monotonic() + SYNC_EVERY
        while self.members and (deadline is None or time.monotonic() < deadline):
            if not self._stopping:
                raise_dropped_stop()  # a Ctrl-C Python dropped (agent.common.stop_signals)
                self._dispatch()
            ready = wait([m.events for m in self.members], timeout=0.2)
            for member in [m for m in self.members if m.events in ready]:
                self._receive(member)
            if self.tally.stopped_by == "crash_loop" and not self._stopping:
                self._stop_workers()
                return
            if time.monotonic() >= next_tick:
                self._stopped.check({m.slot: m.proc.pid for m in self.members})
                self.on_tick()
                next_tick = time.monotonic() + SYNC_EVERY

    def _dispatch(self) -> None:
        """Fill free slots (the member holding fewest first); end the workers when all is done."""
        slots = self.config.inflight_per_worker
        while not self._no_more:
            free = [m for m in self.members if m.ready and not m.ended and len(m.sent) < slots]
            if not free or (job := self._next_job()) is None:
                break
            member = min(free, key=lambda m: len(m.sent))
            member.sent[job.key] = job
            member.send(job)
        if self._no_more or (self._exhausted and not self.pending and not any(m.sent for m in self.members)):
            for member in self.members:
                member.end()

    def _next_job(self) -> Job | None:
        if self.pending:
            return self.pending.popleft()
        if not self._exhausted:
            job = next(self._source, None)
            if job is not None:
                return job
            self._exhausted = True
        return None

    def _receive(self, member: Member) -> None:
        """Handle what `member` sent (a few at most, so no worker starves the others)."""
        for _ in range(64):
            try:
                item = member.events.recv()
            except (EOFError, OSError):  # its process is gone (or going)
                self._gone(member)
                return
            self.route.handle(member, item)
            if not member.events.poll(0):
                return

    def _gone(self, member: Member) -> None:
        self.members.remove(member)
        member.reap()
        if self._stopping or (member.ended and member.goodbye and not member.sent):
            self._fail_running(member, "the worker process running it exited while the run stopped")
            return
        self._lose(member)

    def _lose(self, member: Member) -> None:
        """A worker exited unexpectedly: book it, requeue (or fail) what it held, replace it."""
        now = time.monotonic()
        running = member.running()
        self.tally.dead_workers.add(member.slot)
        self.on_event(WorkerLost(member.slot))
        loss = Loss(now, member.slot, member.proc.pid, member.proc.exitcode, tuple(sorted(running.values())))
        exhausted = set(self.book.lose(loss, running))
        for key in running:
            self.tally.running.pop(key, None)
        requeued = 0
        for key, job in reversed(member.sent.items()):
            if key in exhausted or (self._no_more and key in running):
                self.on_event(
                    Failed.of(job, FailureClass.WORKER_LOST, self.book.message(key, loss.exit_code))
                )
            elif not self._no_more:
                self.pending.appendleft(job)
                requeued += 1
        self._reap_sandboxes()
        if self.tally.stopped_by == "crash_loop":
            return  # another death read in the same pass: the run stops already, said once
        if (line := self.book.crash_loop(now)) is not None:
            log.error("%s", line)
            self.tally.stopped_by = "crash_loop"
            return
        replace = not self._no_more and (self.pending or not self._exhausted)
        log.warning(
            "%s exited unexpectedly (%s): %d prompt(s) sent to it and not answered requeued; %s",
            loss.describe(),
            loss.guess(),
            requeued,
            "starting a replacement" if replace else "not replaced: no work left",
        )
        if replace:
            self.members.append(spawn(self.ctx, self.config, member.slot, self.hub, since=now))
            self.book.replacements += 1

    def _fail_running(self, member: Member, message: str) -> None:
        """A worker that died while the run stopped: what it was running is `worker_lost`."""
        if member.goodbye:
            return  # it cancelled what it ran (Cancelled): not started, not failed
        for key in member.running():
            self.tally.running.pop(key, None)
            self.on_event(Failed.of(member.sent[key], FailureClass.WORKER_LOST, message))

    def _reap_sandboxes(self) -> None:
        """The dead worker could not destroy its sandboxes: remove them and kill their commands."""
        try:
            for name in reap_stale(self.config.sandbox):
                log.info("removed a sandbox of the dead worker: %s", name)
        except (OSError, SandboxError) as exc:
            log.warning("could not remove the dead worker's sandboxes (the next run will): %s", exc)

    def _stop_workers(self) -> None:
        """Ask workers to cancel (destroying sandboxes), keep the results they send."""
        self._stopping = self.route.stopping = True
        for member in self.members:
            if member.proc.is_alive() and member.proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):  # it died meanwhile: nothing to stop
                    os.kill(member.proc.pid, signal.SIGTERM)
                    os.kill(member.proc.pid, signal.SIGCONT)  # a stopped worker cannot act on SIGTERM
        deadline = time.monotonic() + STOP_GRACE
        while True:
            try:
                self._loop(deadline)
                return
            except KeyboardInterrupt:
                log.warning("still stopping workers (sandboxes are being destroyed)…")


BACKEND: BackendFactory = Scheduler  # `--backend=local` (agent.backends): mypy checks the seam
