"""A conversation's values: what the loop is asked (`Prompt`) and how it ended (`ConversationResult`).

Outcomes are explicit and mutually exclusive. `completed` means a final answer was given;
`partial` means the model stopped short (turn limit, truncation, empty reply, wall-clock
limit) with usable turns; `failed` means the endpoint failed for good — never presented as
a finished conversation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from agent.errors import FailureClass
from agent.protocols import SandboxSpec, Usage
from agent.protocols.tokens import TokenDrift
from agent.protocols.turns import Turn


class Outcome(StrEnum):
    COMPLETED = "completed"  # a final answer (also on the last allowed call)
    MAX_ITERATIONS = "max_iterations"  # the turn limit ran out before a final answer
    GAVE_UP = "gave_up"  # the model replied with nothing: no answer, no tool call
    TRUNCATED = "truncated"  # the final answer was cut at max_tokens
    TIMEOUT = "timeout"  # the per-prompt wall-clock limit ran out
    API_FAILURE = "api_failure"  # the endpoint failed for good (auth, 4xx, retries exhausted)


PARTIAL = {Outcome.MAX_ITERATIONS, Outcome.GAVE_UP, Outcome.TRUNCATED, Outcome.TIMEOUT}


@dataclass(frozen=True)
class Prompt:
    """One conversation's own inputs: the user message, its sandbox and its log prefix."""

    text: str
    sandbox: SandboxSpec  # run name, prompt key, image, working directory
    log_prefix: str = ""


@dataclass(frozen=True)
class ConversationResult:
    """How one conversation ended, with its whole history (typed turns, `agent.protocols.turns`)."""

    outcome: Outcome
    turns: tuple[Turn, ...]
    api_calls: int
    usage: Usage
    model: str
    toolsets_used: tuple[str, ...]
    tool_schemas: tuple[Mapping[str, Any], ...]  # JSON Schemas of the functions offered, in offer order
    final_response: str | None = None
    error: str | None = None
    error_class: FailureClass | None = None
    token_drift: TokenDrift | None = None  # the first turn whose prompt broke the sequence

    @property
    def completed(self) -> bool:
        return self.outcome is Outcome.COMPLETED

    @property
    def partial(self) -> bool:
        return self.outcome in PARTIAL

    @property
    def failed(self) -> bool:
        return self.outcome is Outcome.API_FAILURE
