"""The file tools' arguments and the errors the model should see: a bad argument or a path
the sandbox refuses becomes {"error": "..."}, never an exception."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from agent.errors import SandboxPathError
from agent.protocols import JSON, Sandbox, SandboxTool


class BadArguments(ValueError):
    """The model's arguments cannot be used; the message tells it why."""


def model_errors(handler: SandboxTool) -> SandboxTool:
    """Turn failures the model caused or can fix into {"error": ...} results."""

    @functools.wraps(handler)
    async def guarded(args: Mapping[str, Any], sandbox: Sandbox) -> JSON:
        try:
            return await handler(args, sandbox)
        except (BadArguments, SandboxPathError) as exc:
            return {"error": str(exc)}
        except OSError as exc:
            return {"error": _describe(exc, str(args.get("path", "")))}

    return guarded


def _describe(exc: OSError, path: str) -> str:
    if isinstance(exc, FileNotFoundError):
        return f"File not found: {path}"
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a directory, not a file (list it with search_files target='files')"
    if isinstance(exc, PermissionError):
        return f"Permission denied: {path}"
    return f"Cannot access {path}: {exc.strerror or exc}"


def text(args: Mapping[str, Any], name: str, *, default: str | None = None, allow_empty: bool = False) -> str:
    value = args.get(name, default)
    if value is None:
        raise BadArguments(f"missing required argument '{name}'")
    if not isinstance(value, str):
        raise BadArguments(f"'{name}' must be a string, got {type(value).__name__}")
    if not value and not allow_empty and default is None:
        raise BadArguments(f"'{name}' must not be empty")
    return value


def integer(args: Mapping[str, Any], name: str, default: int) -> int:
    value = args.get(name)
    if value is None:
        return default
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)  # models sometimes quote numbers
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadArguments(f"'{name}' must be a positive integer, got {value!r}")
    return value


def flag(args: Mapping[str, Any], name: str) -> bool:
    value = args.get(name, False)
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if not isinstance(value, bool):
        raise BadArguments(f"'{name}' must be true or false, got {value!r}")
    return value
