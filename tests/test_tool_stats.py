"""Tool-call accounting: classification of results and per-tool counts, also of the results
the real tools give (web_extract on the shipped offline corpus, terminal in a local sandbox)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.export.tool_stats import is_failure, tool_stats, unknown_tools_called
from agent.protocols import ToolConfig
from agent.protocols.turns import MalformedMessage, from_openai_messages
from agent.sandboxes.local.sandbox import LocalSandbox
from agent.toolbox.context import SandboxContext
from tools.terminal import TOOLSET as TERMINAL
from tools.web.handlers import web_extract

CORPUS = Path(__file__).resolve().parent.parent / "data" / "corpus"


def calls(*pairs: tuple[str, str], injected: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": "{}"}} for i, n in pairs
        ],
    }
    if injected:
        message["_injected"] = True
    return message


def result(call_id: str, content: str, name: str = "ignored") -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": call_id, "name": name, "content": content}


@pytest.mark.parametrize(
    ("content", "failed"),
    [
        ('{"error": "no such file"}', True),
        ('{"success": false, "message": "x"}', True),
        ("", True),
        ("   \n", True),
        (None, True),
        ('{"error": null, "output": "hi", "exit_code": 1}', False),  # the command ran: success
        ('{"success": true}', False),
        ('{"success": 0}', False),  # only the JSON literal false counts
        ("plain text output", False),
        ("Error: looks bad but is not JSON", False),
        ('[{"error": "inside an array"}]', False),
        ('{"error": "x"} followed by a hint', False),  # not JSON as a whole
        ('"a JSON string"', False),
        ('{"results": [{"url": "u", "error": "not in the offline corpus"}]}', True),  # its own channel
        ('{"results": [{"url": "u", "error": "x"}, {"url": "v", "content": "y"}]}', False),  # some URLs
        ('{"results": [], "note": "no results"}', False),  # a search that found nothing did its job
    ],
)
def test_classification(content: str | None, failed: bool) -> None:
    assert is_failure(content) is failed


def test_counts_match_results_by_call_id_with_every_known_tool_present() -> None:
    messages = [
        {"role": "user", "content": "q"},
        calls(("a", "terminal"), ("b", "read_file"), ("c", "terminal")),
        result("c", '{"error": "boom"}', name="read_file"),  # out of order, misleading name
        result("a", "fine"),
        result("b", '{"content": "x"}'),
        calls(("d", "made_up_tool")),
        result("d", '{"error": "Unknown tool"}'),
        calls(("e", "terminal")),  # no result (interrupted): counted as a call only
    ]
    stats, errors = tool_stats(from_openai_messages(messages), ["write_file", "terminal", "read_file"])
    assert stats == {
        "made_up_tool": {"count": 1, "success": 0, "failure": 1},
        "read_file": {"count": 1, "success": 1, "failure": 0},
        "terminal": {"count": 3, "success": 1, "failure": 1, "nonzero_exit": 0},
        "write_file": {"count": 0, "success": 0, "failure": 0},
    }
    assert list(stats) == sorted(stats)
    assert errors == {"made_up_tool": 1, "read_file": 0, "terminal": 1, "write_file": 0}


def test_orphan_duplicate_and_injected_entries_are_ignored() -> None:
    messages = [
        result("nobody", '{"error": "orphan"}'),
        calls(("a", "terminal")),
        result("a", "ok"),
        result("a", '{"error": "second answer to the same call"}'),
        calls(("z", "terminal"), injected=True),
        result("z", '{"error": "x"}'),
    ]
    stats, errors = tool_stats(from_openai_messages(messages), ["terminal"])
    assert stats == {"terminal": {"count": 1, "success": 1, "failure": 0, "nonzero_exit": 0}}
    assert errors == {"terminal": 0}
    # A call entry that is no object is no longer skipped: the history is refused where it is read.
    with pytest.raises(MalformedMessage, match="message 0: a tool call is no object"):
        from_openai_messages([{"role": "assistant", "content": "", "tool_calls": ["not a dict"]}])


def test_unknown_tools_called() -> None:
    messages = [calls(("a", "terminal"), ("b", "web_serch")), calls(("c", "browser_click"))]
    assert unknown_tools_called(from_openai_messages(messages), {"terminal", "read_file"}) == {
        "web_serch",
        "browser_click",
    }
    assert unknown_tools_called([], {"terminal"}) == set()


@pytest.mark.anyio
async def test_real_tool_results_count_their_own_errors_and_exit_codes(local_sandbox: LocalSandbox) -> None:
    """Every URL answered "not in the offline corpus" counted as a web_extract success, and a
    command exiting 2 as a plain terminal success: 100 % success for calls that got nothing."""
    context = SandboxContext(local_sandbox, ToolConfig(web_corpus=str(CORPUS)))
    terminal = next(spec.handler for spec in TERMINAL.tools if spec.name == "terminal")
    assert terminal is not None
    try:
        missing = await web_extract(
            {"urls": ["https://nowhere.example/a", "https://nowhere.example/b"]}, context
        )
        exited = await terminal({"command": "ls /definitely/not/here"}, context)
        fine = await terminal({"command": "echo hi"}, context)
    finally:
        await context.aclose()
    assert all("offline corpus" in item["error"] for item in missing["results"])
    assert exited["exit_code"] == 2 and exited["error"] is None
    messages = [
        calls(("w", "web_extract"), ("t", "terminal"), ("f", "terminal")),
        result("w", json.dumps(missing)),
        result("t", json.dumps(exited)),
        result("f", json.dumps(fine)),
    ]
    stats, errors = tool_stats(from_openai_messages(messages), ["web_extract", "terminal"])
    assert stats == {
        "terminal": {"count": 2, "success": 2, "failure": 0, "nonzero_exit": 1},
        "web_extract": {"count": 1, "success": 0, "failure": 1},
    }
    assert errors == {"terminal": 0, "web_extract": 1}
