"""A worker process: many conversations at once on one event loop, results sent to the parent.

Workers never write the run directory; the parent is the single writer. A worker dies with
its parent (PR_SET_PDEATHSIG), so a SIGKILLed runner leaves no worker running on. SIGTERM
cancels every conversation, which destroys their sandboxes, then the worker exits.
"""

from __future__ import annotations

import asyncio
import ctypes
import dataclasses
import gc
import logging
import logging.handlers
import os
import signal
import traceback
from collections.abc import Callable
from typing import Any

from agent.batch.attempt_checks import AttemptChecks
from agent.batch.channels import PipeJobs, PipeSink
from agent.batch.collection import space_collections
from agent.batch.events import Answer, Cancelled, Failed, LimiterReport, Started, WorkerExit, WorkerReady
from agent.batch.jobs import EventSink, Job, JobSource
from agent.batch.limit_pipes import PipeLink
from agent.batch.pulse import send_pulses
from agent.batch.records import answer
from agent.config.run_config import RunConfig
from agent.errors import AgentError, FailureClass, SandboxError
from agent.llm.factory import open_chat_model
from agent.llm.rate_limit import AdaptiveLimiter
from agent.llm.shared_limit import LimitLink
from agent.loop.agent_loop import converse
from agent.loop.conversation import Prompt
from agent.sandboxes import prepare_worker, sandbox_pool, throttled
from agent.toolbox.context import Resources
from agent.toolbox.dispatch import being_stopped
from agent.toolbox.extensions import install_extensions
from agent.toolbox.registry import ResolvedTools, resolve_tools

log = logging.getLogger("agent.batch.worker")
PR_SET_PDEATHSIG = 1
PROFILE_VARIABLE = "AGENT_BENCH_PROFILE_DIR"  # bench only: profile each worker's event loop into it


