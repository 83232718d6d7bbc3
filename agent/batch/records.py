"""The batch runner's records: a trajectory entry, a discard record, a failure record.

A trajectory entry has exactly the spec's top-level fields; what we add (prompt key,
outcome, token usage, the dataset row's own metadata) lives inside `metadata`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from agent.export.sharegpt import reasoning_stats, to_sharegpt
from agent.export.tool_stats import tool_stats
from agent.store.directory import encode_line
from agent.toolbox.registry import TOOL_TO_TOOLSET_MAP

_OURS = ("batch_num", "timestamp", "model", "prompt_key", "outcome", "usage")


def _metadata(job: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    user = {k: v for k, v in (job.get("metadata") or {}).items() if k not in _OURS}
    return {
        **user,
        "batch_num": job["batch_num"],
        "timestamp": datetime.now().isoformat(),
        "model": result["model"],
        "prompt_key": job["key"],
        "outcome": result["outcome"],
        "usage": result["usage"],
    }


def build_entry(job: dict[str, Any], result: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """(entry, has any reasoning) for a conversation that reached an outcome."""
    messages = result["messages"]
    stats, errors = tool_stats(messages, TOOL_TO_TOOLSET_MAP)
    entry = {
        "prompt_index": job["index"],
        "conversations": to_sharegpt(messages, result["tool_schemas"]),
        "metadata": _metadata(job, result),
        "completed": result["completed"],
        "partial": result["partial"],
        "api_calls": result["api_calls"],
        "toolsets_used": result["toolsets_used"],
        "tool_stats": stats,
        "tool_error_counts": errors,
    }
    return entry, reasoning_stats(messages).turns_with_reasoning > 0


def result_record(job: dict[str, Any], result: dict[str, Any], entry: dict[str, Any]) -> dict[str, Any]:
    """A finished prompt, its entry already one JSONL line: the parent writes the bytes as
    they are and reads only the small fields beside them. An entry that is not JSON (a bug)
    fails its prompt here, not the run in the parent."""
    try:
        line = encode_line(entry)
    except (ValueError, TypeError) as exc:
        message = f"the entry cannot be written as JSON: {type(exc).__name__}: {exc}"
        return failure_record(job, "exception", message, result["usage"])
    return {
        "kind": "result",
        "key": job["key"],
        "batch_num": job["batch_num"],
        "prompt_index": job["index"],
        "line": line,
        "completed": result["completed"],
        "outcome": result["outcome"],
        "usage": result["usage"],
    }


def discard_record(job: dict[str, Any], reason: str, entry: dict[str, Any]) -> dict[str, Any]:
    """A filtered prompt: kept whole (it was paid for), never merged, never re-run."""
    return {
        "kind": "discard",
        "key": job["key"],
        "record": {
            "prompt_key": job["key"],
            "prompt_index": job["index"],
            "reason": reason,
            "timestamp": datetime.now().isoformat(),
            "entry": entry,
        },
    }


def failure_record(
    job: dict[str, Any], error_class: str, message: str, usage: dict[str, int] | None = None
) -> dict[str, Any]:
    """A prompt that did not reach an outcome: retried on resume."""
    return {
        "kind": "failure",
        "key": job["key"],
        "record": {
            "prompt_key": job["key"],
            "prompt_index": job["index"],
            "error_class": error_class,
            "message": message[:2000],
            "timestamp": datetime.now().isoformat(),
            "usage": usage or {},
        },
    }
