"""`AIAgent`: one tool-using conversation against an OpenAI-compatible endpoint.

Also a single-query command line:

    python run_agent.py --query="..." --model=... --base_url=... --enabled_toolsets=terminal,file
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from typing import Any

import model_tools
from agent.config.agent_config import DEFAULT_BASE_URL, DEFAULT_MODEL, AgentConfig
from agent.errors import ConfigError, ModelAPIError
from agent.export.samples_file import save_trajectory
from agent.export.sharegpt import to_sharegpt
from agent.llm.client import OpenAIChatModel
from agent.llm.rate_limit import AdaptiveLimiter
from agent.llm.request import build_request
from agent.loop.conversation import Conversation, Outcome, assistant_message, tool_message
from agent.protocols import ChatModel, Sandbox, SandboxFactory, SandboxSpec, ToolCall
from agent.sandboxes import SandboxOptions, sandbox_factory, sandbox_session

log = logging.getLogger("agent")


class AIAgent:
    """Runs conversations; each gets a fresh sandbox, destroyed when the conversation ends."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str = DEFAULT_MODEL,
        max_iterations: int = 90,
        enabled_toolsets: Sequence[str] | None = None,
        disabled_toolsets: Sequence[str] | None = None,
        save_trajectories: bool = False,
        verbose_logging: bool = False,
        quiet_mode: bool = False,
        ephemeral_system_prompt: str | None = None,
        log_prefix_chars: int = 100,
        log_prefix: str = "",
        providers_allowed: Sequence[str] | None = None,
        providers_ignored: Sequence[str] | None = None,
        providers_order: Sequence[str] | None = None,
        provider_sort: str | None = None,
        max_tokens: int | None = None,
        reasoning_config: dict[str, Any] | None = None,
        prefill_messages: Sequence[dict[str, Any]] | None = None,
        *,
        api_dialect: str = "auto",
        request_timeout: float = 600.0,
        max_retries: int = 6,
        sandbox: str | SandboxOptions = "local",
        run_name: str = "adhoc",
        chat_model: ChatModel | None = None,
        sandbox_factory_: SandboxFactory | None = None,
        tools_: model_tools.ResolvedTools | None = None,
        limiter: AdaptiveLimiter | None = None,
        trajectory_dir: str = ".",
    ) -> None:
        self.config = AgentConfig(
            model=model,
            base_url=base_url or DEFAULT_BASE_URL,
            api_key=api_key,
            max_iterations=max_iterations,
            enabled_toolsets=tuple(enabled_toolsets or ()),
            disabled_toolsets=tuple(disabled_toolsets or ()),
            ephemeral_system_prompt=ephemeral_system_prompt,
            prefill_messages=tuple(prefill_messages or ()),
            max_tokens=max_tokens,
            reasoning_config=reasoning_config,
            providers_allowed=tuple(providers_allowed or ()),
            providers_ignored=tuple(providers_ignored or ()),
            providers_order=tuple(providers_order or ()),
            provider_sort=provider_sort,
            api_dialect=api_dialect,
            request_timeout=request_timeout,
            max_retries=max_retries,
            log_prefix_chars=log_prefix_chars,
            log_prefix=log_prefix,
        )
        self.save_trajectories = save_trajectories
        self.trajectory_dir = trajectory_dir
        self.run_name = run_name
        # A batch worker resolves each toolset combination once and passes it in.
        self.tools = tools_ or model_tools.resolve_tools(
            self.config.enabled_toolsets or None, self.config.disabled_toolsets
        )
        options = sandbox if isinstance(sandbox, SandboxOptions) else SandboxOptions(backend=sandbox)
        self._sandbox_factory = sandbox_factory_ or (sandbox_factory(options) if self.tools.specs else None)
        self._chat_model = chat_model
        self._limiter = limiter
        if verbose_logging:
            log.setLevel(logging.DEBUG)
        elif quiet_mode:
            log.setLevel(logging.WARNING)
        for tool, reason in sorted(self.tools.unavailable.items()):
            log.debug("%stool %s not offered: %s", log_prefix, tool, reason)

    def _new_chat_model(self) -> OpenAIChatModel:
        cfg = self.config
        if not cfg.api_key:
            raise ConfigError(
                f"no API key for {cfg.base_url}: pass --api_key or set OPENROUTER_API_KEY / OPENAI_API_KEY"
            )
        return OpenAIChatModel(
            base_url=cfg.base_url,
            api_key=cfg.api_key,
            model=cfg.model,
            timeout=cfg.request_timeout,
            max_retries=cfg.max_retries,
            limiter=self._limiter,
        )

    def run_conversation(
        self,
        user_message: str,
        task_id: str | None = None,
        *,
        image: str | None = None,
        cwd: str | None = None,
    ) -> dict[str, Any]:
        """Synchronous form of `arun_conversation` (its own event loop and HTTP client)."""
        return asyncio.run(self._run_with_own_client(user_message, task_id, image=image, cwd=cwd))

    async def _run_with_own_client(
        self, user_message: str, task_id: str | None, *, image: str | None, cwd: str | None
    ) -> dict[str, Any]:
        if self._chat_model is not None:
            return await self.arun_conversation(user_message, task_id, image=image, cwd=cwd)
        client = self._new_chat_model()
        self._chat_model = client
        try:
            return await self.arun_conversation(user_message, task_id, image=image, cwd=cwd)
        finally:
            self._chat_model = None
            await client.aclose()

    async def arun_conversation(
        self,
        user_message: str,
        task_id: str | None = None,
        *,
        image: str | None = None,
        cwd: str | None = None,
    ) -> dict[str, Any]:
        """Run one conversation to an explicit outcome; the result dict says which."""
        if self._chat_model is None:
            raise ConfigError("arun_conversation needs a chat_model (or use run_conversation)")
        spec = SandboxSpec(self.run_name, task_id or uuid.uuid4().hex[:12], image=image, cwd=cwd)
        if self._sandbox_factory is None:
            result = await self._converse(self._chat_model, user_message, None)
        else:
            async with sandbox_session(self._sandbox_factory, spec) as sandbox:
                result = await self._converse(self._chat_model, user_message, sandbox)
        if self.save_trajectories:
            conversations = to_sharegpt(result["messages"], result["tool_schemas"])
            save_trajectory(
                conversations, self.config.model, result["completed"], directory=self.trajectory_dir
            )
        return result

    async def _converse(self, model: ChatModel, user_message: str, sandbox: Sandbox | None) -> dict[str, Any]:
        """The loop: call the model, run its tool calls, repeat until an outcome."""
        cfg, tools = self.config, self.tools
        schemas = [d["function"] for d in tools.definitions]
        convo = Conversation(cfg.model, toolsets_used=list(tools.toolsets_used), tool_schemas=schemas)
        convo.messages.append({"role": "user", "content": user_message})
        while convo.api_calls < cfg.max_iterations:
            convo.api_calls += 1
            request = build_request(cfg, convo.messages, tools.definitions)
            try:
                reply = await model.complete(request)
            except ModelAPIError as exc:
                # INFO, not WARNING: the outcome is returned, and the caller reports it once.
                log.info("%sAPI failure (%s): %s", cfg.log_prefix, exc.error_class, exc)
                return convo.result(Outcome.API_FAILURE, error=str(exc), error_class=exc.error_class)
            convo.usage += reply.usage
            convo.messages.append(assistant_message(reply))
            if reply.tool_calls:
                convo.messages += await self._run_tools(reply.tool_calls, sandbox)
                continue
            if reply.finish_reason == "length":
                return convo.result(Outcome.TRUNCATED, error="final answer cut at max_tokens")
            if not reply.content.strip():
                return convo.result(Outcome.GAVE_UP, error="the model returned an empty reply")
            return convo.result(Outcome.COMPLETED, final_response=reply.content)
        return convo.result(
            Outcome.MAX_ITERATIONS, error=f"no final answer within {cfg.max_iterations} calls"
        )

    async def _run_tools(self, calls: Sequence[ToolCall], sandbox: Sandbox | None) -> list[dict[str, Any]]:
        """Every tool call of a turn, in order; failures become tool results the model reads."""
        n, prefix = self.config.log_prefix_chars, self.config.log_prefix
        allowed = self.tools.allowed
        results = []
        for call in calls:
            log.debug("%s🔧 %s(%s)", prefix, call.name, call.arguments[:n])
            if sandbox is None:
                content = model_tools.unknown_tool_result(call.name, allowed)
            else:
                content = await model_tools.dispatch(call.name, call.arguments, sandbox, allowed)
            log.debug("%s↳ %s", prefix, content[:n])
            results.append(tool_message(call, content))
        return results


if __name__ == "__main__":
    from agent.cli.agent_cli import main

    main()
