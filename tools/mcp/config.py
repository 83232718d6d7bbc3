"""The `--mcp_config` file: `{"mcpServers": {name: entry}}` as Claude Desktop and Cursor write
it, read into `McpServer` records (tools not yet listed). Every problem is a ConfigError naming
the file, the entry and the field (`FILE: mcpServers.NAME.FIELD: reason`): one line, exit 2.

`${VAR}` in `env` and `headers` values is taken from the runner's environment, so a key need
not be written in the file; `files` ({path in the server's cwd: host path}) are read here, at
the CLI edge, and travel to the workers inside the config."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from agent.common.config_text import read_config_text
from agent.common.secrets import started_secrets
from agent.errors import ConfigError
from agent.protocols import McpServer
from tools.mcp.names import FUNCTION_NAME, toolset_name_problem

MAX_FILES_BYTES = 1 << 20  # all of a server's `files` together: they travel with every job's config
TYPES = ("stdio", "http", "streamable-http")
_STDIO_KEYS = {"command", "args", "env", "cwd", "host", "files"}
_HTTP_KEYS = {"url", "headers"}
_COMMON_KEYS = {"type", "startup_timeout", "call_timeout", "tool_prefix", "disabled"}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class EntryError(Exception):
    """A field of one entry is wrong: (field, reason)."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(field, reason)
        self.field, self.reason = field, reason


