"""The Docker backend: one container per prompt, driven only through the docker SDK, so it
works unchanged against Podman's Docker-compatible socket (DOCKER_HOST).

Entering the sandbox checks the image (once per image per process) and starts creating the
container in the background, so that creation overlaps the prompt's first model call; the
first command waits for it. Everything blocks, so the loop uses the sandbox through threads
(`opened_in_thread`). Leaving the block removes the container, also on an
exception or KeyboardInterrupt (the runner turns SIGTERM into an exception, so the same path
runs). A process killed with SIGKILL leaves its container behind: `reap_stale`, called by the
runner at start, removes containers whose owner process is dead.

Commands run as root under bash (sh when the image has no bash) in the sandbox's workdir,
`/workspace` or the prompt's `cwd`, with stdin at EOF; stdout and stderr are interleaved.
Files are read and written by processes inside the container, so paths, symlinks and
permissions mean exactly what they mean to the model's commands.
"""

from __future__ import annotations

import dataclasses
import logging
import posixpath
import threading
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any

from docker.errors import APIError, NotFound

from agent.errors import SandboxError, SandboxPathError
from agent.protocols import ExecResult, SandboxOptions, SandboxProcess, SandboxSpec
from agent.sandboxes import shell_scripts
from agent.sandboxes.blocking import ThreadedSandbox, opened_in_thread
from agent.sandboxes.docker import disk_image
from agent.sandboxes.docker.container_exec import (
    COMMAND_SCRIPT,
    ExecNotStarted,
    ExecOutcome,
    end_streams,
    restart_container,
    run_script,
)
from agent.sandboxes.docker.engine import (
    ENGINE_ERRORS,
    engine_client,
    engine_unavailable_reason,
    ensure_image,
    short_error,
)
from agent.sandboxes.docker.exec_stream import spawned
from agent.sandboxes.docker.lifecycle import ContainerPlan, create_container, reap_stale, remove_sandbox
from agent.sandboxes.shell_scripts import spawn_args

__all__ = ["DockerSandbox", "ensure_image", "open_sandbox", "reap_stale", "unavailable_reason"]

log = logging.getLogger(__name__)
DEFAULT_WORKDIR = "/workspace"
RESTART_NOTICE = (
    "[the sandbox was restarted: no process could be started or killed in it (process limit "
    "reached?); all its processes were stopped, its files are kept]\n"
)


def unavailable_reason(options: SandboxOptions) -> str | None:
    return engine_unavailable_reason(options.default_image)


def open_sandbox(
    spec: SandboxSpec, options: SandboxOptions, *, client: Any = None
) -> AbstractAsyncContextManager[ThreadedSandbox[DockerSandbox]]:
    """The prompt's sandbox, used from the event loop (its engine calls run in threads);
    entering it checks the image, leaving it removes the container."""
    return opened_in_thread(DockerSandbox(client or engine_client(), spec, options))


def _workdir(spec: SandboxSpec) -> str:
    return posixpath.normpath(posixpath.join(DEFAULT_WORKDIR, spec.cwd or "."))


def _image(spec: SandboxSpec, options: SandboxOptions) -> str:
    image = spec.image or options.default_image
    if image is None:  # the run found every row naming its own image: this one does not
        raise SandboxError("the prompt names no image and this run has no default image (--image)")
    return image


