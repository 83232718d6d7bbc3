"""The conversation a tiny embedded model sees: instructions, worked examples, history.

Small models follow a short instruction plus a worked example far better than a tool
schema dump, and they answer from a tool result only when it arrives as a *user* message
(measured: given `tool` role messages they repeat the call). So the history is re-rendered:
assistant turns become the JSON the model itself writes, tool results become user messages.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

_Message = dict[str, Any]
_Function = dict[str, Any]

# One worked example per well-known tool: (question, purpose, arguments, tool output, answer).
# This order scored best in a 12-prompt comparison (the model leans on the nearest example).
_EXAMPLES: dict[str, tuple[str, str, dict[str, str], str, str]] = {
    "read_file": (
        "What does the file todo.txt say?",
        "read todo.txt",
        {"path": "todo.txt"},
        '{"content": "     1|buy milk\\n", "total_lines": 1, "file_size": 9, "truncated": false}',
        "The file todo.txt says: buy milk.",
    ),
    "write_file": (
        "Write 'hi there' to a file greeting.txt.",
        "write the text to greeting.txt",
        {"path": "greeting.txt", "content": "hi there"},
        '{"bytes_written": 8, "path": "greeting.txt"}',
        "Done: greeting.txt now contains 'hi there'.",
    ),
    "terminal": (
        "Which directory am I in? Use the terminal.",
        "run pwd, which prints the directory",
        {"command": "pwd"},
        '{"output": "/home/user\\n", "exit_code": 0, "error": null}',
        "You are in /home/user.",
    ),
}


# The one worked example of answering from a tool result (see `render_messages`).
_ANSWER_EXAMPLE: tuple[_Message, ...] = (
    {"role": "user", "content": "How big is data.csv?"},
    {
        "role": "user",
        "content": 'Called terminal with {"command": "wc -c data.csv"}\n\nResult of terminal:\n'
        '{"output": "1532 data.csv\\n", "exit_code": 0, "error": null}\n\n'
        "Now answer the question: How big is data.csv?",
    },
    {
        "role": "assistant",
        "content": '{"reasoning": "The output says 1532 data.csv.", "answer": "data.csv is 1532 bytes."}',
    },
)


def _first_sentence(text: str, limit: int = 120) -> str:
    sentence = text.strip().split("\n", 1)[0].split(". ", 1)[0].rstrip(".")
    return sentence[:limit]


def _argument_hint(schema: dict[str, Any]) -> str:
    fields = {name: f"<{prop.get('type', 'value')}>" for name, prop in schema.get("properties", {}).items()}
    return json.dumps(fields)


def instructions(offered: list[_Function], arguments_schema: Callable[[_Function], dict[str, Any]]) -> str:
    """The system prompt: the reply format and, when tools are offered, the tool list."""
    answer = '{"reasoning": "<one short sentence>", "answer": "<the answer for the user>"}'
    if not offered:
        return f"You are a helpful assistant. Reply with one JSON object: {answer}"
    # The tools with a worked example first: the model leans on what it saw first.
    ordered = sorted(offered, key=lambda f: f["name"] not in _EXAMPLES)
    lines = [
        f"- {f['name']}: {_first_sentence(f.get('description', ''))}. "
        f"Arguments: {_argument_hint(arguments_schema(f))}"
        for f in ordered
    ]
    call = '{"reasoning": "<one short sentence>", "tool": "<tool name>", "arguments": {...}}'
    return (
        "You are a helpful assistant that can use tools. Reply with one JSON object.\n"
        "Tools:\n" + "\n".join(lines) + f"\n\nTo use a tool, reply: {call}\n"
        f"When you know the answer, reply: {answer}"
    )


def _example_fits(name: str, offered: list[_Function], arguments_schema: Callable[[_Function], Any]) -> bool:
    for function in offered:
        if function["name"] == name:
            return set(arguments_schema(function)["properties"]) == set(_EXAMPLES[name][2])
    return False


def examples(offered: list[_Function], arguments_schema: Callable[[_Function], Any]) -> list[_Message]:
    """Worked examples for the offered tools we know, as prior conversation turns."""
    turns: list[_Message] = []
    for name, (question, purpose, arguments, output, answer) in _EXAMPLES.items():
        if not _example_fits(name, offered, arguments_schema):
            continue
        why = f"I will use the {name} tool to {purpose}."
        call = {"reasoning": why, "tool": name, "arguments": arguments}
        final = {"reasoning": f"The {name} result answers the question.", "answer": answer}
        turns += [
            {"role": "user", "content": question},
            {"role": "assistant", "content": json.dumps(call)},
            {"role": "user", "content": f"Result of {name}:\n{output}"},
            {"role": "assistant", "content": json.dumps(final)},
        ]
    return turns


def _assistant_turns(message: _Message) -> str:
    """An assistant message as the JSON the model writes. Agents do not send reasoning back,
    so a missing one gets the examples' stock sentence rather than breaking the pattern."""
    reasoning = str(message.get("reasoning") or message.get("reasoning_content") or "").strip()
    calls = message.get("tool_calls") or []
    if not calls:
        why = reasoning or "I know the answer."
        return json.dumps({"reasoning": why, "answer": _text(message.get("content"))})
    rendered = []
    for call in calls:
        function = call.get("function", {})
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except ValueError:
            arguments = function.get("arguments")
        why = reasoning or f"I will use the {function.get('name')} tool to find out."
        rendered.append(json.dumps({"reasoning": why, "tool": function.get("name"), "arguments": arguments}))
    return "\n".join(rendered)


