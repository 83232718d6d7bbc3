"""The prompt dataset: validating a JSONL file line by line and streaming its valid rows.

Two passes over the file, both streamed: `scan_dataset` validates every line up front (so a
bad dataset is reported before a token is spent), `iter_rows` then yields the valid rows in
file order. Neither holds the file in memory; `iter_rows` keeps only a dict from prompt hash
to the number of copies seen, which gives each copy of a repeated prompt its own key.

Line rules: blank lines are skipped silently. A line is an error (reported, then skipped)
when it is not valid JSON, not an object, has no `prompt`, a `prompt` that is not a
non-blank string, an `image`/`docker_image`/`cwd` that is not a non-empty string, or a
`metadata` that is not an object. An optional field set to JSON `null` counts as absent:
Hugging Face and pandas exports write `null` for a column a row does not use.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from agent.errors import ConfigError, DatasetError

MAX_KEPT_ERRORS = 1000
OPTIONAL_STRINGS = ("image", "docker_image", "cwd")
_BOM = b"\xef\xbb\xbf"
_JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number"}


@dataclass(frozen=True)
class LineError:
    path: str
    line_no: int
    field: str | None
    reason: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line_no}"
        return f"{where}: {self.field}: {self.reason}" if self.field else f"{where}: {self.reason}"


@dataclass(frozen=True)
class DatasetRow:
    index: int  # position among valid rows (0-based), after max_samples
    line_no: int  # 1-based line in the file
    prompt: str
    key: str  # prompt_key(prompt, occurrence)
    occurrence: int  # 0 for the first copy of this prompt text in the file, 1 for the second…
    image: str | None  # `image`, else `docker_image`
    cwd: str | None
    metadata: dict[str, Any]


@dataclass
class DatasetScan:
    path: str
    total_lines: int  # every line of the file, blank ones included
    valid: int  # rows `iter_rows` will yield (after max_samples)
    errors: list[LineError]  # the first MAX_KEPT_ERRORS errors
    error_count: int = 0  # all errors, kept or not
    truncated: int = 0  # valid rows left out by max_samples


@dataclass(frozen=True)
class _Fields:
    prompt: str
    image: str | None
    cwd: str | None
    metadata: dict[str, Any]


def prompt_key(prompt: str, occurrence: int) -> str:
    """The identity of one copy of a prompt: its stripped text's hash plus the copy number."""
    return f"{_prompt_hash(prompt)}:{occurrence}"


def _prompt_hash(prompt: str) -> str:
    return hashlib.sha256(prompt.strip().encode("utf-8")).hexdigest()[:20]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _check_max_samples(max_samples: int | None) -> None:
    if max_samples is None:
        return
    if isinstance(max_samples, bool) or not isinstance(max_samples, int) or max_samples < 1:
        raise ConfigError(f"--max_samples must be a positive integer, got {max_samples!r}")


