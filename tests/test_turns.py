"""Typed conversation turns (`agent.protocols.turns`): a history from elsewhere reads into turns
and renders back to the same OpenAI messages, a malformed one is refused naming the message,
and what the loop knows (reasoning separated or forced, renamed call ids, failed results)
rides on its turns to the exports, which read it instead of deriving it again."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agent.batch.records import answer, render_entry
from agent.config.agent_config import AgentConfig
from agent.export.analysis import analyse
from agent.export.sharegpt import to_sharegpt
from agent.llm.factory import open_chat_model
from agent.loop.agent_loop import converse
from agent.loop.conversation import ConversationResult, Prompt
from agent.protocols.turns import (
    AssistantTurn,
    MalformedMessage,
    ToolTurn,
    UserTurn,
    from_openai_messages,
    to_openai_messages,
    turn_call,
)
from agent.sandboxes import SandboxOptions, sandbox_factory
from agent.servers.endpoint_server import EndpointServer
from agent.servers.simulated.replies import build_completion
from agent.servers.simulated.server import Turn
from agent.toolbox.registry import resolve_tools
from tests.support.batch import job
from tests.support.histories import HISTORIES, call

ls = json.dumps({"command": "ls"})
FOREIGN: dict[str, list[dict[str, Any]]] = {
    "OpenAI's own shapes": [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "u"}}],
        },
        {"role": "assistant", "content": None, "tool_calls": [call("c1", "terminal", ls)]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "assistant", "content": "Done."},
    ],
    "the loop's history form": [
        {"role": "user", "content": "q"},
        {
            "role": "assistant",
            "content": "",
            "reasoning": "why",
            "_reasoning_separated": True,
            "tool_calls": [call("x", "terminal", ls), call("x~2", "read_file", "")],
            "_renamed_call_ids": {"x~2": "x"},
            "reasoning_details": [{"type": "reasoning.encrypted", "data": "sig"}],
            "_reasoning_forced": True,
        },
        {"role": "tool", "tool_call_id": "x", "name": "terminal", "content": '{"error": "boom"}'},
        {"role": "tool", "tool_call_id": "x~2", "name": "read_file", "content": "text"},
        {
            "role": "assistant",
            "content": "cut",
            "reasoning": None,
            "_reasoning_separated": True,
            "truncated": True,
        },
        {"role": "user", "content": "[continue]", "_injected": True},
    ],
}


@pytest.mark.parametrize("name", list(FOREIGN))
def test_a_foreign_history_reads_into_turns_and_renders_back_equal(name: str) -> None:
    turns = from_openai_messages(FOREIGN[name])
    assert to_openai_messages(turns) == FOREIGN[name]
    assert from_openai_messages(to_openai_messages(turns)) == turns


@pytest.mark.parametrize("name", list(HISTORIES))
def test_every_export_test_history_renders_back_into_the_same_turns(name: str) -> None:
    """(Their assistant messages say `"reasoning": None` where OpenAI's leave the key out; a
    turn does not keep which, so these come back equal as turns and as ShareGPT.)"""
    turns = from_openai_messages(HISTORIES[name])
    again = from_openai_messages(to_openai_messages(turns))
    assert again == turns
    assert to_sharegpt(again, []) == to_sharegpt(turns, [])


def test_what_the_history_form_says_is_on_the_turns() -> None:
    _, asked, failed, read, cut, injected = from_openai_messages(FOREIGN["the loop's history form"])
    assert isinstance(asked, AssistantTurn) and asked.reasoning_separated and asked.reasoning_forced
    assert [(c.id, c.sent_id, c.arguments) for c in asked.calls] == [
        ("x", "x", {"command": "ls"}),
        ("x~2", "x", {}),
    ]
    assert isinstance(failed, ToolTurn) and failed.error and isinstance(read, ToolTurn) and not read.error
    assert isinstance(cut, AssistantTurn) and cut.truncated and cut.tokens is None
    assert isinstance(injected, UserTurn) and injected.injected


def asking(calls: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": calls}


@pytest.mark.parametrize(
    ("message", "problem"),
    [
        ("not a message", "message 1: not an object"),
        ({"role": "robot", "content": "x"}, "message 1: unknown role 'robot'"),
        ({"content": "no role"}, "message 1: unknown role None"),
        ({"role": "user", "content": None}, "message 1: a user message's content is no text"),
        ({"role": "user", "content": ["no part object"]}, "message 1: a user message's content is no text"),
        ({"role": "system", "content": 3}, "message 1: 'content' is no string"),
        ({"role": "assistant", "content": 7}, "message 1: an assistant message's content"),
        (asking("nope"), "message 1: an assistant message's tool_calls"),
        (asking(["junk"]), "message 1: a tool call is no object"),
        (asking([{"id": "a"}]), "message 1: a tool call is no object"),
        (
            asking([{"function": {"name": "t", "arguments": "{}"}}]),
            "message 1: 'id' is no string: None",
        ),
        (
            asking([{"id": "a", "function": {"arguments": "{}"}}]),
            "message 1: 'name' is no string",
        ),
        (
            asking([call("a", "t", 5)]),  # type: ignore[arg-type]
            "message 1: tool call arguments are no JSON string",
        ),
        ({"role": "tool", "content": "x"}, "message 1: 'tool_call_id' is no string"),
        (
            {"role": "tool", "tool_call_id": "a", "content": ["x"]},
            "message 1: a tool message's name and content",
        ),
    ],
)
def test_a_malformed_message_is_refused_naming_it(message: Any, problem: str) -> None:
    with pytest.raises(MalformedMessage, match=problem.replace("(", r"\(")):
        from_openai_messages([{"role": "user", "content": "q"}, message])


def test_the_exports_read_the_flags_on_the_turns_not_the_text() -> None:
    """A separated turn's content is never split again, and a result's error flag is what
    counts: the text alone would say otherwise in both cases."""
    turns = (
        UserTurn("q"),
        AssistantTurn("Type <think>x</think> to think.", None, (turn_call("a", "terminal", ls),)),
        ToolTurn("a", "terminal", "looks fine", error=True),
    )
    (gpt,) = (t["value"] for t in to_sharegpt(turns, []) if t["from"] == "gpt")
    assert gpt.startswith("<think>\n</think>\nType <think>x</think> to think.\n<tool_call>")
    analysis = analyse(turns, ["terminal"])
    assert analysis.tool_stats["terminal"] == {"count": 1, "success": 0, "failure": 1, "nonzero_exit": 0}
    assert not analysis.reasoning.has_any_reasoning


def forced_endpoint(turns: list[Turn]) -> EndpointServer:
    """Simulated replies to a conversation in `turns`: every call of a turn gets the id "dup"
    and every reply says its reasoning was forced (as the embedded server's grammar does)."""

    async def respond(body: dict[str, Any]) -> dict[str, Any]:
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        completion = build_completion(body, turns[done], "sim-model")
        message = completion["choices"][0]["message"]
        for tool_call in message.get("tool_calls", []):
            tool_call["id"] = "dup"
        message["reasoning_forced"] = True
        return completion

    return EndpointServer(respond)


def test_a_real_conversation_carries_its_flags_from_the_loop_to_the_entry(tmp_path: Path) -> None:
    calls = (("terminal", json.dumps({"command": "echo one"})), ("read_file", json.dumps({"path": "/nope"})))
    script = [Turn(reasoning="two calls", tool_calls=calls), Turn(content="done", reasoning="over")]
    options = SandboxOptions(backend="local", root=str(tmp_path / "sandboxes"))

    async def run(base_url: str) -> ConversationResult:
        config = AgentConfig(model="sim-model", base_url=base_url, max_retries=0)
        model = open_chat_model(config)
        try:
            tools = resolve_tools(["terminal", "file"])
            return await converse(
                config, model, tools, Prompt("flags", job().sandbox_spec("run")), sandbox_factory(options)
            )
        finally:
            await model.aclose()

    with forced_endpoint(script) as endpoint:
        done = asyncio.run(run(endpoint.base_url))
    _, asked, terminal, read_file, _ = done.turns
    assert isinstance(asked, AssistantTurn) and asked.reasoning_separated and asked.reasoning_forced
    assert [(c.id, c.sent_id) for c in asked.calls] == [("dup", "dup"), ("dup~2", "dup")]
    assert asked.calls[1].arguments == {"path": "/nope"}  # parsed once, by the loop
    assert isinstance(terminal, ToolTurn) and not terminal.error and terminal.call_id == "dup"
    assert isinstance(read_file, ToolTurn) and read_file.error and read_file.call_id == "dup~2"
    assert to_openai_messages(done.turns)[1]["_renamed_call_ids"] == {"dup~2": "dup"}

    entry, analysis = render_entry(job(), done, done.usage.as_dict())
    assert analysis.flaws == ("duplicate_call_id",)  # from the id the model sent, kept on the call
    assert entry["metadata"]["reasoning_forced_turns"] == 2
    assert entry["tool_stats"]["read_file"] == {"count": 1, "success": 0, "failure": 1}
    assert entry["tool_stats"]["terminal"] == {"count": 1, "success": 1, "failure": 0, "nonzero_exit": 0}
    kept = answer(job(), done, keep_no_reasoning=False, keep_malformed=True)
    assert json.loads(kept.line)["conversations"] == entry["conversations"]  # type: ignore[union-attr]
