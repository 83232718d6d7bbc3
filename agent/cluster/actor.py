"""What runs on the cluster's nodes: a `WorkerActor` per worker and the `HubActor` of the limit.

A WorkerActor is an asyncio Ray actor holding one `agent.batch.worker.Worker`: the same core the
local backend runs in a process (its event loop, one model client, one sandbox pool on this
node), with a Ray-fed inbox (`submit`) instead of the process queue and an outbox the driver
long-polls (`poll`) instead of the event queue. Jobs and events are the same frozen dataclasses.
At start it reaps the sandboxes that dead processes left on its node (a node that was lost and
came back) and raises its open-file limit for its share of conversations.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from agent.batch.capacity import raise_fd_limit
from agent.batch.jobs import Job
from agent.common.redaction import install, redact_streams
from agent.common.secrets import set_not_dumpable
from agent.config.run_config import RunConfig
from agent.llm.shared_limit import Grant, LimitHub, Report, dated
from agent.sandboxes import reap_stale

LINGER = 0.02  # seconds a poll waits after the first event, so events travel in batches
HISTORY_TIMEOUT = 10.0  # seconds the hub actor gets to hand over the limit's history at the end

log = logging.getLogger(__name__)


class Inbox:
    """The actor's `JobSource`: jobs the driver submitted; None ends the worker."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[Job | None] = asyncio.Queue()

    async def next(self, stopping: asyncio.Event) -> Job | None:
        if stopping.is_set():
            return None
        return await self.queue.get()

    def take_back(self) -> list[str]:
        """Empty the inbox: the keys of the jobs that had not started."""
        keys = []
        while not self.queue.empty():
            job = self.queue.get_nowait()
            if job is not None:
                keys.append(job.key)
        return keys


class Outbox:
    """The actor's `EventSink`: events (and log records) kept until the driver polls."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.ready = asyncio.Event()
        self.loop = asyncio.get_running_loop()

    def put(self, item: Any) -> None:
        self.items.append(item)
        self.loop.call_soon_threadsafe(self.ready.set)

    put_nowait = put  # logging.handlers.QueueHandler's name for it

    async def take(self, timeout: float) -> list[Any]:
        if not self.items:
            try:  # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel (hub_sync)
                async with asyncio.timeout(timeout):
                    await self.ready.wait()
            except TimeoutError:
                return []
            await asyncio.sleep(LINGER)
        self.ready.clear()
        items, self.items = self.items, []
        return items


class WorkerActor:
    """Wrapped with `ray.remote` by the driver; `start` first, then `submit` and `poll`."""

    def __init__(self, worker_id: int, config: RunConfig, hub: Any) -> None:
        set_not_dumpable()  # the config holds the API key: no command of our user reads us
        install(config.agent.secrets())  # as a local worker: the web search keys too
        redact_streams()
        self.id, self.config, self.hub = worker_id, config, hub
        # Set once `start` has made the inbox and outbox. Ray keeps no order among an async
        # actor's calls: the driver's first poll could run while `start` still reaped (seconds
        # after a node was lost), found no outbox, and the replacement was taken for lost.
        self.opened = asyncio.Event()

    async def start(self) -> str:
        """Reap, raise limits, start the worker; returns this node's id."""
        import ray

        from agent.batch.worker import Worker, forward_logs  # the SDKs: here, never in the driver
        from agent.toolbox.extensions import install_extensions

        self.inbox, self.outbox = Inbox(), Outbox()
        forward_logs(self.outbox, self.config.verbose)  # the reap's warnings reach the driver too
        self.opened.set()
        await self.reap()
        raise_fd_limit(self.config.inflight_per_worker)
        install_extensions(self.config.agent.tools)  # the run's own toolsets, as the driver's
        self.worker = Worker(self.id, self.config, self.inbox, self.outbox, RayLink(self.hub))
        self.task = asyncio.get_running_loop().create_task(self.worker.serve())
        node: str = ray.get_runtime_context().get_node_id()
        return node

    async def reap(self) -> None:
        """Remove the sandboxes dead processes left on this node (a lost actor's, a killed one's)."""
        for name in await asyncio.to_thread(reap_stale, self.config.sandbox):
            log.warning("removed a sandbox left by a dead process on this node: %s", name)

    async def submit(self, jobs: list[Job | None]) -> None:
        for job in jobs:
            self.inbox.queue.put_nowait(job)

    async def poll(self, timeout: float) -> list[Any]:
        """The events and log records since the last poll (waits up to `timeout` for one)."""
        try:
            async with asyncio.timeout(timeout):
                await self.opened.wait()  # a poll that came before `start`
        except TimeoutError:
            return []
        return await self.outbox.take(timeout)

    async def recall(self) -> list[str]:
        """Stop feeding: jobs not yet started come back (their keys), the end mark goes in."""
        keys = self.inbox.take_back()
        self.inbox.queue.put_nowait(None)
        return keys

    async def cancel(self) -> None:
        """Ctrl-C at the driver: cancel every conversation (destroying its sandbox)."""
        self.worker.stop()
        self.inbox.queue.put_nowait(None)


