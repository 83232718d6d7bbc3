"""A shard's line records saved beside it (`.batch_N.jsonl.records`), so that a resume loads the lines
an earlier invocation appended instead of reading them (issue 26: a resume finds its place in
seconds at a million prompts; reading a line's head costs tens of µs, loading its record ~1).

The file is append-only, one block per save: a header (magic, a CRC of the rest, the shard's
inode, the shard's bytes the block's rows cover, the row count, the keys' length and how many
name tuples the rows may refer to), the rows as `Shard` packs them and their keys. The table of
name tuples (labels, tools) is the run's, one file (`.records_names.json`) rewritten when it
grows, before any block that needs it; every invocation starts from it, so an id means the same
tuple in every block. A block is written after the lines it describes are synced
(`RunDirectory.write_json`) and is never fsynced itself: a block a crash lost or tore only
leaves more of the shard to read.

Loading trusts the blocks up to the first that fails: its CRC, beginning where the previous one
ended, the shard's inode, the table of names as it was when the block was saved (its CRC). The
shard must be at least as long as they say and the first and last line they cover must match
their CRCs; every line after them is parsed whole and recorded as the runner records its
appends. Anything else (the shard replaced, cut short, edited) and the records file is removed
and the shard parsed whole, as is a shard that has none (written after the last save before a
crash, or by an older version): its records are saved from then on. A shard holding a line the
runner did not write (no key of its own) is read at every scan, as it always was. The merge
checks each loaded line's CRC as it copies it (`ShardChanged`).
"""

from __future__ import annotations

import json
import logging
import os
import struct
import zlib
from pathlib import Path

from agent.store.durable import atomic_write
from agent.store.jsonl import parse_object
from agent.store.layout import batch_files
from agent.store.output_figures import FIGURES_FILE
from agent.store.shard_index import ROW, Shard, ShardRecords, line_of

log = logging.getLogger(__name__)

RECORDS_GLOB = ".batch_*.jsonl.records"
NAMES_FILE = ".records_names.json"
_MAGIC = b"ABR2"
# magic, CRC of everything after it, inode, begin, end, rows, keys' bytes, name tuples in the
# table when saved and the CRC of those (`_table_crc`: a table edited since refuses the block)
_HEAD = struct.Struct("<4sIQqqIIII")


def records_path(shard: Path) -> Path:
    return shard.with_name(f".{shard.name}.records")


def save_all(directory: Path, records: ShardRecords) -> None:
    """Save what is new: the table of names when it grew, then each shard's new rows."""
    if len(records.names) > records.names_saved:
        table = [list(group) for group in records.names]
        with atomic_write(directory / NAMES_FILE) as handle:
            handle.write(json.dumps(table, ensure_ascii=False).encode("utf-8"))
        records.names_saved = len(table)
    saved = (records.names_saved, _table_crc(records.names, records.names_saved))
    for name, shard in records.shards.items():
        _save(directory / name, shard, saved)


def _table_crc(names: list[tuple[str, ...]], count: int) -> int:
    return zlib.crc32(
        json.dumps([list(group) for group in names[:count]], ensure_ascii=False).encode("utf-8")
    )


def _save(shard_path: Path, shard: Shard, table: tuple[int, int]) -> None:
    """Append a block of the rows not saved yet (only a shard recorded from its first byte)."""
    if shard.base != 0 or shard.count == shard.saved:
        return
    rows = bytes(shard.rows[shard.saved * ROW.size :])
    keys = bytes(shard.keys[shard.saved_keys :])
    fields = (shard.stamp[0], shard.saved_end, shard.end, shard.count - shard.saved, len(keys), *table)
    rest = _HEAD.pack(_MAGIC, 0, *fields)[8:] + rows + keys
    with open(records_path(shard_path), "ab") as handle:
        handle.write(_MAGIC + struct.pack("<I", zlib.crc32(rest)) + rest)
    shard.saved, shard.saved_keys, shard.saved_end = shard.count, len(shard.keys), shard.end


def load_records(directory: Path, records: ShardRecords) -> None:
    """Load every batch file's saved records (`load`); a shard without them (written after the
    last save before a crash, or by an older version) is parsed whole once, so that its records
    are saved from now on. A shard holding a line the runner did not write stays unrecorded:
    it is read at every scan, as before."""
    for path in directory.glob(RECORDS_GLOB):
        if not path.with_name(path.name[1 : -len(".records")]).is_file():
            path.unlink(missing_ok=True)
    records.start_names(_names(directory))
    for shard_path in batch_files(directory):
        if load(shard_path, records):
            continue
        shard = Shard(0, records.names, base=0)
        if _record_tail(shard_path, shard, records) and shard.count:
            _adopt(shard_path, shard, records)
        else:
            log.info("%s: not every line has a record; it is read at every scan", shard_path.name)


