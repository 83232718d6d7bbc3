"""The project's few seams, declared once: the chat model, the sandbox, the tool and the run store.

Each seam takes a value and returns a value, so a test double is a short function or class.
The value types that cross the seams live here too.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

JSON = Any  # a value json.loads can return

# ---------------------------------------------------------------- chat model


@dataclass(frozen=True)
class Prices:
    """A price table in USD per million tokens; `cached` prices the cached prompt tokens (at
    the input price when None)."""

    input: float
    output: float
    cached: float | None = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the provider served from its cache
    cost_usd: float | None = None  # what the calls cost, when known (provider-reported or priced)

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: Usage) -> Usage:
        costs = [c for c in (self.cost_usd, other.cost_usd) if c is not None]
        return Usage(
            self.prompt_tokens + other.prompt_tokens,
            self.completion_tokens + other.completion_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
            self.cached_tokens + other.cached_tokens,
            sum(costs) if costs else None,
        )

    def priced(self, prices: Prices | None) -> Usage:
        """With `cost_usd` from the price table, unless the provider already said what it cost."""
        if self.cost_usd is not None or prices is None:
            return self
        cached = min(self.cached_tokens, self.prompt_tokens)
        cached_price = prices.input if prices.cached is None else prices.cached
        micro = (
            (self.prompt_tokens - cached) * prices.input
            + cached * cached_price
            + self.completion_tokens * prices.output
        )
        return replace(self, cost_usd=micro / 1_000_000)

    def as_dict(self) -> dict[str, float]:
        """The usage of `metadata.usage`; cached tokens and cost only when there are any, so
        runs without them keep their bytes."""
        data: dict[str, float] = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "total_tokens": self.total_tokens,
        }
        if self.cached_tokens:
            data["cached_tokens"] = self.cached_tokens
        if self.cost_usd is not None:
            data["cost_usd"] = round(self.cost_usd, 10)
        return data


@dataclass(frozen=True)
class ChatRequest:
    """One chat-completions call, already in API shape (system, prefill and history included)."""

    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    max_tokens: int | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    extra_params: dict[str, Any] = field(default_factory=dict)  # top-level params, e.g. reasoning_effort


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # the raw JSON string the model emitted


@dataclass(frozen=True)
class ModelReply:
    """The assistant turn as we keep it: reasoning separated from content, tool calls raw."""

    content: str
    reasoning: str | None
    tool_calls: tuple[ToolCall, ...]
    finish_reason: str
    usage: Usage
    reasoning_details: list[Any] | None = None


class ChatModel(Protocol):
    """An LLM endpoint. Raises `agent.errors.ModelAPIError` when the call fails for good."""

    async def complete(self, request: ChatRequest) -> ModelReply: ...


# ---------------------------------------------------------------- sandbox

DEFAULT_IMAGE = "python:3.11-slim"


@dataclass(frozen=True)
class SandboxOptions:
    """What a run asks of its sandboxes, whatever the backend."""

    backend: str = "auto"  # the strongest usable here (agent.sandboxes.choice); resolved at the CLI edge
    default_image: str = DEFAULT_IMAGE
    network: bool = False  # containers: allow network access
    memory_mb: int = 1024
    cpus: float = 1.0
    pids_limit: int = 256
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


# Opening a sandbox: `async with factory(spec) as sandbox: ...`; leaving the block destroys it.
# A cancellation while the manager opens the sandbox leaves nothing behind.
SandboxFactory = Callable[[SandboxSpec], AbstractAsyncContextManager[Sandbox]]
# A factory for a whole run in one process, valid inside its block: `async with pool(options,
# run_name) as factory`; it may reuse what it can between prompts (never their files or processes).
SandboxPool = Callable[[SandboxOptions, str], AbstractAsyncContextManager[SandboxFactory]]


class SandboxBackend(Protocol):
    """A kind of sandbox (`agent.sandboxes.local`, `bwrap`, `docker`): each backend package
    exposes one `BACKEND` of this type, which `agent.sandboxes` loads by name when asked."""

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


# ---------------------------------------------------------------- tools

# A tool's implementation, run on the event loop; a blocking one is wrapped once where its
# family declares it (`agent.sandboxes.blocking.blocking_tool`).
ToolHandler = Callable[[Mapping[str, Any], Sandbox], Awaitable[JSON]]


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call. `schema` is the OpenAI function schema
    ({"name", "description", "parameters"}); the handler returns a JSON-able value
    (or a string) that becomes the tool message's content."""

    name: str
    schema: dict[str, Any]
    handler: ToolHandler | None  # None: no backend implemented here
    available: Callable[[], str | None] = lambda: None  # returns why unavailable, None when usable


@dataclass(frozen=True)
class Toolset:
    """A tool family as its `tools/` module declares it: the toolset's name, what it is for, and
    its tools. The registry (`agent.toolbox.registry`) derives every table from these."""

    name: str
    description: str
    tools: tuple[ToolSpec, ...]

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.tools)

    @classmethod
    def declared_only(
        cls, name: str, description: str, reason: str, schemas: tuple[dict[str, Any], ...]
    ) -> Toolset:
        """A toolset whose tools have no backend here yet: declared so that every machine has
        the same tool map (and `tool_stats` schema), never offered to the model."""
        specs = tuple(ToolSpec(s["name"], s, None, available=lambda: reason) for s in schemas)
        return cls(name, description, specs)


# ---------------------------------------------------------------- run store


class StoredKeys(Protocol):
    """Which prompts a run directory already answered (what a resume skips or retries)."""

    @property
    def done(self) -> set[str]: ...  # keys with a result line

    @property
    def discarded(self) -> set[str]: ...  # keys with a discard record

    @property
    def failures(self) -> dict[str, int]: ...  # key -> failed attempts, for keys not done or discarded

    @property
    def indices(self) -> dict[str, int]: ...  # key -> the prompt_index it was first written with


class RunStore(Protocol):
    """Where a batch run's results go, as `BatchRun` uses it. `lock` then `repair` before the
    first append; `close` releases the lock. Appended lines survive kill -9 once the call
    returns; `write_json` replaces a file atomically after syncing every line appended before
    it, and `merge` writes the merged trajectories (calling `on_entry` for each) and returns
    its report, an object whose attributes are the report's JSON fields."""

    def lock(self) -> None: ...

    def close(self) -> None: ...

    def repair(self) -> list[str]: ...  # notes on what was repaired, for the log

    def scan(self) -> StoredKeys: ...

    def append_result(self, batch_num: int, entry: Mapping[str, Any] | bytes) -> None: ...

    def append_discard(self, record: Mapping[str, Any]) -> None: ...

    def append_failure(self, record: Mapping[str, Any]) -> None: ...

    def write_json(self, name: str, data: Any) -> None: ...

    def merge(
        self, valid_tools: Collection[str], on_entry: Callable[[dict[str, Any]], None] | None = None
    ) -> object: ...


# An async function that answers one chat-completions request body (server side of the seam).
Responder = Callable[[dict[str, Any]], Awaitable[dict[str, Any]]]
