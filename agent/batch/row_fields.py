"""One dataset line's fields: decoding, parsing, and the rule each field follows.

`parse_line` turns a line's bytes into its `LineFields` (None for a blank line) or raises
`FieldError` naming the field at fault and why; `agent.batch.dataset` adds the file and line
number. `parse_record` does the same for a record that is already a mapping (a Parquet or
`datasets` row): both read the row fields through the run's `ColumnMap` (--prompt_field,
--field_map; a mapped field's error names its column too) and judge them by one rule set.

A line is an error when it is not UTF-8 text, not valid JSON, not an object, has no `prompt`,
a `prompt` that is not a non-blank string, an `image`/`docker_image`/`cwd` that is not a
non-empty string, a `cwd` against CWD_RULE, an image or cwd the run's sandbox backend
cannot run as asked (when the backend is given: its `row_problem` says; silently ignoring it
would run the prompt elsewhere than asked), or a `metadata` that is not an object. An optional
field set to JSON `null` counts as absent: Hugging Face and pandas exports write `null` for a
column a row does not use.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent import sandboxes
from agent.batch.row_columns import ColumnMap, jsonable
from agent.batch.row_sampling import parse_sampling
from agent.batch.row_verify import RowVerify, parse_verify
from agent.common.strict_json import NonStandardJSON, strict_loads
from agent.config.sampling import Sampling

CWD_RULE = (
    "cwd is a directory inside the sandbox: absolute (/app is /app in the sandbox) or relative "
    "to its workspace (src is /workspace/src), without '..' components"
)

OPTIONAL_STRINGS = ("image", "docker_image", "cwd")
IDENTITY = ColumnMap()  # every field read from its own name: a JSON line as it always was

_JSON_TYPE_NAMES = {dict: "object", list: "array", str: "string", int: "number", float: "number"}


class FieldError(Exception):
    def __init__(self, field_name: str | None, reason: str) -> None:
        super().__init__(reason)
        self.field_name = field_name
        self.reason = reason


@dataclass(frozen=True)
class LineFields:
    prompt: str
    image: str | None
    cwd: str | None
    metadata: dict[str, Any]
    image_field: str  # the field the image came from, for an error about it
    sampling: Sampling | None = None  # the row's `sampling` choices (agent.batch.row_sampling)
    verify: RowVerify | None = None  # the row's `verify` checks (agent.batch.row_verify)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return _JSON_TYPE_NAMES.get(type(value), type(value).__name__)


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = raw[exc.start]
        raise FieldError(None, f"not UTF-8 text (byte 0x{bad:02x} at column {exc.start + 1})") from None


def _optional_string(row: dict[str, Any], name: str) -> str | None:
    value = row.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        got = "a blank string" if isinstance(value, str) else _json_type(value)
        raise FieldError(name, f"must be a non-empty string (got {got})")
    return value


def _parse(text: str, columns: ColumnMap) -> tuple[dict[str, Any], dict[str, Any]]:
    """The record of one non-blank line and its row fields' values; raises FieldError naming
    what is wrong."""
    try:
        row = strict_loads(text)
    except NonStandardJSON as exc:
        _check_checks_of(text, columns)
        raise FieldError(None, f"invalid JSON: {exc} is not valid JSON") from None
    except json.JSONDecodeError as exc:
        raise FieldError(None, f"invalid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise FieldError(None, "invalid JSON: nested too deeply") from None
    except ValueError:  # int() refuses integers of over 4,300 digits
        raise FieldError(None, "invalid JSON: a number too long to read") from None
    if not isinstance(row, dict):
        raise FieldError(None, f"not a JSON object (got {_json_type(row)})")
    view = columns.view(row, FieldError)
    if "\\ud" in text.lower():  # only a \uD800-\uDFFF escape can decode to a lone surrogate
        _reject_lone_surrogates(view)
    return row, view


def _check_checks_of(text: str, columns: ColumnMap) -> None:
    """A NaN or Infinity in the row's checks is the checks' error (exit 2: they must be right
    before the run starts), as in a Parquet row; elsewhere the line is a bad line. Python's own
    reader takes both."""
    try:
        loose = json.loads(text)
    except (ValueError, RecursionError):  # unreadable for another reason too: the line's error
        return
    if isinstance(loose, dict):
        view = columns.view(loose, FieldError)
        if "verify" in view:
            jsonable("verify", view["verify"], FieldError)


def _fields(row: dict[str, Any]) -> LineFields:
    """The rules every row follows, whatever its source: `row` holds the row fields' values
    by field name (`ColumnMap.view`)."""
    if "prompt" not in row:
        raise FieldError("prompt", "missing")
    prompt = row["prompt"]
    if not isinstance(prompt, str) or not prompt.strip():
        got = "a blank string" if isinstance(prompt, str) else _json_type(prompt)
        raise FieldError("prompt", f"must be a non-empty string (got {got})")
    image, docker_image, cwd = (_optional_string(row, name) for name in OPTIONAL_STRINGS)
    if cwd is not None:
        _check_cwd(cwd)
    metadata = row.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise FieldError("metadata", f"must be a JSON object (got {_json_type(metadata)})")
    image_field = "image" if image is not None else "docker_image"
    sampling = parse_sampling(row.get("sampling"), FieldError)
    verify = parse_verify(row.get("verify"), FieldError)
    return LineFields(
        prompt,
        image if image is not None else docker_image,
        cwd,
        metadata or {},
        image_field,
        sampling,
        verify,
    )


def _check_cwd(cwd: str) -> None:
    """CWD_RULE: a `..` component could leave the sandbox (or, relative, the workspace)."""
    if "\0" in cwd:
        raise FieldError("cwd", "holds a NUL character, which no path can")
    if ".." in cwd.split("/"):
        raise FieldError("cwd", f"{cwd!r} has a '..' component; {CWD_RULE}")


def _check_sandbox_fields(fields: LineFields, backend: str | None) -> None:
    """An image or cwd the run's sandbox backend would not honour is a bad line."""
    if backend is None or (fields.image is None and fields.cwd is None):
        return
    problem = sandboxes.row_problem(backend, fields.image, fields.cwd)
    if problem is not None:
        raise FieldError(fields.image_field if problem.field == "image" else "cwd", problem.reason)


