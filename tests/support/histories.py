"""Chat histories for the trajectory-format tests: message builders (user, assistant, a tool call,
its result), tool schemas, the golden spec example, and histories covering each case a
conversion must survive (shared by the ShareGPT, OpenAI-messages and TRL export tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "spec_example.json"


TERMINAL = {
    "name": "terminal",
    "description": "Execute shell commands",
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(
    content: str = "", reasoning: str | None = None, calls: Any = None, **extra: Any
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content, "reasoning": reasoning, **extra}
    if calls is not None:
        message["tool_calls"] = calls
    return message


def call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def result(call_id: str, name: str, content: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


READ_FILE = {
    "name": "read_file",
    "description": "Read a file – «quoted» ✓",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "limit": {"type": "integer", "default": 50}},
        "required": ["path"],
    },
}


SCHEMAS = [TERMINAL, READ_FILE]


ls = json.dumps({"command": "ls"})


HISTORIES: dict[str, list[dict[str, Any]]] = {
    "parallel calls, one tool turn": [
        user("two at once"),
        assistant("", "Both.", [call("c1", "terminal", ls), call("c2", "read_file", '{"path": "a.txt"}')]),
        result("c1", "terminal", '{"output": "a.txt", "exit_code": 0}'),
        result("c2", "read_file", "hello\nworld"),
        assistant("Done.", "All there."),
    ],
    "parallel calls of one tool": [
        user("same tool twice"),
        assistant("", "Twice.", [call("x1", "terminal", ls), call("x2", "terminal", '{"command": "pwd"}')]),
        result("x1", "terminal", "a.txt"),
        result("x2", "terminal", "/work"),
        assistant("Both ran.", "ok"),
    ],
    "tool errors": [
        user("read a missing file"),
        assistant("Let me look.", None, [call("e1", "read_file", '{"path": "/nope"}')]),
        result("e1", "read_file", '{"error": "No such file: /nope", "success": false}'),
        assistant("It does not exist.", None, [call("e2", "terminal", '{"command": "false"}')]),
        result("e2", "terminal", ""),
        assistant("Giving up.", "Nothing works."),
    ],
    "truncated answer and unanswered calls": [
        user("cut short"),
        assistant("", "Start.", [call("t1", "terminal", ls), call("t2", "terminal", ls)]),
        result("t1", "terminal", "{not json"),
        assistant("The answer is", "Thinking…"),
    ],
    "interrupted turn: calls without results": [
        user("stopped"),
        assistant("Running", "go", [call("u1", "terminal", ls)]),
    ],
    "no-reasoning turns and several user turns": [
        user("first"),
        assistant("plain answer"),
        user('second: ünïcødé ✓ "quoted"'),
        assistant("", None, [call("n1", "terminal", '{"command": "echo \\u00e9"}')]),
        result("n1", "terminal", "[1, 2, 3]"),
        assistant("  spaced  "),
    ],
    "think blocks and tags in the text": [
        user("think"),
        assistant("<think>inline reasoning\nover lines</think>The answer mentions <think> later."),
        user("scratchpad"),
        assistant("<REASONING_SCRATCHPAD>pad</REASONING_SCRATCHPAD>\nAnswer."),
        user("explain the tags"),
        assistant("Use <tool_call> and </tool_call> tags; <think>x</think> too.", "native"),
        user("empty block then a block"),
        assistant("<think></think><think>second</think>answer"),
        user("native reasoning and another leading block"),
        assistant("<think>not the reasoning</think>answer", "native"),
        user("reasoning that closes a think block itself"),
        assistant("final", "first\n</think>\nsecond"),
    ],
    "leaked call text that parses": [
        user("leak"),
        assistant(
            'I would write:\n<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>'
        ),
    ],
}
