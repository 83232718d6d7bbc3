"""The tool seam: a tool's spec and handler, its family, the run's tool settings, and the
context a handler runs in (the conversation's sandbox, opened on first use; the run's chat
model; resources that live as long as the conversation or the worker)."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, TypeVar

from agent.protocols.mcp import McpServer
from agent.protocols.model import ChatModel, Usage
from agent.protocols.sandbox import Sandbox

JSON = Any  # a value json.loads can return
T = TypeVar("T")


WEB_BACKENDS = ("auto", "corpus", "firecrawl", "tavily", "exa")


@dataclass(frozen=True)
class ToolConfig:
    """What a run's tools need beyond the sandbox: backends, models, keys, the network policy.
    Built once at the CLI edge; keys are never in `public()` (nor in repr)."""

    web_backend: str = "auto"  # auto: the corpus when --web_corpus is set, else the first keyed API
    web_corpus: str | None = None  # folder of .md/.html/.txt: the offline web backend
    web_keys: Mapping[str, str] = field(default_factory=dict, repr=False)  # backend -> API key
    web_api_url: str | None = None  # the search API's base URL (self-hosted Firecrawl); None: the vendor's
    web_corpus_url: str | None = None  # where the corpus is served: search results link there
    allow_hosts: tuple[str, ...] = ()  # hosts/networks reachable despite the private-range policy
    vision_model: str | None = None  # None: the run's model
    images_unsupported: str | None = None  # why the run's model reads no images; None: it may
    image_model: str | None = None  # None: the image backend's default
    image_output_unsupported: str | None = None  # why the run's endpoint makes no images; None: it may
    image_api: str = "auto"  # IMAGE_APIS: images endpoint, image-output chat, or by endpoint
    moa_models: tuple[str, ...] = ()  # reference models of mixture_of_agents
    moa_aggregator: str | None = None  # None: the run's model
    browser_executable: str | None = None  # None: chromium found on PATH
    artifacts_dir: str | None = None  # where tools save files (images): set to the run directory
    mcp_servers: tuple[McpServer, ...] = ()  # --mcp_config's servers, their tools listed at the start
    tools_modules: tuple[str, ...] = ()  # --tools_module: modules declaring a user's toolsets
    # Where the CLI edge found --tools_module's dotted names: on every worker's sys.path too
    # (a Ray actor starts elsewhere). Not a flag: resolved from the modules.
    tools_path: tuple[str, ...] = ()

    def public(self) -> dict[str, Any]:
        """The settings as JSON-able data without keys (saved with a run)."""
        data = asdict(self)
        data["web_keys"] = sorted(self.web_keys)  # which backends have a key, never the key
        data["mcp_servers"] = [server.public() for server in self.mcp_servers]
        return data


class ToolContext(Protocol):
    """What a tool handler may use while one conversation runs."""

    @property
    def config(self) -> ToolConfig: ...

    @property
    def model(
        self,
    ) -> ChatModel: ...  # the run's model client: its limiter, retries; ChatRequest.model picks another

    @property
    def prompt_key(self) -> str: ...

    async def sandbox(self) -> Sandbox: ...  # the conversation's sandbox, opened on first use

    async def resource(self, name: str, opener: Callable[[], AbstractAsyncContextManager[T]]) -> T:
        """The conversation's resource `name`, opened by `opener` on first use and closed when the
        conversation ends (last opened, first closed; before its sandbox if opened after it)."""
        ...

    async def shared(self, name: str, opener: Callable[[], AbstractAsyncContextManager[T]]) -> T:
        """The worker's resource `name` (a browser process), shared by its conversations and
        closed when the worker ends."""
        ...

    def add_usage(self, usage: Usage) -> None: ...  # model calls a tool made count in the prompt's usage


# A tool's implementation, run on the event loop; a blocking one is wrapped once where its
# family declares it (`agent.sandboxes.blocking.blocking_tool`).
ToolHandler = Callable[[Mapping[str, Any], ToolContext], Awaitable[JSON]]

# A tool that needs only the conversation's sandbox; `on_sandbox` makes it a ToolHandler.
SandboxTool = Callable[[Mapping[str, Any], Sandbox], Awaitable[JSON]]


def on_sandbox(tool: SandboxTool) -> ToolHandler:
    """`tool` as a handler: it gets the conversation's sandbox (made on this first use)."""

    @functools.wraps(tool)
    async def handler(args: Mapping[str, Any], context: ToolContext) -> JSON:
        return await tool(args, await context.sandbox())

    return handler


# Why a tool cannot run with these settings on this machine (None: it can).
Availability = Callable[[ToolConfig], str | None]


def sees_images(config: ToolConfig) -> str | None:
    """The availability of a tool that shows the model an image."""
    return config.images_unsupported


def always(config: ToolConfig) -> str | None:
    return None


@dataclass(frozen=True)
class ToolSpec:
    """A tool the model may call. `schema` is the OpenAI function schema
    ({"name", "description", "parameters"}); the handler returns a JSON-able value
    (or a string) that becomes the tool message's content."""

    name: str
    schema: dict[str, Any]
    handler: ToolHandler | None  # None: no backend implemented here
    available: Availability = always


@dataclass(frozen=True)
class Toolset:
    """A tool family as its `tools/` module declares it: the toolset's name, what it is for, and
    its tools. The registry (`agent.toolbox.registry`) derives every table from these."""

    name: str
    description: str
    tools: tuple[ToolSpec, ...]
    # What runs the tools with these settings, for --list_distributions ("corpus /data/docs",
    # "firecrawl"); asked only when the toolset is available. None: "available".
    backend: Callable[[ToolConfig], str] | None = None

    @property
    def tool_names(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.tools)

    @classmethod
    def declared_only(
        cls, name: str, description: str, reason: str, schemas: tuple[dict[str, Any], ...]
    ) -> Toolset:
        """A toolset whose tools have no backend here yet: declared so that every machine has
        the same tool map (and `tool_stats` schema), never offered to the model."""
        specs = tuple(ToolSpec(s["name"], s, None, available=lambda _config: reason) for s in schemas)
        return cls(name, description, specs)
