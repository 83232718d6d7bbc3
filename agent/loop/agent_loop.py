"""The agent loop: one conversation from the user's message to an outcome.

Call the model, run the tool calls it made (in the conversation's sandbox), repeat until it
answers, fails or runs out of turns. The loop takes the agent's configuration whole, a chat
model, the resolved tools and, when tools need one, a sandbox factory (the sandbox is made on
the first tool call that needs it: `agent.toolbox.context`); it returns a frozen
`ConversationResult`. Errors the model should see (unknown tools, bad arguments, failing
tools) come back from dispatch as tool results; an endpoint that fails for good ends the
conversation as `api_failure`.

The history the loop keeps is the one every export reads: reasoning separated from content
(marked `SEPARATED`, so no export splits the content again), and every call of a turn with an
id of its own (a repeated id is renamed, the model's id kept in `RENAMED_CALL_IDS`), so each
call's result answers that call only.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from agent.config.agent_config import AgentConfig
from agent.errors import ModelAPIError
from agent.export.analysis import FORCED_REASONING, RENAMED_CALL_IDS, SEPARATED
from agent.llm.request import build_request
from agent.loop.conversation import ConversationResult, Outcome, Prompt
from agent.protocols import ChatModel, ModelReply, SandboxFactory, ToolCall, Usage
from agent.toolbox.context import ConversationContext, Resources
from agent.toolbox.dispatch import dispatch
from agent.toolbox.registry import ResolvedTools

log = logging.getLogger("agent.loop")


async def converse(
    config: AgentConfig,
    model: ChatModel,
    tools: ResolvedTools,
    prompt: Prompt,
    sandboxes: SandboxFactory | None = None,
    shared: Resources | None = None,
) -> ConversationResult:
    """Run one conversation to an explicit outcome. With `sandboxes`, the conversation gets a
    fresh sandbox (`prompt.sandbox`) on its first tool call that needs one (before the first
    model call when the prompt names its own image, which may be missing); it and every other
    resource the tools opened are closed when the conversation ends, however it ends. `shared`:
    the worker's resources (default: the conversation's own)."""
    own = Resources() if shared is None else None
    context = ConversationContext(
        config.tools, model, prompt.sandbox, sandboxes, shared or own or Resources()
    )
    try:
        if sandboxes is not None and prompt.sandbox.image and tools.specs:
            # A prompt's own image may be missing: find out before a token is spent on it.
            await context.sandbox()
        return await _Loop(config, model, tools, prompt.log_prefix, context).run(prompt.text)
    finally:
        await context.aclose()
        if own is not None:
            await own.aclose()


def assistant_message(
    reply: ModelReply, calls: Sequence[ToolCall], renamed: dict[str, str]
) -> dict[str, Any]:
    """The assistant turn as kept in history (reasoning separate from content), with `calls`,
    the reply's calls as `unique_ids` made them."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "reasoning": reply.reasoning}
    message[SEPARATED] = True
    if calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in calls
        ]
    if renamed:
        message[RENAMED_CALL_IDS] = renamed
    if reply.reasoning_details:
        message["reasoning_details"] = reply.reasoning_details
    if reply.reasoning_forced and reply.reasoning:
        message[FORCED_REASONING] = True
    if reply.finish_reason == "length":
        message["truncated"] = True
    return message


def unique_ids(calls: Sequence[ToolCall]) -> tuple[tuple[ToolCall, ...], dict[str, str]]:
    """The calls of one turn with ids unique within it, and `{new id: the model's id}`: a
    repeated id becomes `<id>~<n>` (n from 2, past the ids taken), so results cannot mix."""
    taken = {call.id for call in calls}
    seen: set[str] = set()
    unique, renamed = [], {}
    for call in calls:
        if call.id in seen:
            n = 2
            while f"{call.id}~{n}" in taken:
                n += 1
            renamed[f"{call.id}~{n}"] = call.id
            call = dataclasses.replace(call, id=f"{call.id}~{n}")
            taken.add(call.id)
        seen.add(call.id)
        unique.append(call)
    return tuple(unique), renamed


def tool_message(call: ToolCall, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


class _Loop:
    """One conversation's mutable state while it runs; `end` freezes it into the result."""

    def __init__(
        self,
        config: AgentConfig,
        model: ChatModel,
        tools: ResolvedTools,
        log_prefix: str,
        context: ConversationContext,
    ) -> None:
        self.config, self.model, self.tools, self.prefix = config, model, tools, log_prefix
        self.context = context
        self.messages: list[dict[str, Any]] = []
        self.api_calls = 0
        self.usage = Usage()

    async def run(self, text: str) -> ConversationResult:
        """The loop: call the model, run its tool calls, repeat until an outcome."""
        cfg, definitions = self.config, self.tools.definitions
        self.messages.append({"role": "user", "content": text})
        while self.api_calls < cfg.max_iterations:
            self.api_calls += 1
            try:
                reply = await self.model.complete(build_request(cfg, self.messages, definitions))
            except ModelAPIError as exc:
                # INFO, not WARNING: the outcome is returned, and the caller reports it once.
                log.info("%sAPI failure (%s): %s", self.prefix, exc.error_class, exc)
                return self.end(Outcome.API_FAILURE, error=str(exc), error_class=exc.error_class)
            self.usage += reply.usage
            calls, renamed = unique_ids(reply.tool_calls)
            self.messages.append(assistant_message(reply, calls, renamed))
            if not calls:
                return self.answered(reply)
            self.messages += await self.run_tools(calls)
        return self.end(Outcome.MAX_ITERATIONS, error=f"no final answer within {cfg.max_iterations} calls")

    def answered(self, reply: ModelReply) -> ConversationResult:
        """The outcome of a reply without tool calls."""
        if reply.finish_reason == "length":
            return self.end(Outcome.TRUNCATED, error="final answer cut at max_tokens")
        if not reply.content.strip():
            return self.end(Outcome.GAVE_UP, error="the model returned an empty reply")
        return self.end(Outcome.COMPLETED, final_response=reply.content)

    async def run_tools(self, calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
        """Every tool call of a turn, in order; failures become tool results the model reads."""
        n, prefix, allowed = self.config.log_prefix_chars, self.prefix, self.tools.allowed
        results = []
        for call in calls:
            log.debug("%s🔧 %s(%s)", prefix, call.name, call.arguments[:n])
            content = await dispatch(call.name, call.arguments, self.context, allowed)
            log.debug("%s↳ %s", prefix, content[:n])
            results.append(tool_message(call, content))
        return results

    def end(
        self,
        outcome: Outcome,
        *,
        final_response: str | None = None,
        error: str | None = None,
        error_class: str | None = None,
    ) -> ConversationResult:
        return ConversationResult(
            outcome=outcome,
            messages=self.messages,
            api_calls=self.api_calls,
            usage=self.usage + self.context.usage,
            model=self.config.model,
            toolsets_used=tuple(self.tools.toolsets_used),
            tool_schemas=tuple(d["function"] for d in self.tools.definitions),
            final_response=final_response,
            error=error,
            error_class=error_class,
        )