HEAD_RESOURCE = "node:__internal_head__"  # the resource Ray gives the head node alone


def hub_options(nodes: list[dict[str, Any]], beside_driver: Any) -> dict[str, Any]:
    """Where the HubActor runs: on the head node, whose loss ends the cluster anyway (beside
    the driver, Ray may put it on another node when the driver's is busy: losing that node took
    the hub, and every model call waited for it, the run hung); beside the driver where no node
    says it is the head. Ray restarts it if its process dies: calls fail meanwhile, and ask the
    new one (`hub_sync`), which starts from their next reports."""
    on_head = any(node["Alive"] and HEAD_RESOURCE in node["Resources"] for node in nodes)
    where: dict[str, Any] = (
        {"resources": {HEAD_RESOURCE: 0.001}} if on_head else {"scheduling_strategy": beside_driver}
    )
    return {"num_cpus": 0, "max_restarts": -1, **where}


class HubActor:
    """The run's `LimitHub`, one for the whole cluster (an actor runs one call at a time)."""

    def __init__(self, maximum: int, rpm: float | None, tpm: float | None, max_cost: float | None) -> None:
        self.hub = LimitHub(maximum, rpm=rpm, tpm=tpm, max_cost=max_cost)

    def exchange(self, report: Report) -> Grant:
        return self.hub.exchange(report)

    def limit_history(self) -> list[tuple[float, float]]:
        """`LimitHub.limit_history`: since this actor started (Ray restarts it if it dies)."""
        return self.hub.limit_history()

    def leave(self, member: str) -> None:
        """A worker actor was lost: its slots are free at once (its replacement has a new name)."""
        self.hub.leave(member)


def limit_history_of(ray: Any, hub: Any) -> list[tuple[float, float]]:
    """The hub actor's history of the run's limit (`LimitHub.limit_history`) on our clock;
    none where there is no hub (the cluster never started) or it does not answer."""
    if hub is None:
        return []
    try:
        return dated(ray.get(hub.limit_history.remote(), timeout=HISTORY_TIMEOUT))
    except ray.exceptions.RayError as exc:
        log.warning("the run's limit history is left out: the hub actor did not give it (%s)", exc)
        return []


class RayLink:
    """A WorkerActor's `LimitLink`: a call to the HubActor (errors become ConnectionError)."""

    def __init__(self, hub: Any) -> None:
        self.hub = hub

    async def exchange(self, report: Report) -> Grant:
        import ray

        try:
            grant: Grant = await self.hub.exchange.remote(report)
        except ray.exceptions.RayError as exc:
            raise ConnectionError(f"the rate-limit hub actor: {exc}") from exc
        return grant
