"""The export formats of a finished run, by name: the file each writes and how a row is made.

Every export is one file in the run's `export/` directory, written by streaming the entries
of `trajectories.jsonl` one at a time (`agent.export.run_export`), so memory does not grow
with the run:
- `sharegpt` → `export/sharegpt.jsonl`: `conversations` and the fixed columns of
  `agent.export.columns` (`trajectories.jsonl` itself keeps the entries as the spec has them,
  whose free metadata can defeat a schema);
- `openai` → `export/openai.jsonl`: one line per entry, `messages` + `tools` (a JSON string,
  see `openai_messages.tools_json`) and the fixed columns of `agent.export.columns`;
- `parquet` → `export/trajectories.parquet`: the entries' fixed columns and `conversations`
  with the schema declared in `agent.export.columns`, written a row group at a time.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from agent.errors import ConfigError
from agent.export.columns import ENTRY_SCHEMA, entry_columns
from agent.export.openai_messages import from_sharegpt, tools_json

__all__ = ["EXPORTS", "EXPORT_DIR", "ROW_GROUP", "ExportFormat", "RowWriter", "check_exports"]

EXPORT_DIR = "export"
ROW_GROUP = 2000  # entries per Parquet row group: what one export holds in memory at once


class RowWriter(Protocol):
    def write(self, entry: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ExportFormat:
    name: str
    file_name: str
    opens: Callable[[BinaryIO, bool], RowWriter]  # (the file, reasoning inline) → its writer
    description: str


def _turns(entry: Mapping[str, Any]) -> list[dict[str, str]]:
    """The entry's ShareGPT turns, each exactly `{from, value}`."""
    turns = entry.get("conversations") or []
    kept = (t for t in turns if isinstance(t, Mapping))
    return [{"from": str(t.get("from")), "value": str(t.get("value"))} for t in kept]


class _ShareGPT:
    """One ShareGPT row per entry: `conversations` and the fixed columns (`sharegpt`)."""

    def __init__(self, handle: BinaryIO, inline: bool) -> None:
        self.handle = handle

    def write(self, entry: Mapping[str, Any]) -> None:
        row = {"conversations": _turns(entry), **entry_columns(entry)}
        self.handle.write((json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode())

    def close(self) -> None:
        return None


class _OpenAI:
    """One OpenAI-messages row per entry (`openai`)."""

    def __init__(self, handle: BinaryIO, inline: bool) -> None:
        self.handle, self.inline = handle, inline

    def write(self, entry: Mapping[str, Any]) -> None:
        conversation = from_sharegpt(entry.get("conversations") or [], inline=self.inline)
        row = {"messages": conversation.messages, "tools": tools_json(conversation.tools)}
        row.update(entry_columns(entry))
        self.handle.write((json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode())

    def close(self) -> None:
        return None


class _Parquet:
    """The entries with the fixed schema, a row group at a time (`parquet`)."""

    def __init__(self, handle: BinaryIO, inline: bool) -> None:
        self.writer = pq.ParquetWriter(handle, ENTRY_SCHEMA, compression="zstd")
        self.rows: list[dict[str, Any]] = []

    def write(self, entry: Mapping[str, Any]) -> None:
        self.rows.append({**entry_columns(entry), "conversations": _turns(entry)})
        if len(self.rows) >= ROW_GROUP:
            self.flush()

    def flush(self) -> None:
        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=ENTRY_SCHEMA))
            self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()


EXPORTS: dict[str, ExportFormat] = {
    fmt.name: fmt
    for fmt in (
        ExportFormat("parquet", "trajectories.parquet", _Parquet, "the entries, fixed Arrow schema"),
        ExportFormat("openai", "openai.jsonl", _OpenAI, "OpenAI chat messages + tools (TRL's SFT shape)"),
        ExportFormat("sharegpt", "sharegpt.jsonl", _ShareGPT, "ShareGPT conversations + the fixed columns"),
    )
}


def check_exports(names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` when each is an export format (in the order given, each once); else ConfigError."""
    unknown = [name for name in names if name not in EXPORTS]
    if unknown:
        raise ConfigError(f"--export: unknown format {unknown[0]!r}; valid: {', '.join(EXPORTS)}")
    return tuple(dict.fromkeys(names))
