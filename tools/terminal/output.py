"""How command output is shown to the model: escape sequences stripped, and long output cut in
the middle (its start and its end are what a model needs: the command's first lines and the
error it ended with)."""

from __future__ import annotations

import re

MAX_OUTPUT_CHARS = 50_000
HEAD_SHARE = 0.4  # of MAX_OUTPUT_CHARS kept from the start; the rest from the end

# CSI (colours, cursor moves), OSC (titles, links), charset selection (tput sgr0 emits
# ESC ( B) and the remaining 2-byte escapes.
_ANSI = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()*+][0-9A-Za-z]|\x1b[@-Z\\-_]"
)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def truncate_output(text: str, limit: int = MAX_OUTPUT_CHARS) -> str:
    """Keep the first 40 % and last 60 % of `limit` chars, with a marker line in between."""
    if len(text) <= limit:
        return text
    head = int(limit * HEAD_SHARE)
    tail = limit - head
    omitted = len(text) - limit
    return text[:head] + omission_marker(omitted, len(text), "chars") + text[-tail:]


def omission_marker(omitted: int, total: int, unit: str) -> str:
    return f"\n\n[OUTPUT TRUNCATED - {omitted} {unit} omitted out of {total} total]\n\n"


def shown(text: str) -> str:
    """Output as the model sees it: escapes stripped, capped at MAX_OUTPUT_CHARS."""
    return truncate_output(strip_ansi(text))
