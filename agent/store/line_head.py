"""What the resume's scan needs of a result line, read without parsing the whole line (issue 26:
a resume finds its place in seconds at a million prompts; a line is ~9 KB, `json.loads` of
one ~40-60 µs, this read ~4× less).

The scan needs a line's key, `prompt_index`, whether it is a tombstone and its
`metadata.discard_reasons`. A line the runner wrote (`agent.export.sharegpt`'s layout: top-level
`prompt_index` first, then `conversations`, a list of `{"from": str, "value": str}` turns; its
`metadata`, tool counts and flags after) starts with `{"prompt_index": N, "conversations":
[{"from": "`, and every quote inside a string is escaped, so `"metadata": {` occurs unescaped
only as a key: the entry's own, when the line has one such key. Such a line is read by its
head (`head`) when it also ends with `}`: the metadata object is parsed alone (its
`prompt_key`, its `discard_reasons`), the turns and the rest are not. The
line is whole (the torn-line repair made every file end on one); a line edited to invalid JSON
after its metadata reads as valid here. Any other line is parsed whole, as before (None here).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.store.jsonl import parse_object, raw_lines

_PREFIX = re.compile(rb'\{"prompt_index": (0|[1-9][0-9]{0,17}), "conversations": \[\{"from": "')
_INDEX = re.compile(rb'\{"prompt_index": (0|[1-9][0-9]{0,17}), "conversations": \[')
_METADATA = b'"metadata": {'
_DECODER = json.JSONDecoder()


def head(line: bytes) -> dict[str, Any] | None:
    """`{"prompt_index": N, "conversations": [], "metadata": {...}}` (the line's own metadata
    object, parsed alone, with its `prompt_key`), or None: parse the whole line."""
    prefix = _PREFIX.match(line)
    if prefix is None or not line.endswith(b"}"):
        return None
    at = line.find(_METADATA)
    if at < 0 or line.find(_METADATA, at + 1) >= 0:  # one scan of the line, not two
        return None
    try:  # the metadata object alone: from its `{` to its end
        metadata, _end = _DECODER.raw_decode(line[at + len(_METADATA) - 1 :].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None
    key = metadata.get("prompt_key") if isinstance(metadata, dict) else None
    if not isinstance(key, str) or not key:  # a key from the turns' text: the whole line is needed
        return None
    return {"prompt_index": int(prefix[1]), "conversations": [], "metadata": metadata}


def read_heads(path: Path, end: int | None = None) -> Iterator[tuple[bytes, dict[str, Any] | None]]:
    """`read_lines`, each line as `head` reads it when it can, else parsed whole."""
    for line in raw_lines(path, end):
        yield line, head(line) or parse_object(line)


def index_prefix(line: bytes) -> int | None:
    """The `prompt_index` a line of the runner's layout starts with; None for any other line."""
    prefix = _INDEX.match(line)
    return int(prefix[1]) if prefix is not None else None
