"""A stdlib-only MCP server over stdio (newline-delimited JSON-RPC 2.0) for the tests.

Stdlib only because it runs under a bare `python3` inside the sandboxes (bwrap's system
python, docker's python:3.11-slim), where the `mcp` SDK is not installed; the tests check that
the official SDK client accepts it. Deterministic and offline.

    python3 mcp_stdio_server.py [--crash-at-start] [--hang-at-start] [--slow-start=S] [--bad-schema]
                                [--stderr-noise] [--name=NAME]

Tools: add(a, b) (with structured content), echo(text), note_write(name, text) /
note_read(name) (files in the working directory), env_value(name), image() (a 2x2 PNG),
resource() (an embedded text resource), fail() (an isError result), crash() (exits in the
middle of the call), hang() (never answers), sleep(seconds), big(n) (n bytes of text).
Each tools/call runs in a thread of its own, so a hung call does not stop pings or other calls.
"""

from __future__ import annotations

import base64
import json
import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable
from typing import Any

PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
NOISE_LINE = "noise: " + "n" * 200 + "\n"
NOISE_LINES = 5000  # ~1 MB: more than a pipe holds, so an undrained stderr would block us

_write_lock = threading.Lock()


def _send(message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode() + b"\n"
    with _write_lock:  # one writer at a time: call threads answer concurrently
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def _text(text: str, *, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "isError": error}


def tiny_png() -> bytes:
    """A 2x2 red RGB PNG, built here so the server needs no file."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", 2, 2, 8, 2, 0, 0, 0)
    pixels = b"".join(b"\x00" + b"\xff\x00\x00" * 2 for _row in range(2))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(pixels))
        + chunk(b"IEND", b"")
    )


def _note_path(name: str) -> str | None:
    """A note's file in the working directory; None for a name that would leave it."""
    if not name or "/" in name or "\\" in name or name.startswith("."):
        return None
    return os.path.join(os.getcwd(), name)


def tool_add(args: dict[str, Any]) -> dict[str, Any]:
    total = args["a"] + args["b"]
    return {"content": [{"type": "text", "text": str(total)}], "structuredContent": {"result": total}}


def tool_note_write(args: dict[str, Any]) -> dict[str, Any]:
    path = _note_path(str(args["name"]))
    if path is None:
        return _text(f"bad note name: {args['name']!r}", error=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(str(args["text"]))
    return _text(f"wrote {args['name']}")


def tool_note_read(args: dict[str, Any]) -> dict[str, Any]:
    path = _note_path(str(args["name"]))
    if path is None or not os.path.isfile(path):
        return _text(f"no note named {args['name']!r}", error=True)
    with open(path, encoding="utf-8") as handle:
        return _text(handle.read())


def tool_env_value(args: dict[str, Any]) -> dict[str, Any]:
    value = os.environ.get(str(args["name"]))
    return _text("(unset)" if value is None else value)


def tool_image(_args: dict[str, Any]) -> dict[str, Any]:
    data = base64.b64encode(tiny_png()).decode()
    return {
        "content": [
            {"type": "text", "text": "a red square"},
            {"type": "image", "data": data, "mimeType": "image/png"},
        ]
    }


def tool_resource(_args: dict[str, Any]) -> dict[str, Any]:
    resource = {"uri": "note://readme", "mimeType": "text/plain", "text": "the resource's text"}
    return {"content": [{"type": "resource", "resource": resource}]}


def tool_crash(_args: dict[str, Any]) -> dict[str, Any]:
    sys.stderr.write("crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)  # at once, mid-call: no answer, no cleanup


def tool_hang(_args: dict[str, Any]) -> dict[str, Any]:
    while True:  # never answers; the thread dies with the process
        time.sleep(3600)


def tool_sleep(args: dict[str, Any]) -> dict[str, Any]:
    time.sleep(float(args["seconds"]))
    return _text(f"slept {args['seconds']}")


def tool_big(args: dict[str, Any]) -> dict[str, Any]:
    n = int(args["n"])
    return _text(("0123456789" * (n // 10 + 1))[:n])


def _schema(properties: dict[str, str], required: tuple[str, ...] | None = None) -> dict[str, Any]:
    props = {name: {"type": kind} for name, kind in properties.items()}
    return {
        "type": "object",
        "properties": props,
        "required": list(properties if required is None else required),
    }


Handler = Callable[[dict[str, Any]], dict[str, Any]]
TOOLS: dict[str, tuple[str, dict[str, Any], Handler]] = {
    "add": ("Add two numbers.", _schema({"a": "number", "b": "number"}), tool_add),
    "echo": ("Return the text given.", _schema({"text": "string"}), lambda a: _text(str(a["text"]))),
    "note_write": ("Write a note (a file).", _schema({"name": "string", "text": "string"}), tool_note_write),
    "note_read": ("Read a note written before.", _schema({"name": "string"}), tool_note_read),
    "env_value": ("An environment variable's value.", _schema({"name": "string"}), tool_env_value),
    "image": ("A small PNG image.", _schema({}), tool_image),
    "resource": ("An embedded text resource.", _schema({}), tool_resource),
    "fail": (
        "Always fails (an error result).",
        _schema({}),
        lambda _a: _text("it failed, as asked", error=True),
    ),
    "crash": ("The server exits during the call.", _schema({}), tool_crash),
    "hang": ("Never answers.", _schema({}), tool_hang),
    "sleep": ("Sleep some seconds, then answer.", _schema({"seconds": "number"}), tool_sleep),
    "big": ("n bytes of text.", _schema({"n": "integer"}), tool_big),
}
OUTPUT_SCHEMAS = {
    "add": {"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]}
}


def _tool_list() -> list[dict[str, Any]]:
    listed = []
    for name, (description, schema, _handler) in TOOLS.items():
        entry: dict[str, Any] = {"name": name, "description": description, "inputSchema": schema}
        if name in OUTPUT_SCHEMAS:
            entry["outputSchema"] = OUTPUT_SCHEMAS[name]
        listed.append(entry)
    return listed


def _call(request_id: Any, params: dict[str, Any]) -> None:
    """Runs in its own thread: a tool's answer, or an isError result for bad arguments."""
    handler = TOOLS[params["name"]][2]
    try:
        result = handler(dict(params.get("arguments") or {}))
    except (KeyError, TypeError, ValueError) as exc:  # the caller's arguments: its error to read
        result = _text(f"bad arguments for {params['name']}: {exc!r}", error=True)
    _send({"jsonrpc": "2.0", "id": request_id, "result": result})


def _initialize(params: dict[str, Any], name: str) -> dict[str, Any]:
    asked = params.get("protocolVersion")
    version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": name, "version": "1.0.0"},
    }


def _error(request_id: Any, code: int, message: str) -> None:
    _send({"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}})


def _handle(message: Any, name: str, noisy: bool) -> None:
    if not isinstance(message, dict) or "method" not in message:
        return  # a response to nothing we asked, or junk without an id to answer
    if noisy:
        sys.stderr.write(f"request: {message['method']}\n")
    if "id" not in message:
        return  # notifications (initialized, cancelled) need no answer
    request_id, method, params = message["id"], message["method"], message.get("params") or {}
    if method == "initialize":
        _send({"jsonrpc": "2.0", "id": request_id, "result": _initialize(params, name)})
    elif method == "ping":
        _send({"jsonrpc": "2.0", "id": request_id, "result": {}})
    elif method == "tools/list":
        tools = _tool_list() + ([{"name": "odd", "inputSchema": "notanobject"}] if BAD_SCHEMA else [])
        _send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
    elif method == "tools/call" and params.get("name") == "server_error":  # not listed: called by name
        _error(request_id, -32000, "internal kaboom")  # JSON-RPC's usual server error, as the SDK's "closed"
    elif method == "tools/call" and params.get("name") == "not_mcp":  # a reply whose result is no object
        _send({"jsonrpc": "2.0", "id": request_id, "result": 42})
    elif method == "tools/call" and params.get("name") == "wrong_id":  # a reply to no call made
        _send({"jsonrpc": "2.0", "id": f"{request_id}-x", "result": _text("lost")})
    elif method == "tools/call" and params.get("name") == "not_utf8":  # Latin-1, not UTF-8
        text = {"content": [{"type": "text", "text": "café au lait"}]}
        data = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": text}, ensure_ascii=False)
        with _write_lock:
            sys.stdout.buffer.write(data.encode("latin-1") + b"\n")
            sys.stdout.buffer.flush()
    elif method == "tools/call" and params.get("name") in TOOLS:
        threading.Thread(target=_call, args=(request_id, params), daemon=True).start()
    elif method == "tools/call":
        _error(request_id, -32602, f"Unknown tool: {params.get('name')!r}")
    else:
        _error(request_id, -32601, f"Method not found: {method}")


def _serve(name: str, noisy: bool) -> None:
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        try:
            message = json.loads(raw)
        except ValueError:
            _error(None, -32700, "Parse error")
            continue
        _handle(message, name, noisy)


BAD_SCHEMA = False  # --bad-schema: tools/list also names a tool whose inputSchema is a string


def _start_up(flags: dict[str, str]) -> None:
    if "--stderr-noise" in flags:
        sys.stderr.write(NOISE_LINE * NOISE_LINES)
        sys.stderr.flush()
    if "--crash-at-start" in flags:
        sys.stderr.write("crashing at start, as asked\n")
        sys.exit(2)
    if "--hang-at-start" in flags:
        while True:  # reads nothing, answers nothing
            time.sleep(3600)
    if "--slow-start" in flags:
        time.sleep(float(flags["--slow-start"]))


def main(argv: list[str]) -> None:
    flags = {arg.partition("=")[0]: arg.partition("=")[2] for arg in argv}
    known = {
        "--crash-at-start",
        "--hang-at-start",
        "--slow-start",
        "--stderr-noise",
        "--name",
        "--bad-schema",
    }
    if unknown := set(flags) - known:
        sys.exit(f"unknown arguments: {sorted(unknown)}")
    global BAD_SCHEMA
    BAD_SCHEMA = "--bad-schema" in flags
    _start_up(flags)
    _serve(flags.get("--name") or "test-stdio-server", "--stderr-noise" in flags)


if __name__ == "__main__":
    main(sys.argv[1:])