def load(shard_path: Path, records: ShardRecords) -> bool:
    """Install `shard_path`'s saved records in `records`, its lines after them recorded too;
    False, and the records file removed, when there are none or they cannot be trusted."""
    path = records_path(shard_path)
    try:
        data = path.read_bytes()
        status = os.stat(shard_path)
    except FileNotFoundError:
        path.unlink(missing_ok=True)
        return False
    found = _blocks(data, status.st_ino, records)
    if found is None or not _matches(shard_path, found[0], status.st_size):
        path.unlink(missing_ok=True)
        return False
    shard, good = found
    if not _record_tail(shard_path, shard, records):
        path.unlink(missing_ok=True)
        return False
    if good < len(data):  # a torn block after the good ones: the next save appends after them
        os.truncate(path, good)
    _adopt(shard_path, shard, records)
    return True


def _adopt(shard_path: Path, shard: Shard, records: ShardRecords) -> None:
    """`shard`, recorded to the end of its file, is this process's to append to from there."""
    status = os.stat(shard_path)
    shard.start, shard.stamp = shard.end, (status.st_ino, status.st_mtime_ns)
    records.adopt(shard_path.name, shard)


def _blocks(data: bytes, inode: int, records: ShardRecords) -> tuple[Shard, int] | None:
    """The rows of the good blocks of `data` as a shard loaded from 0, and the bytes those
    blocks take; None when there is no good block."""
    shard, at = Shard(0, records.names, base=0), 0
    tables = {records.names_saved: _table_crc(records.names, records.names_saved)}
    while at + _HEAD.size <= len(data):
        magic, crc, ino, begin, end, count, key_bytes, names, names_crc = _HEAD.unpack_from(data, at)
        size = _HEAD.size + count * ROW.size + key_bytes
        if magic != _MAGIC or at + size > len(data) or zlib.crc32(data[at + 8 : at + size]) != crc:
            break
        if ino != inode or begin != shard.end or end <= begin or names > records.names_saved:
            break
        if names not in tables:
            tables[names] = _table_crc(records.names, names)
        if tables[names] != names_crc:
            break
        rows_end = at + _HEAD.size + count * ROW.size
        shard.rows += data[at + _HEAD.size : rows_end]
        shard.keys += data[rows_end : rows_end + key_bytes]
        shard.count += count
        shard.end, at = end, at + size
    if shard.count == 0:
        return None
    shard.saved, shard.saved_keys, shard.saved_end = shard.count, len(shard.keys), shard.end
    return shard, at


def _matches(shard_path: Path, shard: Shard, size: int) -> bool:
    """Whether the shard still holds the first and last line the rows describe."""
    if size < shard.end:
        return False
    with shard_path.open("rb") as handle:
        for row in (0, shard.count - 1):
            offset, length, _number, crc, *_rest = ROW.unpack_from(shard.rows, row * ROW.size)
            data = os.pread(handle.fileno(), length + 1, offset)
            if data[-1:] != b"\n" or zlib.crc32(data[:-1]) != crc:
                return False
    return True


def _record_tail(shard_path: Path, shard: Shard, records: ShardRecords) -> bool:
    """Record the lines after the saved ones (appended after the last save); False at a line
    the runner did not write (blank, not an object, no key of its own)."""
    with shard_path.open("rb") as handle:
        handle.seek(shard.end)
        for data in handle:
            entry = parse_object(data.rstrip(b"\r\n"))
            line = line_of(shard.end, data, entry) if entry is not None else None
            if line is None or not data.endswith(b"\n"):
                return False
            records.extend(shard, line, len(data))
    return True


def _names(directory: Path) -> list[tuple[str, ...]]:
    """The run's saved table of name tuples ([] when missing or unreadable: no block is used)."""
    try:
        table = json.loads((directory / NAMES_FILE).read_bytes().decode("utf-8"))
    except (OSError, ValueError):
        return []
    if not isinstance(table, list) or not all(
        isinstance(group, list) and all(isinstance(name, str) for name in group) for group in table
    ):
        return []
    return [tuple(group) for group in table]


def remove_all(directory: Path) -> None:
    """Remove every records file and the table (the records can no longer be trusted), and the
    figures kept of the lines they describe (`agent.store.output_figures`)."""
    for path in [*directory.glob(RECORDS_GLOB), directory / NAMES_FILE, directory / FIGURES_FILE]:
        path.unlink(missing_ok=True)
