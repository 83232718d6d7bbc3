"""The fixed columns every export row has, and the Arrow schema of the Parquet export.

`datasets` and Arrow need one schema for a whole file; a trajectory entry's free parts do not
have one: the dataset row's own metadata (any keys, any types), `tool_stats` keyed by tool
name, `usage` whose cost and cached tokens appear only when there are any. So an export row
flattens an entry into fixed columns: our metadata fields each their own column (the reward
columns `prompt_id`, `sample_index`, `reward`, `passed` and the checks' record `verification`
null where absent), `usage` a
struct with every counter, `tool_stats` a list of `{name, count, success, failure, nonzero_exit}` (a tool's
`tool_error_counts` is its `failure`), and the dataset row's own metadata one JSON string
(`metadata`), whose keys differ from dataset to dataset. The schema is declared once, here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pyarrow as pa

__all__ = ["ENTRY_SCHEMA", "OPENAI_SCHEMA", "OURS", "entry_columns", "verified"]

# The keys `agent.batch.records` adds to an entry's metadata that have columns of their own; the
# rest go into `metadata` with the dataset row's, `toolsets_unavailable` among them.
OURS = (
    *("batch_num", "timestamp", "model", "prompt_key", "outcome", "usage", "discard_reasons"),
    *("prompt_id", "sample_index"),
    "tokens",  # --capture_tokens: the entry's line in tokens.jsonl (the `rl` export reads it)
)
VERIFIED = ("reward", "verification")  # ours only when a check applied (else a row's own `reward` stays)
_USAGE_INTS = ("prompt_tokens", "completion_tokens", "reasoning_tokens", "total_tokens", "cached_tokens")

USAGE = pa.struct([*(pa.field(name, pa.int64()) for name in _USAGE_INTS), pa.field("cost_usd", pa.float64())])
TOOL_STATS = pa.list_(
    pa.struct(
        [
            pa.field("name", pa.string()),
            pa.field("count", pa.int64()),
            pa.field("success", pa.int64()),
            pa.field("failure", pa.int64()),
            pa.field("nonzero_exit", pa.int64()),  # null for a tool that runs no command
        ]
    )
)
METADATA_FIELDS = [
    pa.field("prompt_index", pa.int64()),
    pa.field("prompt_key", pa.string()),
    pa.field("model", pa.string()),
    pa.field("outcome", pa.string()),
    pa.field("completed", pa.bool_()),
    pa.field("partial", pa.bool_()),
    pa.field("api_calls", pa.int64()),
    pa.field("batch_num", pa.int64()),
    pa.field("timestamp", pa.string()),
    pa.field("toolsets_used", pa.list_(pa.string())),
    pa.field("usage", USAGE),
    pa.field("tool_stats", TOOL_STATS),
    pa.field("discard_reasons", pa.list_(pa.string())),
    pa.field("prompt_id", pa.string()),  # the same for every sample of a prompt
    pa.field("sample_index", pa.int64()),
    pa.field("reward", pa.float64()),  # null: no check applied, or none scored
    pa.field("passed", pa.bool_()),  # null: no check applied, or a check could not decide
    pa.field("verification", pa.string()),  # the checks' record, as JSON (null: none applied)
    pa.field("metadata", pa.string()),  # the dataset row's own metadata, as JSON
]
CONVERSATIONS = pa.list_(pa.struct([pa.field("from", pa.string()), pa.field("value", pa.string())]))
ENTRY_SCHEMA = pa.schema([*METADATA_FIELDS, pa.field("conversations", CONVERSATIONS)])
_FUNCTION = pa.struct([pa.field("name", pa.string()), pa.field("arguments", pa.string())])
_CALL = pa.struct(
    [pa.field("id", pa.string()), pa.field("type", pa.string()), pa.field("function", _FUNCTION)]
)
MESSAGES = pa.list_(
    pa.struct(
        [
            pa.field("role", pa.string()),
            pa.field("content", pa.string()),
            pa.field("reasoning_content", pa.string()),
            pa.field("tool_calls", pa.list_(_CALL)),
            pa.field("tool_call_id", pa.string()),
            pa.field("name", pa.string()),
        ]
    )
)
# The `openai` rows as Parquet (what the Hub gets): `tools` stays a JSON string (see openai_messages).
OPENAI_SCHEMA = pa.schema([pa.field("messages", MESSAGES), pa.field("tools", pa.string()), *METADATA_FIELDS])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _usage(usage: Any) -> dict[str, Any]:
    usage = usage if isinstance(usage, Mapping) else {}
    counts: dict[str, Any] = {name: _int(usage.get(name)) or 0 for name in _USAGE_INTS}
    cost = usage.get("cost_usd")
    priced = isinstance(cost, (int, float)) and not isinstance(cost, bool)
    counts["cost_usd"] = float(cost) if priced else None
    return counts


def _tool_stats(stats: Any) -> list[dict[str, Any]]:
    if not isinstance(stats, Mapping):
        return []
    return [
        {
            "name": str(name),
            **{k: _int(c.get(k)) or 0 for k in ("count", "success", "failure")},
            "nonzero_exit": _int(c.get("nonzero_exit")),
        }
        for name, c in stats.items()
        if isinstance(c, Mapping)
    ]


def _strings(value: Any) -> list[str]:
    return [str(v) for v in value] if isinstance(value, list) else []


def verified(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """`prompt_id`, `sample_index`, `reward`, `passed` and `verification` (null where absent)."""
    record = metadata.get("verification")
    record = record if isinstance(record, Mapping) else None
    reward = metadata.get("reward") if record is not None else None
    passed = record.get("passed") if record is not None else None
    prompt_id = metadata.get("prompt_id")
    return {
        "prompt_id": prompt_id if isinstance(prompt_id, str) else None,
        "sample_index": _int(metadata.get("sample_index")),
        "reward": float(reward) if isinstance(reward, int | float) and not isinstance(reward, bool) else None,
        "passed": passed if isinstance(passed, bool) else None,
        "verification": json.dumps(record, ensure_ascii=False) if record is not None else None,
    }


def _own(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """The dataset row's own metadata: what is not ours."""
    ours = (*OURS, *VERIFIED) if isinstance(metadata.get("verification"), Mapping) else OURS
    return {k: v for k, v in metadata.items() if k not in ours}


def entry_columns(entry: Mapping[str, Any]) -> dict[str, Any]:
    """The fixed columns (`METADATA_FIELDS`, in order) of one trajectory entry."""
    metadata = entry.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    text = {name: metadata.get(name) for name in ("prompt_key", "model", "outcome", "timestamp")}
    return {
        "prompt_index": _int(entry.get("prompt_index")),
        "prompt_key": text["prompt_key"] if isinstance(text["prompt_key"], str) else None,
        "model": str(text["model"] or entry.get("model") or "") or None,
        "outcome": text["outcome"] if isinstance(text["outcome"], str) else None,
        "completed": bool(entry.get("completed")),
        "partial": bool(entry.get("partial")),
        "api_calls": _int(entry.get("api_calls")),
        "batch_num": _int(metadata.get("batch_num")),
        "timestamp": str(text["timestamp"] or entry.get("timestamp") or "") or None,
        "toolsets_used": _strings(entry.get("toolsets_used")),
        "usage": _usage(metadata.get("usage")),
        "tool_stats": _tool_stats(entry.get("tool_stats")),
        "discard_reasons": _strings(metadata.get("discard_reasons")),
        **verified(metadata),
        "metadata": json.dumps(_own(metadata), ensure_ascii=False),
    }