def _open(path: Path) -> BinaryIO:
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"{path}: dataset file not found") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, not a dataset file") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read the dataset file ({exc.strerror})") from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(1-based line number, decoded text) of every line, streamed; raises DatasetError on
    a read error or bytes that are not UTF-8."""
    with _open(path) as handle:
        line_no = 0
        try:
            for raw in handle:
                line_no += 1
                if line_no == 1 and raw.startswith(_BOM):
                    raw = raw[len(_BOM) :]
                try:
                    yield line_no, raw.rstrip(b"\r\n").decode("utf-8")
                except UnicodeDecodeError as exc:
                    bad = raw[exc.start]
                    raise DatasetError(
                        f"{path}:{line_no}: not UTF-8 text (byte 0x{bad:02x} at column {exc.start + 1})"
                    ) from None
        except OSError as exc:
            raise DatasetError(f"{path}:{line_no + 1}: read failed ({exc.strerror})") from None


class _FieldError(Exception):
    def __init__(self, field_name: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field_name = field_name
        self.reason = reason


def _optional_string(row: dict[str, Any], name: str) -> str | None:
    value = row.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        got = "a blank string" if isinstance(value, str) else _json_type(value)
        raise _FieldError(name, f"must be a non-empty string (got {got})")
    return value


class _NonStandardJSON(ValueError):
    pass


def _reject_constant(name: str) -> Any:
    # Python accepts NaN/Infinity; strict JSON readers (and our own writers) do not.
    raise _NonStandardJSON(name)


_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _parse(text: str) -> _Fields:
    """The fields of one non-blank line; raises _FieldError naming what is wrong."""
    try:
        row = _DECODER.decode(text)
    except _NonStandardJSON as exc:
        raise _FieldError(None, f"invalid JSON: {exc} is not valid JSON") from None
    except json.JSONDecodeError as exc:
        raise _FieldError(None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise _FieldError(None, "invalid JSON: nested too deeply") from None
    if not isinstance(row, dict):
        raise _FieldError(None, f"not a JSON object (got {_json_type(row)})")
    if "\\ud" in text.lower():  # only a \uD800-\uDFFF escape can decode to a lone surrogate
        _reject_lone_surrogates(row)
    if "prompt" not in row:
        raise _FieldError("prompt", "missing")
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        got = "a blank string" if isinstance(prompt, str) else _json_type(prompt)
        raise _FieldError("prompt", f"must be a non-empty string (got {got})")
    image, docker_image, cwd = (_optional_string(row, name) for name in OPTIONAL_STRINGS)
    metadata = row.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise _FieldError("metadata", f"must be a JSON object (got {_json_type(metadata)})")
    return _Fields(prompt, image if image is not None else docker_image, cwd, metadata or {})


def _reject_lone_surrogates(row: dict[str, Any]) -> None:
    """An escaped half of a surrogate pair (`"\\ud800"`) decodes to a string no UTF-8 writer
    can encode: every request and output line holding it would fail later, mid-run."""
    for name in ("prompt", *OPTIONAL_STRINGS, "metadata"):  # the fields a run reads
        value = row.get(name)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _FieldError(
                name,
                "holds an unpaired surrogate escape (\\ud800-\\udfff), which is not Unicode text",
            ) from None


def _classify(path: Path, line_no: int, text: str) -> _Fields | LineError | None:
    """One line as its fields, its error, or None when it is blank."""
    if not text.strip():
        return None
    try:
        return _parse(text)
    except _FieldError as exc:
        return LineError(str(path), line_no, exc.field_name, exc.reason)


def scan_dataset(
    path: str | Path, max_samples: int | None = None, *, require_valid: bool = True
) -> DatasetScan:
    """Validate every line of the dataset (first pass). Raises DatasetError when the file
    cannot be read, is not UTF-8, or (with `require_valid`) has no valid row. A caller that
    reports the bad lines itself passes `require_valid=False` and calls `require_valid_rows`."""
    _check_max_samples(max_samples)
    path = Path(path)
    scan = DatasetScan(path=str(path), total_lines=0, valid=0, errors=[])
    valid_total = 0
    for line_no, text in _lines(path):
        scan.total_lines = line_no
        record = _classify(path, line_no, text)
        if isinstance(record, LineError):
            scan.error_count += 1
            if len(scan.errors) < MAX_KEPT_ERRORS:
                scan.errors.append(record)
        elif record is not None:
            valid_total += 1
    scan.valid = valid_total if max_samples is None else min(valid_total, max_samples)
    scan.truncated = valid_total - scan.valid
    if require_valid:
        require_valid_rows(scan)
    return scan


def require_valid_rows(scan: DatasetScan) -> None:
    """DatasetError when the scan found no usable row."""
    if scan.valid == 0:
        raise DatasetError(_no_valid_row_message(scan))


def _no_valid_row_message(scan: DatasetScan) -> str:
    if scan.error_count == 0:
        return f"{scan.path}: no valid row (the file is empty)"
    return (
        f"{scan.path}: no valid row ({scan.error_count} invalid of {scan.total_lines} lines; "
        f"first: {scan.errors[0]})"
    )


def iter_rows(path: str | Path, max_samples: int | None = None) -> Iterator[DatasetRow]:
    """Stream the valid rows in file order (second pass); invalid lines are skipped."""
    _check_max_samples(max_samples)
    path = Path(path)
    seen: dict[str, int] = {}  # prompt hash -> copies seen so far
    index = 0
    for line_no, text in _lines(path):
        record = _classify(path, line_no, text)
        if not isinstance(record, _Fields):
            continue
        if max_samples is not None and index >= max_samples:
            return
        digest = _prompt_hash(record.prompt)
        occurrence = seen.get(digest, 0)
        seen[digest] = occurrence + 1
        yield DatasetRow(
            index=index,
            line_no=line_no,
            prompt=record.prompt,
            key=f"{digest}:{occurrence}",
            occurrence=occurrence,
            image=record.image,
            cwd=record.cwd,
            metadata=record.metadata,
        )
        index += 1
