"""The one redaction of secrets in everything a process of ours writes.

A `Redactor` knows every form a secret can take in our output (as is, and JSON-escaped with
and without `ensure_ascii`) and replaces each with `[REDACTED]`. The process has one active
redactor, installed by the command line once its config is built (`install`): the run
directory's appends and JSON files, the log records and the process's stdout and stderr
(`redact_streams`) all go through it. The common case (no secret in the text) costs one
substring search per needle and copies nothing.
"""

from __future__ import annotations

import html
import io
import json
import logging
import os
import sys
from collections.abc import Iterable
from typing import TextIO

REDACTED = "[REDACTED]"
MIN_SECRET_LENGTH = 8  # shorter values (e.g. the placeholder key "local") would redact words


def _escaped(forms: set[str]) -> set[str]:
    """Each form as a JSON string's inside, with and without `ensure_ascii`."""
    return {json.dumps(form, ensure_ascii=ascii_only)[1:-1] for form in forms for ascii_only in (True, False)}


def _forms(secret: str) -> set[str]:
    """Every form `secret` takes in what we write: as is; inside a JSON string; inside a JSON
    string inside another (a tool result is JSON text, and the entry's line escapes it again:
    the quote of `a"b` has three backslashes there); and HTML-escaped (the report). A plain
    ASCII secret has one form."""
    once = _escaped({secret})
    nested = {secret, *once, *_escaped(once)}
    return nested | {html.escape(form) for form in nested}


class Redactor:
    """Replaces every form of every secret with `[REDACTED]`."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        forms: set[str] = set()
        for secret in secrets:
            if secret and len(secret) >= MIN_SECRET_LENGTH:
                forms |= _forms(secret)
        # Longest first: a secret that contains another is replaced whole.
        self._text = sorted(forms, key=len, reverse=True)
        self._bytes = [form.encode("utf-8") for form in self._text]

    def __bool__(self) -> bool:
        return bool(self._text)

    def redact_text(self, text: str) -> str:
        for needle in self._text:
            if needle in text:
                text = text.replace(needle, REDACTED)
        return text

    def redact_bytes(self, data: bytes) -> bytes:
        for needle in self._bytes:
            if needle in data:
                data = data.replace(needle, REDACTED.encode())
        return data


_active = Redactor(())
_secrets: tuple[str | None, ...] = ()  # what _active was built from, for `add`


def install(secrets: Iterable[str | None]) -> Redactor:
    """Make the redactor of `secrets` the process's one; returns it."""
    global _active, _secrets
    _secrets = tuple(secrets)
    _active = Redactor(_secrets)
    return _active


def add(secrets: Iterable[str | None]) -> Redactor:
    """The process's redactor, hiding `secrets` as well (the MCP servers' env and headers values,
    known once their config file is read)."""
    return install((*_secrets, *secrets))


def active() -> Redactor:
    return _active


class RedactingFilter(logging.Filter):
    """A handler filter: the record's message is redacted before any formatter sees it (a
    RichHandler wraps lines, which could split a secret past the stream's redaction)."""

    def filter(self, record: logging.LogRecord) -> bool:
        redactor = _active
        if not redactor:
            return True
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a malformed call: the handler reports it, as logging does
            return True
        clean = redactor.redact_text(message)
        if clean is not message:
            record.msg, record.args = clean, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redactor.redact_text(record.exc_text)
        return True


class RedactingStream(io.TextIOBase):
    """A text stream that writes through the active redactor to `stream`. A `lossy` one (the
    operator's stderr) that can no longer be written (its reader closed the pipe: `2>&1 | head`;
    `2>/dev/full`) is pointed at /dev/null: the process goes on unseen rather than abandoning a
    run for its log. stdout is not lossy: a closed stdout is a command's end (exit 141)."""

    def __init__(self, stream: TextIO, *, lossy: bool = False) -> None:
        super().__init__()
        self.stream, self.lossy = stream, lossy

    def write(self, text: str) -> int:
        try:
            self.stream.write(_active.redact_text(text))
        except OSError:
            if not self.lossy:
                raise
            self._lose()
        return len(text)

    def flush(self) -> None:
        try:
            self.stream.flush()
        except OSError:
            if not self.lossy:
                raise
            self._lose()

    def _lose(self) -> None:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, self.stream.fileno())  # what is still buffered goes there too
        os.close(devnull)

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]  # TextIOBase declares it read-only
        return self.stream.encoding

    @property
    def errors(self) -> str | None:  # type: ignore[override]
        return self.stream.errors


def redact_streams() -> None:
    """Route sys.stdout and sys.stderr through the active redactor (once); stderr is lossy."""
    if not isinstance(sys.stdout, RedactingStream):
        sys.stdout = RedactingStream(sys.stdout)
    if not isinstance(sys.stderr, RedactingStream):
        sys.stderr = RedactingStream(sys.stderr, lossy=True)