def _die_with_parent(parent_pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def main(worker_id: int, config: RunConfig, jobs: Any, events: Any, parent_pid: int, hub: Any) -> None:
    """Process entry point (multiprocessing spawn target); `jobs`, `events` and `hub` are our
    ends of this worker's own pipes to the parent (`agent.batch.channels`)."""
    _die_with_parent(parent_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how Ctrl-C ends the run
    sink = PipeSink(events)
    forward_logs(sink, config.verbose)
    prepare_worker(config.sandbox)  # after forward_logs: what the backend says reaches the parent
    install_extensions(config.agent.tools)  # the run's own toolsets, as the parent registered them
    # The SDK's imports leave ~10^5 long-lived objects (pydantic models of every API type) that
    # every full collection would walk again; frozen, collections only see what the run makes.
    gc.freeze()
    space_collections()
    worker = Worker(worker_id, config, PipeJobs(jobs), sink, PipeLink(hub))
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            _profiled(worker_id, lambda: runner.run(worker.serve(on_sigterm=True)))
    except SystemExit as exc:  # ends the worker with nothing printed: the parent's loss says "see above"
        log.error("worker %d: something it ran called sys.exit(%r)", worker_id, exc.code, exc_info=True)
        raise
    finally:
        sink.close()  # our goodbye reaches the parent before we exit


def _profiled(worker_id: int, run: Callable[[], None]) -> None:
    """`run()`, under cProfile counting CPU time when PROFILE_VARIABLE names a directory (the
    benchmarks' switch, `bench/profile_hot_path.py`: the worker's own CPU per call, by function)."""
    directory = os.environ.get(PROFILE_VARIABLE)
    if not directory:
        run()
        return
    import cProfile
    import time

    profile = cProfile.Profile(time.process_time)
    try:
        profile.runcall(run)
    finally:
        profile.dump_stats(os.path.join(directory, f"worker-{worker_id}-{os.getpid()}.prof"))


def forward_logs(events: Any, verbose: bool) -> None:
    """Every log record of this process goes to the parent, which prints it."""
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(events)]
    root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    logging.getLogger("agent").setLevel(logging.DEBUG if verbose else logging.WARNING)
    # the model client's first retry, once per worker: a dead endpoint is said in seconds, not
    # when the first prompt has spent every retry
    logging.getLogger("agent.llm.client").setLevel(logging.DEBUG if verbose else logging.INFO)


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop where it is installed: the same asyncio API on libuv, at ~12 % less CPU per
    prompt for a worker (its sockets, timers and callbacks cost less); asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def hub_member(worker_id: int) -> str:
    """The name a worker reports under to the run's limit hub."""
    return f"worker-{worker_id}"


class Worker:
    """Runs jobs from `jobs` on this event loop, `config.inflight_per_worker` at a time; model
    calls limited by the run's one limit through `hub`."""

    def __init__(
        self, worker_id: int, config: RunConfig, jobs: JobSource, events: EventSink, hub: LimitLink
    ) -> None:
        self.id, self.config, self.jobs, self.events = worker_id, config, jobs, events
        self.limiter = AdaptiveLimiter(
            config.inflight_per_worker,
            rpm=config.rpm,
            tpm=config.tpm,
            hub=hub,
            member=hub_member(worker_id),
            max_cost=config.max_cost,
            prices=config.prices,
        )
        self.stopping = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.tools: dict[tuple[str, ...], ResolvedTools] = {}  # by sampled toolsets
        self.shared = Resources()  # what the tools keep open for all conversations (a browser)

    def stop(self) -> None:
        """SIGTERM: take no new job and cancel every conversation now (destroying its sandbox),
        also when the job queue already ran dry and we are only waiting for the last ones."""
        self.stopping.set()
        for task in self.tasks:
            task.cancel()

    async def serve(self, on_sigterm: bool = False) -> None:
        if on_sigterm:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.stop)
        connections = self.config.inflight_per_worker + 8
        self.model = open_chat_model(self.config.agent, limiter=self.limiter, max_connections=connections)
        pulses = asyncio.create_task(send_pulses(self.id, self.limiter, self.events.put))
        try:
            async with sandbox_pool(self.config.sandbox, self.config.run_name) as factory:
                self.factory = throttled(factory, self.config.sandbox_starts)
                self.events.put(WorkerReady(self.id))
                try:
                    await self._pull_and_run()
                finally:
                    await self.shared.aclose()
        finally:
            pulses.cancel()
            await self.model.aclose()
            if self.limiter.sync is not None:
                await self.limiter.sync.aclose()
            self.events.put(LimiterReport(self.id, dict(self.limiter.stats.__dict__)))
            self.events.put(WorkerExit(self.id))

    async def _pull_and_run(self) -> None:
        slots = asyncio.Semaphore(self.config.inflight_per_worker)
        tasks = self.tasks
        while True:
            await slots.acquire()  # cancelled conversations free their slots on SIGTERM
            job = await self.jobs.next(self.stopping)
            if job is not None and (self.stopping.is_set() or self.limiter.budget_spent is not None):
                self.events.put(Cancelled(job.key))  # got as SIGTERM came, or past --max_cost: not started
                if not self.stopping.is_set():
                    slots.release()  # the parent stops feeding; take what is queued until the end mark
                    continue
            if job is None or self.stopping.is_set():
                break
            self.events.put(Started(job.key, self.id))
            task = asyncio.create_task(self._run_job(job))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: slots.release())
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_job(self, job: Job) -> None:
        try:
            event = await self._converse(job)
        except asyncio.CancelledError:
            if self.stopping.is_set():  # not charged: the prompt runs again
                self.events.put(Cancelled(job.key))
            raise  # else the loop is torn down under it: the worker dies, the parent books the loss
        self.events.put(event)

    def _tools(self, toolsets: tuple[str, ...]) -> ResolvedTools:
        """The tools of a sampled toolset combination, resolved once per worker."""
        if toolsets not in self.tools:
            self.tools[toolsets] = resolve_tools(toolsets or None, config=self.config.agent.tools)
        return self.tools[toolsets]

    async def _converse(self, job: Job) -> Answer:
        run = self.config
        prompt = Prompt(job.prompt, job.sandbox_spec(run.run_name), job.log_prefix)
        try:
            async with asyncio.timeout(run.prompt_timeout) as deadline:
                tools = self._tools(job.toolsets)
                agent = run.agent.with_sampling(job.sampling)  # its row's over the flags'
                checks = AttemptChecks(job, self.model, run.verify, deadline, run.prices)  # own timeouts
                result = await converse(agent, self.model, tools, prompt, self.factory, self.shared, checks)
        except TimeoutError:
            return Failed.of(
                job, FailureClass.PROMPT_TIMEOUT, f"no outcome within --prompt_timeout={run.prompt_timeout}s"
            )
        except asyncio.CancelledError as exc:
            if being_stopped():
                raise  # stopped: `_run_job` says so, and the prompt runs again later
            return Failed.of(job, FailureClass.EXCEPTION, f"CancelledError raised in the conversation: {exc}")
        except SandboxError as exc:
            return Failed.of(job, FailureClass.SANDBOX, str(exc))
        except AgentError as exc:
            return Failed.of(job, FailureClass.EXCEPTION, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug costs one prompt, not the run; reported, not swallowed
            log.error("%s\n%s", exc, traceback.format_exc())
            return Failed.of(job, FailureClass.EXCEPTION, f"{type(exc).__name__}: {exc}")
        # The judge's calls are the entry's too (priced already: adding first would keep the
        # conversation unpriced, a known cost making the sum's).
        result = dataclasses.replace(result, usage=result.usage.priced(run.prices) + checks.usage)
        return answer(
            job,
            result,
            keep_no_reasoning=run.keep_no_reasoning,
            keep_malformed=run.keep_malformed,
            keep_token_drift=run.keep_token_drift,
            verification=checks.verification,
        )
