"""The local backend's worker processes as the parent sees them: one `Member` per process,
with its own pipes (`agent.batch.channels`) and the jobs it holds.

Workers are forked by a fork server that imported their modules once (`agent.batch.fork_server`).

A member is sent a job only once it is ready and while it has a free conversation slot (`sent`
below its slots), so what it holds is exactly `sent`: the jobs it said it started (`started`)
and those not yet taken. When it dies the parent knows which prompts it was running without asking anyone.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from multiprocessing import forkserver
from multiprocessing.connection import Connection
from typing import Any

from agent.batch import worker_entry
from agent.batch.fork_server import server_pid
from agent.batch.jobs import Job
from agent.batch.limit_pipes import HubServer
from agent.config.run_config import RunConfig

JOIN_TIMEOUT = 5.0  # seconds a worker whose pipe closed gets to exit before it is killed


@dataclass(eq=False)
class Member:
    slot: int  # its worker id; a replacement takes the dead worker's (and its rate-limit share)
    proc: Any
    jobs: Connection  # the parent's end: jobs (None: no more) out
    events: Connection  # the parent's end: events and log records in
    sent: dict[str, Job] = field(default_factory=dict)  # key -> job sent, not answered
    started: set[str] = field(default_factory=set)  # keys of `sent` it said it started
    ready: bool = False  # it said it takes jobs (`WorkerReady`): none is sent before
    ended: bool = False  # it was told there are no more jobs
    goodbye: bool = False  # its `WorkerExit` came
    since: float | None = None  # a replacement: when its predecessor's death was seen

    @property
    def id(self) -> int:
        return self.slot

    def said_ready(self) -> None:
        self.ready = True

    def said_goodbye(self) -> None:
        self.goodbye = True

    def took(self, key: str) -> None:
        self.started.add(key)

    def release(self, key: str) -> Job | None:
        self.started.discard(key)
        return self.sent.pop(key, None)

    def running(self) -> dict[str, int]:
        """Key -> dataset index of the prompts it started and did not answer."""
        return {key: job.index for key, job in self.sent.items() if key in self.started}

    def send(self, item: Job | None) -> None:
        try:
            self.jobs.send(item)
        except OSError:  # it died: its events pipe reads EOF next, and the job is requeued then
            return

    def end(self) -> None:
        if not self.ended:
            self.ended = True
            self.send(None)

    def reap(self) -> int | None:
        """Wait for the process to exit (killing it if it does not), close our ends; its exit code."""
        self.proc.join(timeout=JOIN_TIMEOUT)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()
        self.jobs.close()
        self.events.close()
        code: int | None = self.proc.exitcode
        return code


def spawn(ctx: Any, config: RunConfig, slot: int, hub: HubServer, since: float | None = None) -> Member:
    """Start worker `slot` with its own pipes (call from the main thread: PR_SET_PDEATHSIG
    follows the thread that created the process)."""
    jobs_in, jobs_out = ctx.Pipe(duplex=False)
    events_in, events_out = ctx.Pipe(duplex=False)
    hub_here, hub_there = ctx.Pipe()
    parent = os.getpid()  # the process whose death ends the worker (PR_SET_PDEATHSIG)
    if ctx.get_start_method() == "forkserver":
        forkserver.ensure_running()  # (again, if it died): its pid is the worker's parent's
        parent = server_pid() or parent  # which exits when we do, the workers after it
    proc = ctx.Process(
        target=worker_entry.main,
        args=(slot, config, jobs_in, events_out, parent, hub_there),
        name=f"agent-worker-{slot}",
    )
    proc.start()
    for theirs in (jobs_in, events_out, hub_there):
        theirs.close()  # the worker holds them now: its death reads as EOF here
    hub.add(hub_here)
    return Member(slot, proc, jobs_out, events_in, since=since)
