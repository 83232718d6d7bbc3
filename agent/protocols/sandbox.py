"""The sandbox seam: where a prompt's commands and files live, and the backends that make them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

DEFAULT_IMAGE = "python:3.11-slim"


@dataclass(frozen=True)
class SandboxOptions:
    """What a run asks of its sandboxes, whatever the backend."""

    backend: str = "auto"  # the strongest usable here (agent.sandboxes.choice); resolved at the CLI edge
    # None: no prompt of the run uses it (every row names its own image), so it is not checked
    default_image: str | None = DEFAULT_IMAGE
    network: bool = False  # containers: allow network access
    # all of a sandbox's processes together (a memory cgroup; else an rlimit per process); 0: none.
    # Under a root runner bwrap's files live in a tmpfs charged to it too: room for disk_mb.
    memory_mb: int = 2048
    cpus: float = 1.0
    pids_limit: int = 256
    disk_mb: int = 1024  # what a prompt may write in its sandbox (bwrap under root, docker)
    command_timeout: float = 180.0  # default per-command timeout of the terminal tool
    root: str | None = None  # local/bwrap: where per-prompt directories are made (default: tmp)


@dataclass(frozen=True)
class ExecResult:
    output: str  # stdout and stderr interleaved, decoded as UTF-8 with replacement
    exit_code: int
    timed_out: bool = False


@dataclass(frozen=True)
class SandboxSpec:
    """What one prompt asks of its sandbox."""

    run_name: str  # namespaces the sandbox: never shared across runs
    prompt_key: str  # namespaces the sandbox: never shared across prompts
    image: str | None = None  # container image (docker backend); ignored by local
    cwd: str | None = None  # working directory inside the sandbox


class SandboxProcess(Protocol):
    """A long-running process inside a sandbox whose stdin and stdout are byte streams (a stdio
    MCP server): started by `Sandbox.spawn`, killed with everything it started when its block is
    left or its sandbox closes. Used from the event loop, which it never blocks; a cancelled call
    leaves the process running (only leaving the block stops it) and the block's exit prompt,
    though a cancelled `send` may have written part of its data. Its stderr is read all along
    (a program that writes much of it never blocks), keeping only the tail."""

    async def send(self, data: bytes) -> None:
        """Write all of `data` to its stdin, waiting while the pipe is full (a program that
        does not read blocks the caller only); `agent.errors.SandboxError` once it has ended."""
        ...

    async def receive(self) -> bytes:
        """The next bytes of its stdout (at most 64 KiB), b"" at end of file."""
        ...

    @property
    def returncode(self) -> int | None:
        """None while it runs; its exit status (128+N for signal N) once ended."""
        ...

    def stderr_tail(self) -> str:
        """The last few KiB of its stderr (decoded with replacement), for error messages."""
        ...


@runtime_checkable
class Sandbox(Protocol):
    """A prompt's private environment, used from the event loop. Paths are in the sandbox's
    own namespace; relative paths are relative to `workdir`. A path the sandbox cannot reach
    raises `agent.errors.SandboxPathError`; a missing file raises FileNotFoundError. A
    cancelled call leaves nothing of its own running (its command is killed)."""

    @property
    def workdir(self) -> str: ...

    async def exec(self, command: str, *, timeout: float, cwd: str | None = None) -> ExecResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes) -> None: ...

    def spawn(
        self, argv: Sequence[str], *, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> AbstractAsyncContextManager[SandboxProcess]:
        """Start `argv` (resolved on the sandbox's PATH, `env`'s PATH if it sets one) inside the
        sandbox, with the sandbox's own environment (never the runner's) plus `env`, in `cwd`
        (a path in the sandbox's view, relative to `workdir`, its default; it must exist);
        held to the sandbox's limits like `exec`'s commands. Leaving the block kills it and
        everything it started (in a container: its session and process group; what left both
        dies when the sandbox closes); closing the sandbox kills it too. A program that cannot
        start, or a missing `cwd`, raises `agent.errors.SandboxError` saying why."""
        ...


# Opening a sandbox: `async with factory(spec) as sandbox: ...`; leaving the block destroys it.
# A cancellation while the manager opens the sandbox leaves nothing behind.
SandboxFactory = Callable[[SandboxSpec], AbstractAsyncContextManager[Sandbox]]
# A factory for a whole run in one process, valid inside its block: `async with pool(options,
# run_name) as factory`; it may reuse what it can between prompts (never their files or processes).
SandboxPool = Callable[[SandboxOptions, str], AbstractAsyncContextManager[SandboxFactory]]


@dataclass(frozen=True)
class RowProblem:
    """Why a dataset row's sandbox fields do not suit a backend: a bad line, since running it
    anyway would run the prompt elsewhere than it asks."""

    field: Literal["image", "cwd"]  # "image": the dataset layer names the field it came from
    reason: str


class SandboxBackend(Protocol):
    """A kind of sandbox (`agent.sandboxes.local`, `bwrap`, `docker`): each backend package
    exposes one `BACKEND` of this type, which `agent.sandboxes` loads by name when asked.
    Everything the batch layer must know of a backend is asked here, never by its name."""

    def unavailable_reason(self, options: SandboxOptions) -> str | None:
        """Why this backend cannot run here (with how to fix it); None when it can."""
        ...

    def open(self, spec: SandboxSpec, options: SandboxOptions) -> AbstractAsyncContextManager[Sandbox]:
        """A fresh sandbox for `spec`, destroyed when its block is left."""
        ...

    def reap_stale(self, options: SandboxOptions) -> list[str]:
        """Remove what dead processes (kill -9, the OOM killer) left behind; returns what went."""
        ...

    @property
    def pool(self) -> SandboxPool | None:
        """The backend's factory for a whole run in one process, or None: a fresh `open` each time."""
        ...

    def row_problem(self, image: str | None, cwd: str | None) -> RowProblem | None:
        """What is wrong with a row asking for `image` (a registry image, or an absolute path
        to an unpacked root filesystem) and `cwd` (a path inside the sandbox, its '..' already
        refused by the dataset's own rule) here; None when the row can run as it asks."""
        ...

    def run_options(self, options: SandboxOptions, *, default_image_used: bool) -> SandboxOptions:
        """`options` for a run whose rows are known (checked at its start, before
        `unavailable_reason`): `default_image_used` says whether some row names no image."""
        ...

    def prepare_worker(self, options: SandboxOptions) -> None:
        """Set up a worker process, once, before its event loop and any sandbox. What a worker
        keeps open for its sandboxes is the `pool`'s, closed with its block."""
        ...