class DockerSandbox:
    def __init__(self, client: Any, spec: SandboxSpec, options: SandboxOptions) -> None:
        self._client = client
        self._options = options
        self._plan = ContainerPlan(
            image=_image(spec, options),
            workdir=_workdir(spec),
            sandbox_id=uuid.uuid4().hex,
            spec=spec,
        )
        self._created: Future[str] = Future()
        self._started = False
        self._streams: set[Any] = set()  # connections of the engine calls in flight
        self._interrupts = 0  # how often `interrupt` ran: a call interrupted starts nothing more
        self._lock = threading.Lock()

    @property
    def workdir(self) -> str:
        return self._plan.workdir

    @property
    def name(self) -> str:
        return self._plan.name()

    def __enter__(self) -> DockerSandbox:
        ensure_image(self._client, self._plan.image)
        self._started = True
        threading.Thread(target=self._create, name=f"create-{self.name}", daemon=True).start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(quiet=exc_type is not None)

    def _create(self) -> None:
        try:
            container = create_container(self._client, self._plan, self._options)
            self._created.set_result(str(container.id))
        except BaseException as exc:  # noqa: BLE001 - not swallowed: re-raised to whoever waits
            self._created.set_exception(exc)

    def _container_id(self) -> str:
        try:
            return self._created.result()
        except ENGINE_ERRORS as exc:
            raise SandboxError(
                f"could not start a container from image '{self._plan.image}': {short_error(exc)}"
            ) from exc

    def close(self, *, quiet: bool = False) -> None:
        """Removes the container. With `quiet` (an exception is already propagating) a failure
        is logged instead of raised, so the original exception is not replaced."""
        if not self._started:
            return
        container_id = None if self._created.exception() else self._created.result()  # waits for creation
        try:
            remove_sandbox(self._client, self._plan.sandbox_id, container_id)
        except ENGINE_ERRORS as exc:
            message = f"could not remove container {self.name} ({short_error(exc)}); reap_stale will"
            self._failed(message, exc, quiet)
        finally:
            try:  # after the container: it holds the disk image's mount (then detached lazily)
                disk_image.remove(self._client, self._options.root, self._plan.sandbox_id)
            except (SandboxError, OSError, *ENGINE_ERRORS) as exc:
                message = f"could not remove the disk image of {self.name} ({exc}); reap_stale will"
                self._failed(message, exc, quiet)

    @staticmethod
    def _failed(message: str, exc: BaseException, quiet: bool) -> None:
        if not quiet:
            raise SandboxError(message) from exc
        log.warning("%s", message)

    def _resolve(self, path: str) -> str:
        if not path or "\0" in path:
            raise SandboxPathError(f"invalid path {path!r}")
        return posixpath.normpath(posixpath.join(self.workdir, path))

    def interrupt(self) -> None:
        """Kill every command running now: a restart, as after a fork bomb (files are kept);
        then end the streams of their calls, which an engine may keep open after a restart."""
        with self._lock:
            self._interrupts += 1
            busy = bool(self._streams)
        if busy and self._created.done() and self._created.exception() is None:
            try:
                restart_container(self._client, self._created.result())
            except ENGINE_ERRORS as exc:  # the calls fail on their own if it is gone
                log.warning("could not restart %s to stop its commands: %s", self.name, short_error(exc))
        end_streams(self._streams)

    def _run(self, script: str, args: list[str], *, timeout: float, **options: Any) -> ExecOutcome:
        """`options`: run_script's limit, stdin and prints_pid."""
        interrupts = self._interrupts
        container_id = self._container_id()
        try:
            try:
                self._check(interrupts)
                return self._run_script(container_id, script, args, timeout=timeout, **options)
            except (ExecNotStarted, APIError):
                # No process can start (a fork bomb holds every pid) or the keepalive died
                # (the OOM killer may pick it): a restart kills all processes, keeps the files.
                self._check(interrupts)
                restart_container(self._client, container_id)
                outcome = self._run_script(container_id, script, args, timeout=timeout, **options)
                return dataclasses.replace(outcome, restarted=True)
        except NotFound as exc:
            raise SandboxError(f"the sandbox container {self.name} is gone") from exc
        except (ExecNotStarted, *ENGINE_ERRORS) as exc:
            raise SandboxError(f"cannot run a process in {self.name}: {short_error(exc)}") from exc

    def _run_script(self, container_id: str, script: str, args: list[str], **options: Any) -> ExecOutcome:
        return run_script(self._client, container_id, script, args, streams=self._streams, **options)

    def _check(self, interrupts: int) -> None:
        """Start nothing more for a call that `interrupt` stopped."""
        if self._interrupts != interrupts:
            raise SandboxError(f"the call was interrupted: {self.name} was restarted")

    def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult:
        target = self._resolve(cwd) if cwd else self.workdir
        outcome = self._run(
            COMMAND_SCRIPT,
            [command, target],
            timeout=timeout,
            limit=shell_scripts.OUTPUT_LIMIT,
            prints_pid=True,
        )
        output = (outcome.stderr + outcome.stdout).decode("utf-8", errors="replace")
        if outcome.restarted:
            output = RESTART_NOTICE + output
        if outcome.timed_out:
            return ExecResult(output, 124, timed_out=True)
        return ExecResult(output, outcome.exit_code)

    @asynccontextmanager
    async def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> AsyncIterator[SandboxProcess]:
        """A long-running exec in the container (see exec_stream), entered from the loop."""
        target = self._resolve(cwd) if cwd else self.workdir
        async with spawned(self._client, self._container_id, spawn_args(target, env, argv)) as process:
            yield process

    def read_file(self, path: str) -> bytes:
        target = self._resolve(path)
        cap = shell_scripts.MAX_READ + 1
        outcome = self._run(
            shell_scripts.READ, [target, str(cap)], timeout=shell_scripts.FILE_TIMEOUT, limit=2 * cap
        )
        _raise_for_file(outcome, target, reading=True)
        return shell_scripts.check_read_size(target, outcome.stdout)

    def write_file(self, path: str, data: bytes) -> None:
        target = self._resolve(path)
        outcome = self._run(
            shell_scripts.WRITE, [target], timeout=shell_scripts.FILE_TIMEOUT, limit=65536, stdin=data
        )
        _raise_for_file(outcome, target, reading=False)


def _raise_for_file(outcome: ExecOutcome, path: str, *, reading: bool) -> None:
    shell_scripts.raise_for_file(
        path, outcome.exit_code, outcome.stderr, timed_out=outcome.timed_out, reading=reading
    )
