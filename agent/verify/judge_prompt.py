"""What the judge is shown and how its reply is read (`agent.verify.judge` asks).

The judge sees the rubric, the task, the transcript rendered compactly from the typed turns
and the final answer, each in its own tag. The transcript shows the user's turns, the
assistant's replies (not its reasoning: the judge scores what the agent did and answered,
not how it thought), each tool call with its arguments and each tool result, every part
clipped to PART_CHARS, and the whole capped at TRANSCRIPT_CHARS: its first third and last two
thirds are kept, the middle cut with a note saying how much. The final answer is capped at
FINAL_CHARS, the task at TASK_CHARS, so a judge request stays near 10k tokens however long
the attempt was.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.protocols.turns import SystemTurn, ToolTurn, Turn, UserTurn
from agent.protocols.verification import Attempt

TRANSCRIPT_CHARS = 24_000  # the rendered transcript, at most (~6k tokens)
PART_CHARS = 2_000  # one message or tool result in it
ARGUMENT_CHARS = 500  # one tool call's arguments in it
FINAL_CHARS = 8_000
TASK_CHARS = 8_000
RATIONALE_CHARS = 1_000  # of the judge's rationale, kept in the entry

INSTRUCTIONS = (
    "You are a strict grader. You are given a rubric, a task, the transcript of an AI agent's "
    "attempt at the task (its messages, tool calls and tool results) and the agent's final "
    "answer. Judge the attempt against the rubric only. Reply with only one JSON object, no "
    'other text: {"score": <number from 0 to 1>, "passed": <true or false>, "rationale": '
    '"<one or two sentences saying why>"}'
)
# A strict JSON schema of that object, for endpoints that take `response_format`.
RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {
        "name": "verdict",
        "strict": True,
        "schema": {
            "type": "object",
            "properties": {
                "score": {"type": "number"},
                "passed": {"type": "boolean"},
                "rationale": {"type": "string"},
            },
            "required": ["score", "passed", "rationale"],
            "additionalProperties": False,
        },
    },
}
_FENCE = re.compile(r"```(?:json|JSON)?\s*(\{.*?\})\s*```", re.DOTALL)


@dataclass(frozen=True)
class Verdict:
    score: float
    passed: bool
    rationale: str


def clip(text: str, limit: int) -> str:
    """`text`, or its first `limit` characters and a note of how many were left out."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [… {len(text) - limit} more characters]"


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit // 3
    tail = limit - head
    return f"{text[:head]}\n[… {len(text) - limit} characters of the transcript left out …]\n{text[-tail:]}"


def _lines(turn: Turn) -> list[str]:
    if isinstance(turn, SystemTurn) or turn.injected:  # the agent's own notes are not the attempt
        return []
    if isinstance(turn, UserTurn):
        return [f"[user] {clip(turn.text, PART_CHARS)}"]
    if isinstance(turn, ToolTurn):
        label = f"tool {turn.name or '?'}{' (error)' if turn.error else ''}"
        return [f"[{label}] {clip(turn.content, PART_CHARS)}"]
    lines = [f"[assistant] {clip(turn.content, PART_CHARS)}"] if turn.content else []
    lines += [f"[call {c.name}] {clip(c.raw_arguments, ARGUMENT_CHARS)}" for c in turn.calls]
    return lines + (["[the reply was cut at max_tokens]"] if turn.truncated else [])


def render_transcript(turns: Sequence[Turn], limit: int = TRANSCRIPT_CHARS) -> str:
    """The attempt's turns as compact text, at most `limit` characters (plus the cut's note)."""
    return _cut_middle("\n".join(line for turn in turns for line in _lines(turn)), limit)


def judge_messages(attempt: Attempt, rubric: str) -> list[dict[str, Any]]:
    """The judge's request: the instructions, then rubric, task, transcript and final answer."""
    final = attempt.final_response
    ending = f"The attempt ended with outcome {attempt.outcome!r}" + (
        "." if final is not None else " and no final answer (an empty final_answer below)."
    )
    user = (
        f"<rubric>\n{rubric.strip()}\n</rubric>\n\n<task>\n{clip(attempt.prompt, TASK_CHARS)}\n</task>\n\n"
        f"<transcript>\n{render_transcript(attempt.turns)}\n</transcript>\n\n{ending}\n\n"
        f"<final_answer>\n{clip(final or '', FINAL_CHARS)}\n</final_answer>"
    )
    return [{"role": "system", "content": INSTRUCTIONS}, {"role": "user", "content": user}]


def _candidates(content: str) -> list[str]:
    """Where a JSON object may be in a reply: all of it, a ```json fence, the outermost {...}."""
    found = [content.strip(), *_FENCE.findall(content)]
    start, end = content.find("{"), content.rfind("}")
    if 0 <= start < end:
        found.append(content[start : end + 1])
    return found


def _verdict(value: object) -> Verdict:
    """The verdict in a parsed reply; ValueError saying what is wrong with it."""
    if not isinstance(value, dict):
        raise ValueError("the reply is no JSON object")
    score, passed, rationale = value.get("score"), value.get("passed"), value.get("rationale", "")
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise ValueError(f"score is not a number (got {json.dumps(score)[:40]})")
    if not 0.0 <= score <= 1.0:
        raise ValueError(f"score {score:g} is not in [0, 1]")
    if not isinstance(passed, bool):
        raise ValueError(f"passed is not true or false (got {json.dumps(passed)[:40]})")
    if not isinstance(rationale, str):
        rationale = json.dumps(rationale)
    return Verdict(float(score), passed, clip(rationale.strip(), RATIONALE_CHARS))


def parse_verdict(content: str) -> Verdict:
    """The judge's verdict in its reply (JSON, fenced or among prose); ValueError saying why not."""
    problem = "the reply holds no JSON object"
    for candidate in _candidates(content):
        try:
            return _verdict(json.loads(candidate))
        except ValueError as exc:  # json.JSONDecodeError is one; a later candidate may parse
            problem = problem if isinstance(exc, json.JSONDecodeError) else str(exc)
    raise ValueError(problem)
