"""The export formats of a finished run, by name: the file each writes and how a row is made.

Every export is one file in the run's `export/` directory, written by streaming the entries
of `trajectories.jsonl` one at a time (`agent.export.run_export`), so memory does not grow
with the run:
- `sharegpt` → `export/sharegpt.jsonl`: `conversations` and the fixed columns of
  `agent.export.columns` (`trajectories.jsonl` itself keeps the entries as the spec has them,
  whose free metadata can defeat a schema);
- `openai` → `export/openai.jsonl`: one line per entry, `messages` + `tools` (a JSON string,
  see `openai_messages.tools_json`) and the fixed columns of `agent.export.columns`;
  both JSON Lines files open with the rows that type every column (`agent.export.typed_head`);
- `parquet` → `export/trajectories.parquet`: the entries' fixed columns and `conversations`
  with the schema declared in `agent.export.columns`, written a row group at a time;
- `rl` → `export/rl.parquet`: one row per trajectory with its token ids, loss mask and
  logprobs, from `tokens.jsonl` read in lockstep (`agent.export.rl_export`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from agent.common.unicode_text import encodable_json, unencodable
from agent.config.export_config import EXPORT_FORMATS
from agent.export.columns import ENTRY_SCHEMA, OPENAI_SCHEMA, entry_columns
from agent.export.openai_messages import from_sharegpt, tools_json
from agent.export.rl_export import RL_FILE, RLWriter
from agent.export.typed_head import TypedHead

__all__ = ["EXPORTS", "EXPORT_DIR", "HUB_EXPORTS", "ROW_GROUP", "ExportFormat", "ExportInput", "RowWriter"]

EXPORT_DIR = "export"
ROW_GROUP = 1000  # entries per Parquet row group: what one export holds in memory at once


class RowWriter(Protocol):
    def write(self, entry: Mapping[str, Any], suspect: bool = False) -> int:
        """Write the entry's row; when `suspect` (its line may hold a lone surrogate), first
        replace each character UTF-8 cannot carry with U+FFFD: how many were."""

    def close(self) -> None: ...

    def discard(self) -> None:
        """The export failed: release what the writer holds, write nothing more."""


@dataclass(frozen=True)
class ExportInput:
    """What a writer may read besides the entries it is handed."""

    run_dir: Path  # the run exported (the `rl` export reads its tokens.jsonl)
    inline: bool = False  # reasoning inline in the content (`openai`)


@dataclass(frozen=True)
class ExportFormat:
    name: str
    file_name: str
    opens: Callable[[BinaryIO, ExportInput], RowWriter]  # (the file, what it reads) → its writer


def _turns(entry: Mapping[str, Any]) -> list[dict[str, str]]:
    """The entry's ShareGPT turns, each exactly `{from, value}`."""
    turns = entry.get("conversations") or []
    kept = (t for t in turns if isinstance(t, Mapping))
    return [{"from": str(t.get("from")), "value": str(t.get("value"))} for t in kept]


def sharegpt_row(entry: Mapping[str, Any], inline: bool) -> dict[str, Any]:
    """The `sharegpt` row of an entry: its turns and the fixed columns."""
    return {"conversations": _turns(entry), **entry_columns(entry)}


def openai_row(entry: Mapping[str, Any], inline: bool) -> dict[str, Any]:
    """The `openai` row of an entry: messages, tools (a JSON string) and the fixed columns."""
    conversation = from_sharegpt(entry.get("conversations") or [], inline=inline)
    row = {"messages": conversation.messages, "tools": tools_json(conversation.tools)}
    row.update(entry_columns(entry))
    return row


Row = Callable[[Mapping[str, Any], bool], dict[str, Any]]


def _encodable(row: dict[str, Any], suspect: bool) -> tuple[dict[str, Any], int]:
    """The row with what UTF-8 cannot carry replaced, and how many characters were. A row, not
    its entry: a tool call's arguments are JSON inside a turn's text, so `\\ud800` there
    becomes a lone surrogate only when the row parses them."""
    count = unencodable(row) if suspect else 0
    return (encodable_json(row), count) if count else (row, 0)


class _Lines:
    """One JSON line per entry; the first rows type every column of `schema` (`typed_head`)."""

    def __init__(self, handle: BinaryIO, inline: bool, row: Row, schema: pa.Schema) -> None:
        self.handle, self.inline, self.row = handle, inline, row
        self.head = TypedHead(schema)

    def write(self, entry: Mapping[str, Any], suspect: bool = False) -> int:
        row, replaced = _encodable(self.row(entry, self.inline), suspect)
        line = (json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n").encode()
        self.handle.write(line)
        self.head.wrote(row, len(line))
        return replaced

    def close(self) -> None:
        self.head.finish(self.handle)

    def discard(self) -> None:
        return None


class _Parquet:
    """Rows with a fixed schema, a row group at a time."""

    def __init__(self, handle: BinaryIO, inline: bool, row: Row, schema: pa.Schema) -> None:
        self.writer = pq.ParquetWriter(handle, schema, compression="zstd")
        self.inline, self.row, self.schema = inline, row, schema
        self.rows: list[dict[str, Any]] = []

    def write(self, entry: Mapping[str, Any], suspect: bool = False) -> int:
        row, replaced = _encodable(self.row(entry, self.inline), suspect)
        self.rows.append(row)
        if len(self.rows) >= ROW_GROUP:
            self.flush()
        return replaced

    def flush(self) -> None:
        if self.rows:
            self.writer.write_table(pa.Table.from_pylist(self.rows, schema=self.schema))
            self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()

    def discard(self) -> None:
        self.rows = []  # the row group that failed, or that nobody will read
        self.writer.close()  # to the temp file, which the failed export removes


def _lines(row: Row, schema: pa.Schema) -> Callable[[BinaryIO, ExportInput], RowWriter]:
    return lambda handle, given: _Lines(handle, given.inline, row, schema)


def _parquet(row: Row, schema: pa.Schema) -> Callable[[BinaryIO, ExportInput], RowWriter]:
    return lambda handle, given: _Parquet(handle, given.inline, row, schema)


def _rl(handle: BinaryIO, given: ExportInput) -> RowWriter:
    return RLWriter(handle, given.run_dir)


EXPORTS: dict[str, ExportFormat] = {
    fmt.name: fmt
    for fmt in (
        ExportFormat("parquet", "trajectories.parquet", _parquet(sharegpt_row, ENTRY_SCHEMA)),
        ExportFormat("openai", "openai.jsonl", _lines(openai_row, OPENAI_SCHEMA)),
        ExportFormat("sharegpt", "sharegpt.jsonl", _lines(sharegpt_row, ENTRY_SCHEMA)),
        ExportFormat("rl", RL_FILE, _rl),
    )
}
assert tuple(EXPORTS) == EXPORT_FORMATS, "the export formats and the --export choices disagree"
# What a Hub dataset gets: every config as Parquet, since `datasets` picks ONE builder for all the
# configs of a repository (from the first one's files), so JSON Lines beside Parquet cannot load.
HUB_EXPORTS: dict[str, ExportFormat] = {
    fmt.name: fmt
    for fmt in (
        ExportFormat("openai", "openai.parquet", _parquet(openai_row, OPENAI_SCHEMA)),
        ExportFormat("sharegpt", "sharegpt.parquet", _parquet(sharegpt_row, ENTRY_SCHEMA)),
    )
}
