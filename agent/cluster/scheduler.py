"""The driver of a Ray run: feeds worker actors in batches, long-polls their events, writes.

Design (tasks vs actors): a prompt is far too small to be a Ray task of its own (a task costs
milliseconds of scheduling and a process would re-open its model client and sandbox pool per
prompt), so each worker is a long-lived asyncio actor holding the local backend's worker core;
the driver submits jobs in batches and keeps one `poll` call outstanding per actor, which
returns every event that came since, so results stream back in batches. Back-pressure: an actor
is given at most its conversation slots plus a small prefetch, so the dataset is read only as
fast as the cluster answers, and the in-flight limit holds. The driver alone writes the run
directory (through `on_event`, as with the local backend); when an actor dies with its node,
the jobs it held run again on a replacement actor, so every prompt is written exactly once.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

from agent.batch.backend import BackendFactory, EventRoute, Tally
from agent.batch.events import Failed, WorkerEvent, WorkerLost
from agent.batch.jobs import Job
from agent.batch.losses import Loss, LossBook, crash_loop_limit
from agent.batch.worker import hub_member
from agent.cluster import check_address, require_ray
from agent.cluster.actor import HubActor, WorkerActor, hub_options, limit_history_of
from agent.cluster.members import JobLine, Member
from agent.common.stop_signals import raise_dropped_stop
from agent.config.run_config import RunConfig
from agent.errors import ConfigError, FailureClass

log = logging.getLogger("agent.cluster.scheduler")
SYNC_EVERY = 1.0  # seconds between group commits, as the local backend
POLL_TIMEOUT = 0.5  # seconds an actor holds a poll without events
START_TIMEOUT = 180.0  # seconds for the first actors to come up (imports, sandbox checks)
STOP_GRACE = 30.0  # seconds actors get to finish or cancel and destroy their sandboxes


class RayScheduler:
    """The Ray `RunBackend` (`--backend=ray`); each event goes through the shared `EventRoute`."""

    def __init__(
        self, config: RunConfig, on_event: Callable[[WorkerEvent], None], on_tick: Callable[[], None]
    ) -> None:
        self.config, self.on_event, self.on_tick = config, on_event, on_tick
        self.book = LossBook(config.max_prompt_attempts, crash_loop_limit(config.num_workers))
        self.tally = Tally(losses=self.book)  # attempts counted as on the local backend
        self.members: dict[int, Member] = {}
        self.no_more = False
        self.replacements_left = 2 * config.num_workers + 2
        slots = config.inflight_per_worker
        self.prefetch = max(2, slots // 4)  # jobs waiting in an actor's inbox beyond its slots
        self.capacity = slots + self.prefetch
        self.batch = max(1, self.prefetch // 2)  # fewest jobs worth a submit call
        self.line = JobLine(iter(()))
        self.route = EventRoute(self.tally, self.book, on_event, lambda job: self.line.give_back([job]))

    def stop_feeding(self, reason: str) -> None:
        """Start no new prompt: the actors' inboxes are emptied; running ones finish."""
        if not self.no_more:
            self.no_more = True
            self.tally.stopped_by = reason

    def open(self) -> None:
        self.ray = require_ray()
        self._connect()

    def serve(self, jobs: Iterable[Job]) -> None:
        self.line = JobLine(iter(jobs))
        self._start()
        self._loop(self.line, deadline=None)

    def cancel(self) -> None:
        log.warning("interrupted: cancelling the actors' conversations, destroying sandboxes…")
        self._cancel_all(self.line)

    def _connect(self) -> None:
        address = self.config.ray_address
        check_address(self.config)  # again: the cluster may have gone since the start's check
        ours = signal.getsignal(signal.SIGTERM)
        try:
            self.ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            raise ConfigError(
                f"--ray_address={address}: cannot join a Ray cluster there ({exc}); "
                "start one with `ray start --head`, or pass its head's host:port"
            ) from None
        finally:  # Ray's handler exits at once; ours stops the run cleanly (sandboxes destroyed)
            signal.signal(signal.SIGTERM, ours)

    def _start(self) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = self.ray.get_runtime_context().get_node_id()
        beside_driver = NodeAffinitySchedulingStrategy(here, soft=True)
        hub = self.ray.remote(HubActor).options(**hub_options(self.ray.nodes(), beside_driver))
        cfg = self.config
        self.hub = hub.remote(cfg.max_inflight, cfg.rpm, cfg.tpm, cfg.max_cost)
        self.worker_class = self.ray.remote(WorkerActor)
        starts = [self._add_member() for _ in range(cfg.num_workers)]
        try:
            nodes = self.ray.get(starts, timeout=START_TIMEOUT)
        except self.ray.exceptions.RayError as exc:
            raise ConfigError(f"--backend=ray: the worker actors did not start: {exc}") from None
        for member, node in zip(self.members.values(), nodes, strict=True):
            member.node, member.starting = node, None
        log.info("%d worker actors on %d node(s)", len(nodes), len(set(nodes)))

    def _add_member(self, avoid: str = "") -> Any:
        """A new worker actor, on the next alive node in turn (but `avoid`, a node just lost);
        its `start` call. Ray's SPREAD alone is best effort: it put two of three actors on one
        node of three. The affinity is soft: Ray places the actor elsewhere if that node died."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        number = len(self.members)
        nodes = sorted(n["NodeID"] for n in self.ray.nodes() if n["Alive"] and n["NodeID"] != avoid)
        placement: Any = "SPREAD"
        if nodes:
            placement = NodeAffinitySchedulingStrategy(nodes[number % len(nodes)], soft=True)
        options = self.worker_class.options(num_cpus=0, scheduling_strategy=placement)
        actor = options.remote(number, self.config, self.hub)
        self.members[number] = Member(number, actor, starting=actor.start.remote())
        return self.members[number].starting

    def _live(self) -> list[Member]:
        return [m for m in self.members.values() if not m.exited]

    def _loop(self, line: JobLine, deadline: float | None) -> None:
        next_tick = time.monotonic() + SYNC_EVERY
        while live := self._live():
            if deadline is not None and time.monotonic() > deadline:
                return
            if self.no_more:
                self._recall(line)
            elif deadline is None:
                raise_dropped_stop()
                self._top_up(line, live)
            if line.empty and not any(m.assigned for m in live):
                self._end(live)
            self._poll(live, line)
            self._check_starts(line)
            if time.monotonic() >= next_tick:
                self.on_tick()
                next_tick = time.monotonic() + SYNC_EVERY

    def _top_up(self, line: JobLine, live: list[Member]) -> None:
        for member in live:
            room = self.capacity - len(member.assigned)
            if member.ending or member.starting is not None:
                continue  # a replacement takes jobs once started (`_check_starts`)
            if room <= 0 or (member.assigned and room < self.batch):
                continue  # a batch at a time: one call per finished job would cost the driver
            jobs = line.take(room)
            if not jobs:
                return
            for job in jobs:
                member.assigned[job.key] = job
                self.tally.queued[job.key] = job
            member.actor.submit.remote(jobs)

    def _check_starts(self, line: JobLine) -> None:
        """Replacements whose `start` returned take jobs from now on. Until then they hold none:
        under load a replacement took minutes to come up while the jobs it was given waited in
        its inbox, and the live actors idled (a run hung on one that never came up)."""
        for member in self._live():
            if member.starting is None or not self.ray.wait([member.starting], timeout=0)[0]:
                continue
            try:
                member.node, member.starting = self.ray.get(member.starting), None
            except self.ray.exceptions.RayError as exc:
                self._lose(member, line, exc)

    def _drop_unstarted(self, member: Member) -> None:
        """A replacement still starting holds no job: at the end it is not waited for."""
        member.ending = member.exited = True
        with contextlib.suppress(Exception):  # it may be gone already; the live actors reap what it made
            self.ray.kill(member.actor)

    def _end(self, live: list[Member]) -> None:
        started = [m for m in live if m.starting is None and not m.ending]
        for member in live:
            if member.starting is not None:
                self._drop_unstarted(member)
        if self.book.losses:
            self._reap_after_losses(started)
        for member in started:
            member.ending = True
            member.actor.submit.remote([None])

    def _reap_after_losses(self, started: list[Member]) -> None:
        """A lost actor's sandboxes stay where it died; a replacement's start reaps those of its
        node, but one dropped unstarted never does. So each live actor reaps its node's now."""
        refs = [member.actor.reap.remote() for member in started]
        with contextlib.suppress(self.ray.exceptions.RayError):  # an actor lost now: its next poll says so
            self.ray.get(refs, timeout=STOP_GRACE)

    def _recall(self, line: JobLine) -> None:
        """Stop feeding: jobs not started come back from every inbox (not started, no failure)."""
        for job in line.drain():
            self.tally.queued.pop(job.key, None)
        for member in self._live():
            if member.ending:
                continue
            if member.starting is not None:
                self._drop_unstarted(member)
                continue
            member.ending = True
            with contextlib.suppress(self.ray.exceptions.RayError):
                for key in self.ray.get(member.actor.recall.remote(), timeout=STOP_GRACE):
                    member.assigned.pop(key, None)
                    self.tally.queued.pop(key, None)

    def _poll(self, live: list[Member], line: JobLine) -> None:
        by_ref = {}
        for member in live:
            if member.poll is None:
                member.poll = member.actor.poll.remote(POLL_TIMEOUT)
            by_ref[member.poll] = member
        refs = list(by_ref)
        ready, rest = self.ray.wait(refs, num_returns=1, timeout=POLL_TIMEOUT + 1.0)
        if ready and rest:
            ready += self.ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        for ref in ready:
            member = by_ref[ref]
            member.poll = None
            try:
                items = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:
                self._lose(member, line, exc)
                continue
            for item in items:
                self.route.handle(member, item)

    def _lose(self, member: Member, line: JobLine, exc: Exception) -> None:
        """An actor died (its node lost): what it held runs again on another actor."""
        member.exited = True
        self.tally.dead_workers.add(member.id)  # the endpoint counters it had not reported are gone
        self.on_event(WorkerLost(member.id))
        jobs = list(member.assigned.values())
        member.assigned.clear()
        running = {job.key: job.index for job in jobs if self.tally.running.pop(job.key, None) is not None}
        loss = Loss(time.monotonic(), member.id, None, None, tuple(sorted(running.values())))
        exhausted = set(self.book.lose(loss, running))  # a poison prompt fails, not runs again
        for job in jobs:
            if job.key in exhausted:
                self.on_event(Failed.of(job, FailureClass.WORKER_LOST, self.book.message(job.key, None)))
        with contextlib.suppress(Exception):  # it may be gone already; nothing to clean here
            self.ray.kill(member.actor)
        self.hub.leave.remote(hub_member(member.id))  # its calls in flight went with it
        log.warning(
            "worker actor %d (node %s) lost: %s; its %d prompt(s) run again elsewhere",
            member.id, member.node[:12] or "?", _why(exc)[:300], len(jobs),
        )  # fmt: skip
        line.give_back([job for job in jobs if job.key not in exhausted])
        if member.ending or self.no_more:
            return
        if self.replacements_left > 0:
            self.replacements_left -= 1
            self.book.replacements += 1
            self._add_member(avoid=member.node)  # its start is awaited by its first poll
        elif not self._live():
            self.tally.stopped_by = "worker_lost"

    def _cancel_all(self, line: JobLine) -> None:
        self.no_more = self.route.stopping = True
        for member in self._live():
            member.ending = True
            with contextlib.suppress(self.ray.exceptions.RayError):
                member.actor.cancel.remote()
        while True:
            try:
                self._loop(line, deadline=time.monotonic() + STOP_GRACE)
                return
            except KeyboardInterrupt:
                log.warning("still stopping the actors (sandboxes are being destroyed)…")

    def shutdown(self) -> None:
        for member in self.members.values():
            if not member.exited:  # past STOP_GRACE: killed
                self.route.cancel_running(member)
            with contextlib.suppress(Exception):  # already dead: nothing to kill
                self.ray.kill(member.actor)
        self.tally.limit_history = limit_history_of(self.ray, getattr(self, "hub", None))
        with contextlib.suppress(Exception):
            self.ray.kill(self.hub)
        self.ray.shutdown()


BACKEND: BackendFactory = RayScheduler  # `--backend=ray` (agent.backends): mypy checks the seam


def _why(exc: Exception) -> str:
    """What says why an actor was lost: an error raised in its method (a task error, whose own
    first line names only the call and the process), else the error's first line."""
    cause = getattr(exc, "cause", None)
    text = f"{type(cause).__name__}: {cause}" if isinstance(cause, BaseException) else str(exc)
    return text.strip().splitlines()[0] if text.strip() else type(exc).__name__
