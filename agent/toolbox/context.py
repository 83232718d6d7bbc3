"""The context a tool call runs in (`agent.protocols.ToolContext`), one per conversation.

The conversation's sandbox is opened on its first tool call that needs one, so a conversation
that never calls a tool never makes a sandbox (thousands of conversations in flight cost no
sandboxes while they wait for the model). Other per-conversation resources (a browser context,
background processes) are opened the same way and closed with the conversation, last opened
first; worker-wide ones (a browser process) live in the worker's `Resources`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, TypeVar

from agent.errors import FailureClass, ModelAPIError, SandboxError, SandboxStartError
from agent.protocols import (
    ChatModel,
    ChatRequest,
    ModelReply,
    Sandbox,
    SandboxFactory,
    SandboxSpec,
    ToolConfig,
    Usage,
)
from agent.sandboxes import sandbox_session
from agent.sandboxes.blocking import to_the_end

T = TypeVar("T")

_SANDBOX = "\0sandbox"  # a name no tool can choose


class Resources:
    """Named async resources opened on first use and closed together, last opened first."""

    def __init__(self) -> None:
        self._stack = AsyncExitStack()
        self._open: dict[str, Any] = {}
        self._opening: dict[str, asyncio.Lock] = {}

    async def get(self, name: str, opener: Callable[[], AbstractAsyncContextManager[T]]) -> T:
        """The resource `name`, opened by `opener` if this is its first use (once, even when
        several calls ask for it at the same time)."""
        if name not in self._open:
            async with self._opening.setdefault(name, asyncio.Lock()):
                if name not in self._open:
                    self._open[name] = await self._stack.enter_async_context(opener())
        value: T = self._open[name]
        return value

    def __contains__(self, name: str) -> bool:
        return name in self._open

    async def aclose(self) -> None:
        """Close everything opened, to the end even if the caller is cancelled meanwhile."""
        self._open.clear()
        await to_the_end(asyncio.ensure_future(self._stack.aclose()))


class ConversationContext:
    """A `ToolContext` for one conversation; `aclose` ends its resources and sandbox."""

    def __init__(
        self,
        config: ToolConfig,
        model: ChatModel,
        spec: SandboxSpec,
        sandboxes: SandboxFactory | None,
        shared: Resources,
    ) -> None:
        self._config, self._model, self._spec = config, model, spec
        self._sandboxes, self._shared = sandboxes, shared
        self._resources = Resources()
        self.usage = Usage()  # what the tools' own model calls used

    @property
    def config(self) -> ToolConfig:
        return self._config

    @property
    def model(self) -> ChatModel:
        return self._model

    @property
    def prompt_key(self) -> str:
        return self._spec.prompt_key

    @property
    def sandbox_opened(self) -> bool:
        return _SANDBOX in self._resources

    async def sandbox(self) -> Sandbox:
        """The conversation's sandbox, made on first use. A sandbox that cannot be made fails
        the prompt (`SandboxStartError`), it is not a tool result the model reads."""
        factory = self._sandboxes
        if factory is None:
            raise SandboxStartError("this conversation has no sandbox")
        try:
            return await self._resources.get(_SANDBOX, lambda: sandbox_session(factory, self._spec))
        except SandboxStartError:
            raise
        except (SandboxError, OSError) as exc:
            raise SandboxStartError(str(exc)) from exc

    async def resource(self, name: str, opener: Callable[[], AbstractAsyncContextManager[T]]) -> T:
        return await self._resources.get(name, opener)

    async def shared(self, name: str, opener: Callable[[], AbstractAsyncContextManager[T]]) -> T:
        return await self._shared.get(name, opener)

    def add_usage(self, usage: Usage) -> None:
        self.usage += usage

    async def aclose(self) -> None:
        await self._resources.aclose()


class _NoModel:
    """The chat model of a context outside a conversation: a tool that needs one fails."""

    async def complete(self, request: ChatRequest) -> ModelReply:
        raise ModelAPIError(
            FailureClass.BAD_REQUEST, "no chat model here: the tool was called outside a conversation"
        )


class SandboxContext(ConversationContext):
    """A `ToolContext` over a sandbox opened elsewhere (scripts calling tools directly, tests);
    `aclose` closes what the tools opened, not the sandbox."""

    def __init__(self, sandbox: Sandbox, config: ToolConfig | None = None, model: ChatModel | None = None):
        spec = SandboxSpec(run_name="direct", prompt_key="direct")
        super().__init__(config or ToolConfig(), model or _NoModel(), spec, None, Resources())
        self._fixed = sandbox

    async def sandbox(self) -> Sandbox:
        return self._fixed

    async def aclose(self) -> None:
        await super().aclose()
        await self._shared.aclose()
