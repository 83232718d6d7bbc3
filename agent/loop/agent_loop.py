"""The agent loop: one conversation from the user's message to an outcome.

Call the model, run the tool calls it made (in the conversation's sandbox), repeat until it
answers, fails or runs out of turns. The loop takes the agent's configuration whole, a chat
model, the resolved tools and, when tools need one, a sandbox factory (the sandbox is made on
the first tool call that needs it: `agent.toolbox.context`); it returns a frozen
`ConversationResult`. Errors the model should see (unknown tools, bad arguments, failing
tools) come back from dispatch as tool results; an endpoint that fails for good ends the
conversation as `api_failure`.

The history the loop keeps is the one every export reads, as typed turns
(`agent.protocols.turns`): reasoning separated from content (so no export splits the content
again), every call of a turn with an id of its own and its arguments parsed (a repeated id is
renamed, the model's id kept on the call), so each call's result answers that call only, and
each result with whether it reports a failure. The request renders them as OpenAI messages.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence

from agent.config.agent_config import AgentConfig
from agent.errors import FailureClass, ModelAPIError
from agent.llm.request import build_request
from agent.loop.conversation import ConversationResult, Outcome, Prompt
from agent.loop.token_trace import TokenTrace
from agent.protocols import ChatModel, ModelReply, SandboxFactory, ToolCall, Usage
from agent.protocols.tokens import TurnTokens
from agent.protocols.turns import (
    AssistantTurn,
    ToolTurn,
    Turn,
    UserTurn,
    to_openai_messages,
    tool_turn,
    turn_call,
)
from agent.toolbox.context import ConversationContext, Resources
from agent.toolbox.dispatch import dispatch
from agent.toolbox.registry import ResolvedTools

log = logging.getLogger("agent.loop")

# What runs once the conversation reached its outcome, while its sandbox and resources are
# still open (the batch worker verifies the attempt there); the loop knows nothing of it.
AfterConversation = Callable[[ConversationResult, ConversationContext], Awaitable[None]]


async def converse(
    config: AgentConfig,
    model: ChatModel,
    tools: ResolvedTools,
    prompt: Prompt,
    sandboxes: SandboxFactory | None = None,
    shared: Resources | None = None,
    after: AfterConversation | None = None,
) -> ConversationResult:
    """Run one conversation to an explicit outcome. With `sandboxes`, the conversation gets a
    fresh sandbox (`prompt.sandbox`) on its first tool call that needs one (before the first
    model call when the prompt names its own image, which may be missing); it and every other
    resource the tools opened are closed when the conversation ends, however it ends. `shared`:
    the worker's resources (default: the conversation's own). `after` is awaited with the
    result before the sandbox closes (not when the conversation raised)."""
    own = Resources() if shared is None else None
    context = ConversationContext(
        config.tools, model, prompt.sandbox, sandboxes, shared or own or Resources()
    )
    try:
        if sandboxes is not None and prompt.sandbox.image and tools.specs:
            # A prompt's own image may be missing: find out before a token is spent on it.
            await context.sandbox()
        result = await _Loop(config, model, tools, prompt.log_prefix, context).run(prompt.text)
        if after is not None:
            await after(result, context)
        return result
    finally:
        await context.aclose()
        if own is not None:
            await own.aclose()


def assistant_turn(
    reply: ModelReply,
    calls: Sequence[ToolCall],
    renamed: Mapping[str, str],
    tokens: TurnTokens | None = None,
) -> AssistantTurn:
    """The assistant turn as kept in history (reasoning separate from content), with `calls`,
    the reply's calls as `unique_ids` made them (`renamed`: their ids the model sent), and
    `tokens`, the reply's as the conversation's `TokenTrace` placed them (--capture_tokens)."""
    return AssistantTurn(
        reply.content,
        reply.reasoning,
        tuple(turn_call(c.id, c.name, c.arguments, renamed.get(c.id)) for c in calls),
        reasoning_forced=reply.reasoning_forced and bool(reply.reasoning),
        reasoning_details=tuple(reply.reasoning_details) if reply.reasoning_details else None,
        truncated=reply.finish_reason == "length",
        tokens=tokens,
    )


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
        self.turns: list[Turn] = []
        self.api_calls = 0
        self.usage = Usage()
        self.tokens: TokenTrace | None = None  # made by the first reply with ids (--capture_tokens)

    async def run(self, text: str) -> ConversationResult:
        """The loop: call the model, run its tool calls, repeat until an outcome."""
        cfg, definitions = self.config, self.tools.definitions
        self.turns.append(UserTurn(text))
        while self.api_calls < cfg.max_iterations:
            self.api_calls += 1
            try:
                reply = await self.model.complete(
                    build_request(cfg, to_openai_messages(self.turns), definitions)
                )
            except ModelAPIError as exc:
                # INFO, not WARNING: the outcome is returned, and the caller reports it once.
                log.info("%sAPI failure (%s): %s", self.prefix, exc.error_class, exc)
                return self.end(Outcome.API_FAILURE, error=str(exc), error_class=exc.error_class)
            self.usage += reply.usage
            calls, renamed = unique_ids(reply.tool_calls)
            tokens = None if reply.tokens is None else self.traced().add(reply.tokens)
            self.turns.append(assistant_turn(reply, calls, renamed, tokens))
            if not calls:
                return self.answered(reply)
            # With --capture_tokens the reply holds its whole prompt's ids (as long as the
            # conversation so far): not kept while the tools and the next call run.
            del reply
            self.turns += await self.run_tools(calls)
        limit = f"{cfg.max_iterations} model call" + ("" if cfg.max_iterations == 1 else "s")
        return self.end(Outcome.MAX_ITERATIONS, error=f"no final answer within {limit} (raise --max_turns)")

    def traced(self) -> TokenTrace:
        if self.tokens is None:
            self.tokens = TokenTrace()
        return self.tokens

    def answered(self, reply: ModelReply) -> ConversationResult:
        """The outcome of a reply without tool calls."""
        if reply.finish_reason == "length":
            return self.end(Outcome.TRUNCATED, error="final answer cut at max_tokens")
        if not reply.content.strip():
            return self.end(Outcome.GAVE_UP, error="the model returned an empty reply")
        return self.end(Outcome.COMPLETED, final_response=reply.content)

    async def run_tools(self, calls: Sequence[ToolCall]) -> list[ToolTurn]:
        """Every tool call of a turn, in order; failures become tool results the model reads."""
        n, prefix, allowed = self.config.log_prefix_chars, self.prefix, self.tools.allowed
        results = []
        for call in calls:
            log.debug("%s🔧 %s(%s)", prefix, call.name, call.arguments[:n])
            content = await dispatch(call.name, call.arguments, self.context, allowed)
            log.debug("%s↳ %s", prefix, content[:n])
            results.append(tool_turn(call.id, call.name, content))
        return results

    def end(
        self,
        outcome: Outcome,
        *,
        final_response: str | None = None,
        error: str | None = None,
        error_class: FailureClass | None = None,
    ) -> ConversationResult:
        return ConversationResult(
            outcome=outcome,
            turns=tuple(self.turns),
            api_calls=self.api_calls,
            usage=self.usage + self.context.usage,
            model=self.config.model,
            toolsets_used=tuple(self.tools.toolsets_used),
            tool_schemas=tuple(d["function"] for d in self.tools.definitions),
            final_response=final_response,
            error=error,
            error_class=error_class,
            token_drift=None if self.tokens is None else self.tokens.drift,
        )
