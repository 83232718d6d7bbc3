"""The terminal family's tool schemas (what the model is told) and the limits they state."""

from __future__ import annotations

from typing import Any

DEFAULT_TIMEOUT = 180  # seconds; the model may ask for another value up to MAX_TIMEOUT
MAX_TIMEOUT = 600
DEFAULT_WAIT = 60  # seconds process(action="wait") waits unless told otherwise
DEFAULT_LOG_LINES = 200  # lines process(action="log") returns unless told otherwise
MAX_RUNNING = 8  # background processes running at once in one conversation
LIFETIME = 3600  # seconds a background process may run before it is killed
MAX_STDIN_BYTES = 1 << 20  # one write to a background process's stdin

TERMINAL_SCHEMA: dict[str, Any] = {
    "name": "terminal",
    "description": (
        "Run a shell command (bash -c) in your private sandbox and return its combined "
        "stdout/stderr and exit code. Each call is a fresh shell: `cd` and variables do not "
        "persist between calls, so chain steps with && or pass `workdir`. Commands are "
        "non-interactive (stdin is empty); use flags such as -y. For a server or a long job "
        "pass background=true: the call returns at once with a session_id, and the process "
        "tool reads its output, sends it input, waits for it or kills it. Long outputs are "
        "truncated in the middle."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command to run."},
            "background": {
                "type": "boolean",
                "description": (
                    "Start the command in the background and return at once with a session_id "
                    f"(default false). At most {MAX_RUNNING} run at once; each is killed after "
                    f"{LIFETIME // 60} minutes or when the task ends."
                ),
            },
            "timeout": {
                "type": "integer",
                "description": (
                    f"Seconds before the command is killed (default {DEFAULT_TIMEOUT}, "
                    f"at most {MAX_TIMEOUT}). Not used with background=true."
                ),
                "minimum": 1,
                "maximum": MAX_TIMEOUT,
            },
            "workdir": {
                "type": "string",
                "description": "Directory to run in (default: the sandbox's working directory).",
            },
        },
        "required": ["command"],
    },
}

PROCESS_ACTIONS = ("list", "poll", "log", "wait", "kill", "write", "submit", "close")

PROCESS_SCHEMA: dict[str, Any] = {
    "name": "process",
    "description": (
        "Manage the background processes started with terminal(background=true): `list` them; "
        "`poll` one for its status and the output it wrote since the last poll or wait; `log` "
        f"pages its whole output by lines (default the last {DEFAULT_LOG_LINES}); `wait` until "
        "it exits (or `timeout` seconds, then its output so far); `kill` it; `write` raw text to "
        "its stdin, `submit` a line (data plus Enter), `close` its stdin (end of input)."
    ),
    "parameters": {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(PROCESS_ACTIONS)},
            "session_id": {
                "type": "string",
                "description": "The process to act on, as terminal returned it (all actions but list).",
            },
            "data": {"type": "string", "description": "For write and submit: the text to send to stdin."},
            "timeout": {
                "type": "integer",
                "description": f"For wait: seconds to wait (default {DEFAULT_WAIT}, at most {MAX_TIMEOUT}).",
                "minimum": 1,
                "maximum": MAX_TIMEOUT,
            },
            "offset": {
                "type": "integer",
                "description": "For log: the first line to return, from 0 (default: the last lines).",
                "minimum": 0,
            },
            "limit": {
                "type": "integer",
                "description": f"For log: how many lines to return (default {DEFAULT_LOG_LINES}).",
                "minimum": 1,
            },
        },
        "required": ["action"],
    },
}
