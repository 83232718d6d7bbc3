"""Text that UTF-8 can encode: lone surrogates replaced before they reach a request or a line.

A lone surrogate (U+D800-U+DFFF outside a pair) enters a Python string from a JSON escape
(`"\\ud800"` in a model's reply) or from bytes decoded with surrogateescape (a file that is
not UTF-8). No UTF-8 writer can encode it, so one such character would fail every later
request of its conversation and the line that records it.
"""

from __future__ import annotations

import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def encodable(text: str) -> str:
    """`text` with each lone surrogate replaced by U+FFFD (in a Python string every surrogate
    is lone: a JSON pair decodes to one character)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def encodable_json(value: Any) -> Any:
    """A JSON value with every string (keys included) made `encodable`."""
    if isinstance(value, str):
        return encodable(value)
    if isinstance(value, list):
        return [encodable_json(item) for item in value]
    if isinstance(value, dict):
        return {encodable(str(k)): encodable_json(v) for k, v in value.items()}
    return value


def unencodable(value: Any) -> int:
    """How many characters of a JSON value's strings (keys included) UTF-8 cannot carry."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return len(_SURROGATE.findall(value))
        return 0
    if isinstance(value, list):
        return sum(unencodable(item) for item in value)
    if isinstance(value, dict):
        return sum(unencodable(str(k)) + unencodable(v) for k, v in value.items())
    return 0


def may_hold_surrogates(raw: bytes) -> bool:
    """Whether JSON bytes can decode to a lone surrogate: a `\\uD800`-`\\uDFFF` escape, or
    a surrogate encoded as bytes (ED A0-BF xx), which `json.loads` of bytes lets through.
    0xED also starts valid U+D000-U+D7FF characters: those replies are cleaned for nothing."""
    return b"\\ud" in raw or b"\\uD" in raw or b"\xed" in raw