def _text(content: Any) -> str:
    """Message content as plain text (content parts are joined)."""
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... {len(text) - limit} more characters]"


def _calls_as_text(message: _Message) -> str:
    calls = message.get("tool_calls") or []
    return "\n".join(f"Called {c['function']['name']} with {c['function']['arguments']}" for c in calls)


def history(
    messages: list[_Message], tool_result_max_chars: int, *, fold_calls: bool = False
) -> tuple[str, list[_Message]]:
    """(system text, the conversation) with tool results folded into user messages. With
    `fold_calls`, tool calls are told in that user message too, not as assistant turns:
    measured, an answer written after our stand-in reasoning tends to repeat it."""
    system: list[str] = []
    turns: list[_Message] = []
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls") or [] if "id" in c}
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            system.append(_text(message.get("content")))
        elif role == "assistant" and fold_calls and message.get("tool_calls"):
            turns.append({"role": "user", "content": _calls_as_text(message), "_results": True})
        elif role == "assistant":
            turns.append({"role": "assistant", "content": _assistant_turns(message)})
        elif role == "tool":
            name = message.get("name") or names.get(message.get("tool_call_id", ""), "the tool")
            result = f"Result of {name}:\n{_clip(_text(message.get('content')), tool_result_max_chars)}"
            if turns and turns[-1]["role"] == "user" and turns[-1].get("_results"):
                turns[-1]["content"] += "\n\n" + result
            else:
                turns.append({"role": "user", "content": result, "_results": True})
        else:
            turns.append({"role": "user", "content": _text(message.get("content"))})
    return "\n\n".join(s for s in system if s.strip()), turns


def _question(messages: list[_Message]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return _text(message.get("content"))
    return ""


def render_messages(
    messages: list[_Message],
    *,
    answer_only: bool,
    known: list[_Function],
    tool_result_max_chars: int,
    arguments_schema: Callable[[_Function], dict[str, Any]],
) -> list[_Message]:
    """The full message list for llama.cpp."""
    operator_system, turns = history(messages, tool_result_max_chars, fold_calls=answer_only)
    if answer_only:
        # Only one neutral worked example here: measured, with the tool examples the model
        # copies their answers instead of reading the tool result in front of it.
        system, shots = instructions([], arguments_schema), list(_ANSWER_EXAMPLE)
        if turns and turns[-1].get("_results"):
            turns[-1]["content"] += f"\n\nNow answer the question: {_question(messages)}"
    else:
        # Depends on the known tools only, never on the turn, so llama.cpp's prompt cache
        # reuses it across the first turns of every prompt.
        system, shots = instructions(known, arguments_schema), examples(known, arguments_schema)
    if operator_system:
        system += "\n\n" + operator_system
    clean = [{"role": t["role"], "content": t["content"]} for t in turns]
    return [{"role": "system", "content": system}, *shots, *clean]