def _reject_lone_surrogates(row: dict[str, Any]) -> None:
    """An escaped half of a surrogate pair (`"\\ud800"`) decodes to a string no UTF-8 writer
    can encode: every request and output line holding it would fail later, mid-run."""
    for name in ("prompt", *OPTIONAL_STRINGS, "metadata", "verify"):  # the fields a run reads
        value = row.get(name)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise FieldError(
                name,
                "holds an unpaired surrogate escape (\\ud800-\\udfff), which is not Unicode text",
            ) from None


def parse_line(raw: bytes, backend: str | None = None, columns: ColumnMap = IDENTITY) -> LineFields | None:
    """The fields of one line (without its line end), None when it is blank; FieldError
    when it is no valid row (for `backend`, when given)."""
    text = _decode(raw)
    if not text.strip():
        return None
    row, view = _parse(text, columns)
    return _checked(view, row, backend, columns)


def parse_record(
    record: Mapping[str, Any], backend: str | None = None, columns: ColumnMap = IDENTITY
) -> LineFields:
    """The fields of a record that is already a mapping (a Parquet or `datasets` row): the
    same rules as a line's, its values held to what JSON can say (`jsonable`)."""
    view = columns.view(record, FieldError)
    view = {name: jsonable(name, value, FieldError) for name, value in view.items()}
    return _checked(view, record, backend, columns)


def _checked(
    view: dict[str, Any], record: Mapping[str, Any], backend: str | None, columns: ColumnMap
) -> LineFields:
    """The row fields by the one rule set; a mapped field's error names its column too."""
    try:
        fields = _fields(view)
        _check_sandbox_fields(fields, backend)
    except FieldError as exc:
        note = columns.note(exc.field_name, record)
        if not note:
            raise
        raise FieldError(exc.field_name, exc.reason + note) from None
    return fields
