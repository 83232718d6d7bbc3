"""The merged token sidecar (--capture_tokens): `tokens.jsonl`, line i holding the tokens of
`trajectories.jsonl`'s entry i, written in the same pass as the merge (`agent.store.merge`).

Each batch file `batch_N.jsonl` has its sidecar `tokens_N.jsonl`: one `TokenRecord` line per
attempt the parent wrote (a result's or a discard's, appended before it). An entry names its
line by `metadata.tokens.id`; the first line with that id in its shard's sidecar is copied as
read. A line no merged entry names is never merged: a discarded or withdrawn entry's, or an
attempt whose result never reached the disk (killed in between; it ran again with a fresh id).
While a shard is merged only its sidecar's index (id → offset, length) is held, never a line
more than the one being copied, nor the whole run.

Every merged entry gets exactly one line, so the two files can be read in lockstep: an entry
without `metadata.tokens` gets an empty record (`tokens_id` null, no turns), and one naming an
id its sidecar does not hold gets an empty record marked `"missing": true` (counted: the run
then ends non-zero). A run whose directory has no sidecar captured nothing: no tokens.jsonl
(a stale one, left by an earlier merge, is removed: it would describe another output).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from agent.store.durable import atomic_write, fsync_directory
from agent.store.jsonl import parse_object
from agent.store.layout import TOKENS_FILE, TOKENS_GLOB, TRAJECTORIES_FILE

_ID_PREFIX = b'{"tokens_id":"'  # how TokenRecord.line() starts: the id read without parsing the ids
_ID_LENGTH = 32


@dataclass
class TokenCounts:
    """The `token_capture` section of statistics.json, counted from the merged lines."""

    trajectories: int = 0  # merged entries with token data
    turns: int = 0  # assistant turns with tokens
    prompt_ids: int = 0  # prompt ids kept (each turn's new part: the sequence is stored once)
    completion_ids: int = 0
    with_drift: int = 0  # trajectories whose tokens drifted (a turn's prompt broke the sequence)
    missing: int = 0  # merged entries naming a tokens id their shard's sidecar does not hold
    without: int = 0  # merged entries naming no tokens id (no turn captured)
    withheld: int = 0  # merged entries whose ids were not kept: their text held a secret
    bytes: int = 0  # size of tokens.jsonl


def token_capture(api: str | None, counts: Mapping[str, Any] | None, previous: Any) -> dict[str, Any] | None:
    """--capture_tokens: the counts of the merged sidecar and the token API they came from
    (`api`; None: the one the earlier statistics.json `previous` names, for a merge without a
    probe such as --rescore), for statistics.json's `tokens` section; None when the run has no
    token data (its statistics stay as they were)."""
    if counts is None:
        return None
    if api is None and isinstance(previous, Mapping):
        recorded = previous.get("tokens")
        api = recorded.get("api") if isinstance(recorded, Mapping) else None
    return {"api": api, **counts}


def tokens_output(output: str) -> str:
    """The merged sidecar's name beside `output` (never one that `TOKENS_GLOB` matches)."""
    return TOKENS_FILE if output == TRAJECTORIES_FILE else f"{output.removesuffix('.jsonl')}.tokens.jsonl"


def sidecar_of(batch_path: Path) -> Path:
    """`tokens_N.jsonl` beside `batch_N.jsonl` (any other batch file name: the same suffix)."""
    return batch_path.with_name("tokens_" + batch_path.name.removeprefix("batch_"))


def captured(directory: Path) -> bool:
    """Whether the run has any token sidecar (it captured tokens at some point)."""
    return any(path.is_file() for path in directory.glob(TOKENS_GLOB))


