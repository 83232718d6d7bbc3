"""A worker process: many conversations at once on one event loop, results sent to the parent.

Workers never write the run directory; the parent is the single writer. A worker dies with
its parent (PR_SET_PDEATHSIG), so a SIGKILLed runner leaves no worker running on. SIGTERM
cancels every conversation, which destroys their sandboxes, then the worker exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import gc
import logging
import logging.handlers
import os
import queue
import signal
import time
import traceback
from collections.abc import Callable
from typing import Any

from agent.batch.records import build_entry, discard_record, failure_record, result_record
from agent.config.run_config import RunConfig
from agent.errors import AgentError, SandboxError
from agent.llm.client import OpenAIChatModel
from agent.llm.rate_limit import AdaptiveLimiter
from agent.sandboxes import sandbox_pool, throttled
from agent.sandboxes.host import orphans
from agent.toolbox.registry import ResolvedTools, resolve_tools
from run_agent import AIAgent

log = logging.getLogger("agent.batch.worker")
PR_SET_PDEATHSIG = 1


def _die_with_parent(parent_pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def main(worker_id: int, config: RunConfig, jobs: Any, events: Any, parent_pid: int) -> None:
    """Process entry point (multiprocessing spawn target)."""
    _die_with_parent(parent_pid)
    if config.sandbox.backend == "local":  # every child of ours is then a command or its orphan
        orphans.adopt_orphans()  # so closing a sandbox looks at our children, not all of /proc
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides how Ctrl-C ends the run
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(events)]
    root.setLevel(logging.DEBUG if config.verbose else logging.WARNING)
    logging.getLogger("agent").setLevel(logging.DEBUG if config.verbose else logging.WARNING)
    # The SDK's imports leave ~10^5 long-lived objects (pydantic models of every API type) that
    # every full collection would walk again; frozen, collections only see what the run makes.
    gc.freeze()
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        runner.run(Worker(worker_id, config, jobs, events).serve())


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's loop where it is installed: the same asyncio API on libuv, at ~12 % less CPU per
    prompt for a worker (its sockets, timers and callbacks cost less); asyncio's otherwise."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class Worker:
    def __init__(self, worker_id: int, config: RunConfig, jobs: Any, events: Any) -> None:
        self.id, self.config, self.jobs, self.events = worker_id, config, jobs, events
        share = config.num_workers
        self.limiter = AdaptiveLimiter(
            config.inflight_per_worker,
            rpm=config.rpm / share if config.rpm else None,
            tpm=config.tpm / share if config.tpm else None,
        )
        self.stopping = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.tools: dict[tuple[str, ...], ResolvedTools] = {}  # by sampled toolsets

    def _stop(self) -> None:
        """SIGTERM: take no new job and cancel every conversation now (destroying its sandbox),
        also when the job queue already ran dry and we are only waiting for the last ones."""
        self.stopping.set()
        for task in self.tasks:
            task.cancel()

    async def serve(self) -> None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self._stop)
        cfg = self.config.agent
        self.model = OpenAIChatModel(
            base_url=cfg.base_url,
            api_key=cfg.api_key or "none",
            model=cfg.model,
            timeout=cfg.request_timeout,
            max_retries=cfg.max_retries,
            limiter=self.limiter,
            max_connections=self.config.inflight_per_worker + 8,
        )
        try:
            async with sandbox_pool(self.config.sandbox, self.config.run_name) as factory:
                self.factory = throttled(factory, self.config.sandbox_starts)
                await self._pull_and_run()
        finally:
            await self.model.aclose()
            stats = self.limiter.stats
            self.events.put({"kind": "limiter", "worker": self.id, "stats": stats.__dict__})
            self.events.put({"kind": "exit", "worker": self.id})

    async def _next_job(self) -> dict[str, Any] | None:
        with contextlib.suppress(queue.Empty):  # usually one is waiting: take it without a thread
            job: dict[str, Any] | None = self.jobs.get_nowait()
            return job
        while not self.stopping.is_set():
            try:
                job = await asyncio.to_thread(self.jobs.get, True, 0.2)
                return job
            except queue.Empty:
                continue
        return None

    async def _pull_and_run(self) -> None:
        slots = asyncio.Semaphore(self.config.inflight_per_worker)
        tasks = self.tasks
        while True:
            await slots.acquire()  # cancelled conversations free their slots on SIGTERM
            job = await self._next_job()
            if job is not None and self.stopping.is_set():  # got as SIGTERM came: not started
                self.events.put({"kind": "cancelled", "key": job["key"]})
            if job is None or self.stopping.is_set():
                break
            task = asyncio.create_task(self._run_job(job))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            task.add_done_callback(lambda _: slots.release())
        await asyncio.gather(*tasks, return_exceptions=True)

    async def _run_job(self, job: dict[str, Any]) -> None:
        started = time.monotonic()
        try:
            event = await self._converse(job)
        except asyncio.CancelledError:
            self.events.put({"kind": "cancelled", "key": job["key"]})
            raise
        event["seconds"] = round(time.monotonic() - started, 3)
        self.events.put(event)

    async def _converse(self, job: dict[str, Any]) -> dict[str, Any]:
        cfg, run = self.config.agent, self.config
        toolsets = tuple(job["toolsets"])
        if toolsets not in self.tools:
            self.tools[toolsets] = resolve_tools(toolsets or None)
        agent = AIAgent(
            model=cfg.model,
            base_url=cfg.base_url,
            max_iterations=cfg.max_iterations,
            enabled_toolsets=job["toolsets"],
            ephemeral_system_prompt=cfg.ephemeral_system_prompt,
            log_prefix_chars=cfg.log_prefix_chars,
            log_prefix=f"[B{job['batch_num']}:P{job['index']}] ",
            providers_allowed=cfg.providers_allowed,
            providers_ignored=cfg.providers_ignored,
            providers_order=cfg.providers_order,
            provider_sort=cfg.provider_sort,
            max_tokens=cfg.max_tokens,
            reasoning_config=cfg.reasoning_config,
            prefill_messages=cfg.prefill_messages,
            api_dialect=cfg.api_dialect,
            verbose_logging=run.verbose,
            run_name=run.run_name,
            chat_model=self.model,
            sandbox_factory_=self.factory,
            tools_=self.tools[toolsets],
        )
        try:
            async with asyncio.timeout(run.prompt_timeout):
                result = await agent.arun_conversation(
                    job["prompt"], task_id=job["key"], image=job["image"], cwd=job["cwd"]
                )
        except TimeoutError:
            return failure_record(
                job, "prompt_timeout", f"no outcome within --prompt_timeout={run.prompt_timeout}s"
            )
        except SandboxError as exc:
            return failure_record(job, "sandbox", str(exc))
        except AgentError as exc:
            return failure_record(job, "exception", f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # noqa: BLE001 - a bug costs one prompt, not the run; reported, not swallowed
            log.error("%s\n%s", exc, traceback.format_exc())
            return failure_record(job, "exception", f"{type(exc).__name__}: {exc}")
        if result["failed"]:
            return failure_record(job, result["error_class"] or "api", result["error"] or "", result["usage"])
        entry, has_reasoning = build_entry(job, result)
        if not has_reasoning and not run.keep_no_reasoning:
            return discard_record(job, "no_reasoning", entry)
        return result_record(job, result, entry)
