"""A dataset scan remembered in the run directory (`.dataset_scan`), so that `--resume` of an
unchanged dataset skips the validating pass (issue 26: a resume finds its place in seconds at
a million prompts; the scan parses and checks every row, ~12 µs each).

What a scan found is written once the run holds its directory (`remember`): its counts, the
errors it kept, each valid row's key (packed, as `RowKeys` holds them) and what the scan
depended on: the file (its name as given, real path, device, inode, size, modification and
change times (no user can set the latter back), a CRC of its first and last 64 KiB) and the
scan's own inputs (`max_samples`, the sandbox backend, the dataset options, and the code that
judges a row). `recall` gives the scan back only when all of those are the same; anything else
(another file, an edit, an upgrade, a damaged memo) and the dataset is scanned, as it always
was. Only a local file is remembered: a `datasets` directory or a Hub dataset is scanned each
time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import zlib
from dataclasses import asdict, replace
from pathlib import Path

from agent.batch import (
    dataset,
    dataset_copies,
    dataset_jsonl,
    dataset_source,
    dataset_sources,
    row_columns,
    row_fields,
    row_verify,
)
from agent.batch.dataset import DatasetScan, scan_dataset
from agent.batch.dataset_copies import RowKeys
from agent.batch.dataset_source import LineError
from agent.common.redaction import active
from agent.config.dataset_config import DatasetOptions
from agent.store import keys
from agent.store.durable import atomic_write

MEMO_FILE = ".dataset_scan"
_EDGE = 64 * 1024
_HEAD = struct.Struct("<4sIQ")  # magic, CRC of the rest, length of the JSON part
_MAGIC = b"DSM1"
# what reads, judges and keys a row: the scan, its sources (JSONL lines, Parquet rows), the rules
_RULES = (
    dataset,
    dataset_jsonl,
    dataset_sources,
    dataset_source,
    dataset_sources,
    dataset_copies,
    row_columns,
    row_fields,
    row_verify,
    keys,
)


def scan_for_run(
    path: str | Path,
    max_samples: int | None,
    *,
    backend: str | None,
    options: DatasetOptions,
    run_dir: Path,
    resume: bool,
) -> DatasetScan:
    """`scan_dataset(..., require_valid=False, keys=True)`, or on `resume` the scan remembered
    for the same dataset and inputs. A scan made here carries its `identity` (None when the
    file changed while it was read: it is not remembered)."""
    before = identity(path, max_samples, backend, options)
    if resume and (recalled := recall(run_dir, before)) is not None:
        return recalled
    scan = scan_dataset(path, max_samples, require_valid=False, backend=backend, options=options, keys=True)
    if before is not None and identity(path, max_samples, backend, options) == before:
        scan.identity = before
    return scan


def identity(
    path: str | Path, max_samples: int | None, backend: str | None, options: DatasetOptions
) -> str | None:
    """What a scan of `path` depends on, as one string; None for anything but a local file."""
    try:
        status = os.stat(path)
        with open(path, "rb") as handle:
            head = handle.read(_EDGE)
            handle.seek(max(0, status.st_size - _EDGE))
            tail = handle.read(_EDGE)
    except (OSError, TypeError, ValueError):
        return None
    if not os.path.isfile(path):
        return None
    file = (
        str(path),
        os.path.realpath(path),
        status.st_dev,
        status.st_ino,
        status.st_size,
        status.st_mtime_ns,
        status.st_ctime_ns,  # a write in place with the modification time set back changes it
    )
    edges = (zlib.crc32(head), zlib.crc32(tail))
    return json.dumps([file, edges, max_samples, backend, repr(options), _rules_digest()])


def forget(run_dir: Path) -> None:
    """Remove the remembered scan (the dataset changed under the run: the next one scans)."""
    (run_dir / MEMO_FILE).unlink(missing_ok=True)


@functools.cache
def _rules_digest() -> str:
    """A hash of the code that judges and keys a row (read once: `identity` runs twice a run)."""
    rules = hashlib.sha256()
    for module in _RULES:
        rules.update(Path(str(module.__file__)).read_bytes())
    return rules.hexdigest()


def remember(run_dir: Path, scan: DatasetScan) -> None:
    """Write `scan` (made with its `identity` and `keys`) for a later `recall`."""
    if scan.identity is None or scan.keys is None or scan.recalled:
        return
    hashes, copies = scan.keys.packed()
    fields = asdict(replace(scan, keys=None, errors=[], recalled=False))
    fields["errors"] = [asdict(error) for error in scan.errors]
    # as every byte the runner writes, through the secret redactor (a bad line's message
    # quotes the line; a changed meta is not recalled: the dataset is scanned again)
    meta = active().redact_bytes(json.dumps(fields, ensure_ascii=False).encode("utf-8"))
    body = struct.pack("<QQ", len(hashes), len(copies)) + meta + hashes + copies
    with atomic_write(run_dir / MEMO_FILE) as handle:
        handle.write(_HEAD.pack(_MAGIC, zlib.crc32(body), len(meta)) + body)


def recall(run_dir: Path, identity_now: str | None) -> DatasetScan | None:
    """The scan remembered for `identity_now`, or None."""
    if identity_now is None:
        return None
    try:
        data = (run_dir / MEMO_FILE).read_bytes()
    except OSError:
        return None
    if len(data) < _HEAD.size + 16:
        return None
    magic, crc, meta_size = _HEAD.unpack_from(data)
    body = memoryview(data)[_HEAD.size :]
    if magic != _MAGIC or zlib.crc32(body) != crc:
        return None
    try:
        return _scan(body, meta_size, identity_now)
    except (ValueError, TypeError, KeyError):  # written by another version: scan again
        return None


def _scan(body: memoryview, meta_size: int, identity_now: str) -> DatasetScan | None:
    hash_size, copy_size = struct.unpack_from("<QQ", body)
    meta_end = 16 + meta_size
    fields = json.loads(bytes(body[16:meta_end]).decode("utf-8"))
    if fields.get("identity") != identity_now or meta_end + hash_size + copy_size != len(body):
        return None
    fields["errors"] = [LineError(**error) for error in fields["errors"]]
    hashes = bytes(body[meta_end : meta_end + hash_size])
    fields["keys"] = RowKeys.unpacked(hashes, bytes(body[meta_end + hash_size :]))
    fields["recalled"] = True
    return DatasetScan(**fields)
