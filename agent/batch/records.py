"""A job's answer from its conversation: the trajectory entry, and the event that carries it.

A trajectory entry has exactly the spec's top-level fields; what we add (prompt key,
outcome, token usage, the dataset row's own metadata) lives inside `metadata`. The
conversation's fields come from one trajectory format (`agent.export.formats`), rendered
from the structured messages once, with the analysis the entry's statistics come from.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agent.batch.events import Answer, Discarded, Failed, Finished
from agent.batch.jobs import Job
from agent.export.formats import DEFAULT_FORMAT, render
from agent.loop.conversation import ConversationResult
from agent.store.directory import encode_line
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP

_OURS = ("batch_num", "timestamp", "model", "prompt_key", "outcome", "usage")


def answer(job: Job, result: ConversationResult, *, keep_no_reasoning: bool) -> Answer:
    """The event for a conversation that ended: a failure when the endpoint failed for good,
    a discard when no turn has reasoning (unless kept), else the finished entry's line."""
    usage = result.usage.as_dict()
    if result.failed:
        return Failed.of(job, result.error_class or "api", result.error or "", usage)
    entry, has_reasoning = build_entry(job, result, usage)
    if not has_reasoning and not keep_no_reasoning:
        return Discarded(job.key, job.index, "no_reasoning", entry, usage, datetime.now().isoformat())
    try:
        line = encode_line(entry)
    except (ValueError, TypeError) as exc:  # a bug fails its prompt here, not the run in the parent
        return Failed.of(
            job, "exception", f"the entry cannot be written as JSON: {type(exc).__name__}: {exc}", usage
        )
    return Finished(job.key, job.batch_num, job.index, line, result.completed, result.outcome.value, usage)


def build_entry(
    job: Job, result: ConversationResult, usage: dict[str, float], format_name: str = DEFAULT_FORMAT
) -> tuple[dict[str, Any], bool]:
    """(entry, has any reasoning) for a conversation that reached an outcome."""
    rendered = render(
        result.messages, result.tool_schemas, all_tools=TOOL_TO_TOOLSET_MAP, format_name=format_name
    )
    entry = {
        "prompt_index": job.index,
        **rendered.fields,
        "metadata": _metadata(job, result, usage),
        "completed": result.completed,
        "partial": result.partial,
        "api_calls": result.api_calls,
        "toolsets_used": list(result.toolsets_used),
        "tool_stats": rendered.analysis.tool_stats,
        "tool_error_counts": rendered.analysis.tool_errors,
    }
    return entry, rendered.analysis.reasoning.turns_with_reasoning > 0


def _metadata(job: Job, result: ConversationResult, usage: dict[str, float]) -> dict[str, Any]:
    user = {k: v for k, v in job.metadata.items() if k not in _OURS}
    return {
        **user,
        "batch_num": job.batch_num,
        "timestamp": datetime.now().isoformat(),
        "model": result.model,
        "prompt_key": job.key,
        "outcome": result.outcome.value,
        "usage": usage,
    }