def read_config(path: str, environ: Mapping[str, str] | None = None) -> tuple[McpServer, ...]:
    """The servers `path` declares (those not `"disabled": true`), in the file's order."""
    if environ is None:  # the secret variables the runner took out of its environment at start too
        environ = {**started_secrets().environ, **os.environ}
    try:
        data = json.loads(read_config_text(path))
    except OSError as exc:
        raise ConfigError(f"--mcp_config: cannot read {path}: {exc.strerror or exc}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ConfigError(f"{path}: nests too deeply to be a configuration") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict) or not servers:
        shape = '{"mcpServers": {name: {command, args, env} | {url, headers}}}'
        what = "no server in it" if isinstance(servers, dict) else "expected an object of servers"
        raise ConfigError(f"{path}: mcpServers: {what} ({shape})")
    out = []
    for name, entry in servers.items():
        problem = toolset_name_problem(name)
        if problem is not None:
            raise ConfigError(f"{path}: mcpServers.{name}: {problem}")
        try:
            server = _server(name, entry, Path(path).parent, environ)
        except EntryError as exc:
            where = f"mcpServers.{name}" + (f".{exc.field}" if exc.field else "")
            raise ConfigError(f"{path}: {where}: {exc.reason}") from None
        if server is not None:
            out.append(server)
    return tuple(out)


def _server(name: str, entry: Any, base: Path, environ: Mapping[str, str]) -> McpServer | None:
    if not isinstance(entry, dict):
        raise EntryError("", "expected an object ({command, args, env} or {url, headers})")
    kind = _transport(entry)
    allowed = _COMMON_KEYS | (_STDIO_KEYS if kind == "stdio" else _HTTP_KEYS)
    for key in entry:
        if key not in allowed:
            raise EntryError(key, f"not a field of a {kind} server (valid: {', '.join(sorted(allowed))})")
    if _typed(entry, "disabled", bool, False):
        return None
    common: dict[str, Any] = {
        "name": name,
        "startup_timeout": _seconds(entry, "startup_timeout", 30.0),
        "call_timeout": _seconds(entry, "call_timeout", 60.0),
        "tool_prefix": _prefix(entry),
    }
    if kind == "http":
        return McpServer(url=_url(entry), headers=_expanded(entry, "headers", environ), **common)
    return _stdio(entry, base, environ, common)


def _transport(entry: dict[str, Any]) -> str:
    declared = entry.get("type")
    if declared == "sse":
        raise EntryError("type", "SSE servers are not supported: only streamable HTTP (and stdio) is")
    if declared is not None and declared not in TYPES:
        raise EntryError("type", f"{declared!r} is not one of {', '.join(TYPES)}")
    has_url, has_command = "url" in entry, "command" in entry
    if has_url == has_command:
        raise EntryError("command", "give either command (a stdio server) or url (an HTTP server)")
    kind = "http" if has_url else "stdio"
    if declared is not None and (declared == "stdio") != (kind == "stdio"):
        raise EntryError("type", f"{declared!r} does not match the entry's {'url' if has_url else 'command'}")
    return kind


def _stdio(
    entry: dict[str, Any], base: Path, environ: Mapping[str, str], common: dict[str, Any]
) -> McpServer:
    command = _typed(entry, "command", str, "")
    if not command.strip():
        raise EntryError("command", "expected the program to run")
    args = _typed(entry, "args", list, [])
    if not all(isinstance(arg, str) for arg in args):
        raise EntryError("args", "expected a list of strings")
    host = _typed(entry, "host", bool, False)
    cwd = _typed(entry, "cwd", str, "") or None
    if host and entry.get("files"):
        raise EntryError("files", "only for a server in the sandbox (a host server reads host paths itself)")
    files = _files(entry, base)
    if cwd is not None and not host and not cwd.startswith("/"):
        raise EntryError("cwd", "give an absolute path inside the sandbox")
    env = _expanded(entry, "env", environ)
    return McpServer(command=command, args=tuple(args), env=env, host=host, cwd=cwd, files=files, **common)


def _typed(entry: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = entry.get(key, default)
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise EntryError(key, f"expected {_KIND_NAMES[kind]}, got {json.dumps(value)[:60]}")
    return value


_KIND_NAMES: dict[type, str] = {str: "a string", list: "a list", bool: "true or false", dict: "an object"}


def _seconds(entry: dict[str, Any], key: str, default: float) -> float:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 86400:
        raise EntryError(key, f"expected seconds, a number in (0, 86400], got {json.dumps(value)[:60]}")
    return float(value)


def _prefix(entry: dict[str, Any]) -> str:
    prefix: str = _typed(entry, "tool_prefix", str, "")
    if prefix and not FUNCTION_NAME.fullmatch(prefix + "x"):
        raise EntryError(
            "tool_prefix", "letters, digits, _ and - only, at most 63 (it starts each tool's name)"
        )
    return prefix


def _url(entry: dict[str, Any]) -> str:
    url: str = _typed(entry, "url", str, "")
    if not url.startswith(("http://", "https://")):
        raise EntryError("url", f"expected an http:// or https:// URL, got {url[:60]!r}")
    return url


def _expanded(entry: dict[str, Any], key: str, environ: Mapping[str, str]) -> dict[str, str]:
    """`env`/`headers` with each `${VAR}` replaced by the runner's variable (unset: an error)."""
    values: dict[str, Any] = _typed(entry, key, dict, {})
    out = {}
    for name, value in values.items():
        if not isinstance(value, str):
            raise EntryError(f"{key}.{name}", "expected a string")
        out[name] = _VARIABLE.sub(_lookup(f"{key}.{name}", environ), value)
    return out


def _lookup(field: str, environ: Mapping[str, str]) -> Callable[[re.Match[str]], str]:
    def value(match: re.Match[str]) -> str:
        variable = match.group(1)
        if variable not in environ:
            raise EntryError(field, f"${{{variable}}} is not set in the runner's environment")
        return environ[variable]

    return value


def _files(entry: dict[str, Any], base: Path) -> tuple[tuple[str, bytes], ...]:
    """`files` read now: {relative path in the server's cwd: host path (relative to the file)}."""
    declared: dict[str, Any] = _typed(entry, "files", dict, {})
    out, total = [], 0
    for target, source in declared.items():
        field = f"files.{target}"
        pure = PurePosixPath(target)
        if not target or pure.is_absolute() or ".." in pure.parts:
            raise EntryError(field, "expected a relative path without '..' (inside the server's cwd)")
        if not isinstance(source, str):
            raise EntryError(field, "expected the host path of the file to copy")
        try:
            data = (base / source).read_bytes()
        except OSError as exc:
            raise EntryError(field, f"cannot read {source}: {exc.strerror or exc}") from None
        total += len(data)
        if total > MAX_FILES_BYTES:
            raise EntryError(field, f"the files add up to more than {MAX_FILES_BYTES} bytes")
        out.append((str(pure), data))
    return tuple(out)