class TokenMerge:
    """Writes the merged sidecar to `out`, one line per merged entry (`add`), shard by shard
    (`shard` before the shard's entries). `close` closes the open sidecar."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.counts = TokenCounts()
        self._handle: BinaryIO | None = None
        self._index: dict[str, tuple[int, int]] = {}

    def shard(self, batch_path: Path) -> None:
        """Index the sidecar of `batch_path`: the first line of each id."""
        self.close()
        self._index = {}
        try:
            self._handle = sidecar_of(batch_path).open("rb")
        except FileNotFoundError:
            return
        offset = 0
        for raw in self._handle:
            tokens_id = _id_of(raw)
            if tokens_id is not None:
                self._index.setdefault(tokens_id, (offset, len(raw)))
            offset += len(raw)

    def add(self, key: str, entry: dict[str, Any]) -> None:
        """Write the line of the merged entry `entry` (prompt key `key`)."""
        tokens_id = _named_id(entry)
        record = self._record(tokens_id) if tokens_id is not None else None
        if record is None:
            self.counts.without += tokens_id is None
            line = _empty(key, entry, tokens_id)
        else:
            line, parsed = record
            self._count(parsed)
        self.out.write(line)
        self.counts.bytes += len(line)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def _record(self, tokens_id: str) -> tuple[bytes, dict[str, Any]] | None:
        """The sidecar line of `tokens_id` and its parsed form; None when it has none (missing)."""
        where = self._index.get(tokens_id)
        parsed = None
        if where is not None and self._handle is not None:
            self._handle.seek(where[0])
            line = self._handle.read(where[1]).rstrip(b"\r\n")
            parsed = parse_object(line)
        if (
            parsed is None
            or parsed.get("tokens_id") != tokens_id
            or not isinstance(parsed.get("turns"), list)
        ):
            self.counts.missing += 1
            return None
        return line + b"\n", parsed

    def _count(self, parsed: dict[str, Any]) -> None:
        counts = self.counts
        if parsed.get("withheld") is True:
            counts.withheld += 1
            return
        counts.trajectories += 1
        counts.with_drift += parsed.get("drift") is not None
        for turn in parsed["turns"]:
            counts.turns += 1
            if isinstance(turn, dict):
                counts.prompt_ids += _length(turn.get("prompt_ids"))
                counts.completion_ids += _length(turn.get("completion_ids"))


def _id_of(raw: bytes) -> str | None:
    """The id of a sidecar line, read from its first bytes (the whole line is parsed only when
    it is merged); any other shape is parsed."""
    end = len(_ID_PREFIX) + _ID_LENGTH
    if raw.startswith(_ID_PREFIX) and raw[end : end + 1] == b'"':
        return raw[len(_ID_PREFIX) : end].decode("ascii", "replace")
    parsed = parse_object(raw.rstrip(b"\r\n")) if raw.strip() else None
    value = parsed.get("tokens_id") if parsed is not None else None
    return value if isinstance(value, str) else None


def _named_id(entry: dict[str, Any]) -> str | None:
    metadata = entry.get("metadata")
    tokens = metadata.get("tokens") if isinstance(metadata, dict) else None
    value = tokens.get("id") if isinstance(tokens, dict) else None
    return value if isinstance(value, str) else None


def _empty(key: str, entry: dict[str, Any], tokens_id: str | None) -> bytes:
    """The line of an entry without token data: no turns; `missing` when it named an id."""
    record: dict[str, Any] = {
        "tokens_id": tokens_id,
        "prompt_key": key,
        "prompt_index": entry.get("prompt_index"),
        "turns": [],
        "drift": None,
    }
    if tokens_id is not None:
        record["missing"] = True
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def _length(value: Any) -> int:
    return len(value) if isinstance(value, list) else 0


def open_sidecar(stack: ExitStack, directory: Path, output: str) -> TokenMerge | None:
    """The merged sidecar's writer when the run has sidecars; else None, a stale one removed."""
    target = directory / tokens_output(output)
    if not captured(directory):
        if target.exists():
            target.unlink()
            fsync_directory(directory)
        return None
    sidecar = TokenMerge(stack.enter_context(atomic_write(target)))
    stack.callback(sidecar.close)
    return sidecar


def withheld_line(line: bytes) -> bytes:
    """A sidecar line without its ids (`"withheld": true`, no turns): its entry held a secret."""
    record = json.loads(line)
    kept = {k: record.get(k) for k in ("tokens_id", "prompt_key", "prompt_index")}
    withheld = {**kept, "turns": [], "drift": None, "withheld": True}
    return json.dumps(withheld, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"
