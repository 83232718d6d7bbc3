"""Tool-call accounting: classification of results and per-tool counts."""

from __future__ import annotations

from typing import Any

import pytest

from agent.export.tool_stats import is_failure, tool_stats, unknown_tools_called


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
    stats, errors = tool_stats(messages, ["write_file", "terminal", "read_file"])
    assert stats == {
        "made_up_tool": {"count": 1, "success": 0, "failure": 1},
        "read_file": {"count": 1, "success": 1, "failure": 0},
        "terminal": {"count": 3, "success": 1, "failure": 1},
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
        {"role": "assistant", "content": "", "tool_calls": ["not a dict"]},
    ]
    stats, errors = tool_stats(messages, ["terminal"])
    assert stats == {"terminal": {"count": 1, "success": 1, "failure": 0}}
    assert errors == {"terminal": 0}


def test_unknown_tools_called() -> None:
    messages = [calls(("a", "terminal"), ("b", "web_serch")), calls(("c", "browser_click"))]
    assert unknown_tools_called(messages, {"terminal", "read_file"}) == {"web_serch", "browser_click"}
    assert unknown_tools_called([], {"terminal"}) == set()
