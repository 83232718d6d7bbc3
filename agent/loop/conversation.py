"""A conversation's record: its messages, how it ended, and the result dict callers get.

Outcomes are explicit and mutually exclusive. `completed` means a final answer was given;
`partial` means the model stopped short (turn limit, truncation, empty reply, wall-clock
limit) with usable turns; `failed` means the endpoint failed for good — never presented as
a finished conversation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agent.protocols import ModelReply, ToolCall, Usage


class Outcome(StrEnum):
    COMPLETED = "completed"  # a final answer (also on the last allowed call)
    MAX_ITERATIONS = "max_iterations"  # the turn limit ran out before a final answer
    GAVE_UP = "gave_up"  # the model replied with nothing: no answer, no tool call
    TRUNCATED = "truncated"  # the final answer was cut at max_tokens
    TIMEOUT = "timeout"  # the per-prompt wall-clock limit ran out
    API_FAILURE = "api_failure"  # the endpoint failed for good (auth, 4xx, retries exhausted)


PARTIAL = {Outcome.MAX_ITERATIONS, Outcome.GAVE_UP, Outcome.TRUNCATED, Outcome.TIMEOUT}


def assistant_message(reply: ModelReply) -> dict[str, Any]:
    """The assistant turn as kept in history (reasoning separate from content)."""
    message: dict[str, Any] = {"role": "assistant", "content": reply.content, "reasoning": reply.reasoning}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    if reply.reasoning_details:
        message["reasoning_details"] = reply.reasoning_details
    if reply.finish_reason == "length":
        message["truncated"] = True
    return message


def tool_message(call: ToolCall, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}


@dataclass
class Conversation:
    """Mutable while the loop runs; `result()` freezes it into the caller's dict."""

    model: str
    messages: list[dict[str, Any]] = field(default_factory=list)
    api_calls: int = 0
    usage: Usage = field(default_factory=Usage)
    toolsets_used: list[str] = field(default_factory=list)
    tool_schemas: list[dict[str, Any]] = field(default_factory=list)

    def result(
        self,
        outcome: Outcome,
        *,
        final_response: str | None = None,
        error: str | None = None,
        error_class: str | None = None,
    ) -> dict[str, Any]:
        usage = self.usage.as_dict()
        return {
            "outcome": outcome.value,
            "completed": outcome is Outcome.COMPLETED,
            "partial": outcome in PARTIAL,
            "failed": outcome is Outcome.API_FAILURE,
            "error": error,
            "error_class": error_class,
            "final_response": final_response,
            "messages": self.messages,
            "api_calls": self.api_calls,
            "model": self.model,
            "toolsets_used": list(self.toolsets_used),
            "tool_schemas": list(self.tool_schemas),
            "usage": usage,
            "input_tokens": usage["prompt_tokens"],
            "output_tokens": usage["completion_tokens"],
            "total_tokens": usage["total_tokens"],
        }
