"""Trajectory conversion (ShareGPT), the system template, reasoning stats and saving."""

from __future__ import annotations

import dataclasses
import json
import logging
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from agent.errors import ConfigError
from agent.export.analysis import ReasoningStats, TurnText, analyse, reasoning_stats
from agent.export.formats import FORMATS, get_format, render
from agent.export.samples_file import save_trajectory
from agent.export.sharegpt import ShareGPT, convert, hermes_system_message, to_sharegpt
from agent.protocols.turns import MalformedMessage, from_openai_messages
from tests.support.histories import GOLDEN, TERMINAL, assistant, call, result, user


def gpt_values(conversations: list[dict[str, str]]) -> list[str]:
    return [turn["value"] for turn in conversations if turn["from"] == "gpt"]


def one_gpt(message: dict[str, Any]) -> str:
    (value,) = gpt_values(to_sharegpt(from_openai_messages([user("q"), message]), [TERMINAL]))
    return value


# ---------------------------------------------------------------- the spec's example


def test_spec_example_reproduced_byte_for_byte() -> None:
    messages = [
        user("What Python version is installed?"),
        assistant(
            "",
            "The user wants to know the Python version. I should run python3 --version.",
            [call("call_abc123", "terminal", '{"command": "python3 --version"}')],
        ),
        result("call_abc123", "terminal", "Python 3.11.6"),
        assistant(
            "Python 3.11.6 is installed on this system.", "Got the version. I can now answer the user."
        ),
    ]
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))["conversations"]
    converted = convert(from_openai_messages(messages), [TERMINAL])
    assert json.dumps(converted.conversations) == json.dumps(expected)
    assert converted.warnings == []


def test_system_message_accepts_api_definitions_and_keeps_order_and_unicode() -> None:
    second = {"name": "zeta", "description": "café ☕", "parameters": {"type": "object", "properties": {}}}
    plain = hermes_system_message([second, TERMINAL])
    wrapped = hermes_system_message([{"type": "function", "function": s} for s in (second, TERMINAL)])
    assert plain == wrapped
    tools = json.loads(plain.split("<tools>\n")[1].split("\n</tools>")[0])
    assert [t["name"] for t in tools] == ["zeta", "terminal"]
    assert all(t["required"] is None for t in tools)
    assert "café ☕" in plain  # ensure_ascii=False


def test_system_message_without_tools_has_empty_list() -> None:
    assert "<tools>\n[]\n</tools>" in hermes_system_message([])


# ---------------------------------------------------------------- think normalisation


def test_turn_without_reasoning_gets_an_empty_think_block() -> None:
    assert one_gpt(assistant("  The answer.  ")) == "<think>\n</think>\nThe answer."


def test_native_reasoning_is_wrapped() -> None:
    assert one_gpt(assistant("Done.", "  step one  ")) == "<think>\nstep one\n</think>\nDone."


def test_scratchpad_in_content_becomes_the_think_block() -> None:
    value = one_gpt(assistant("<REASONING_SCRATCHPAD>plan it</REASONING_SCRATCHPAD>\nAnswer"))
    assert value == "<think>\nplan it\n</think>\nAnswer"


def test_inline_block_already_copied_to_reasoning_is_not_repeated() -> None:
    value = one_gpt(assistant("<think>same thought</think>\nAnswer", "same thought"))
    assert value == "<think>\nsame thought\n</think>\nAnswer"


def test_with_native_reasoning_a_different_inline_block_is_the_answers_text() -> None:
    value = one_gpt(assistant("<REASONING_SCRATCHPAD>scratch</REASONING_SCRATCHPAD>Answer", "native"))
    assert value == "<think>\nnative\n</think>\n<REASONING_SCRATCHPAD>scratch</REASONING_SCRATCHPAD>Answer"


def test_tags_after_the_start_of_the_content_stay_in_the_answer() -> None:
    value = one_gpt(assistant("<think>plan</think>Type <think>x</think> to think."))
    assert value == "<think>\nplan\n</think>\nType <think>x</think> to think."
    stats = analyse(from_openai_messages([user("q"), assistant("Type <think>x</think>.")]))
    assert stats.turns[1] == TurnText("", "Type <think>x</think>.") and not stats.reasoning.has_any_reasoning


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("<think>cut off at max_tok", "<think>\ncut off at max_tok\n</think>"),
        ("Answer<think>not reasoning", "<think>\n</think>\nAnswer<think>not reasoning"),
        ("opened by the template</think>\nAnswer", "<think>\nopened by the template\n</think>\nAnswer"),
        ("<THINK>upper</THINK>Answer", "<think>\nupper\n</think>\nAnswer"),
        ("<think>  </think>Answer", "<think>\n</think>\nAnswer"),
        (None, "<think>\n</think>"),
    ],
)
def test_odd_inline_reasoning_shapes(content: str | None, expected: str) -> None:
    assert one_gpt(assistant(content)) == expected  # type: ignore[arg-type]


def test_tool_calls_follow_content_and_are_right_stripped() -> None:
    calls = [call("c1", "terminal", '{"command": "ls"}'), call("c2", "read_file", '{"path": "a é"}')]
    value = one_gpt(assistant("  Let me look.  ", "why", calls))
    assert value == (
        "<think>\nwhy\n</think>\nLet me look.\n"
        '<tool_call>\n{"name": "terminal", "arguments": {"command": "ls"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_file", "arguments": {"path": "a \\u00e9"}}\n</tool_call>'
    )


# ---------------------------------------------------------------- tool turns


def test_results_grouped_into_one_turn_named_by_call_id_in_history_order() -> None:
    messages = [
        user("q"),
        assistant("", "r", [call("a", "terminal", "{}"), call("b", "read_file", "{}")]),
        result("b", "WRONG", '{"content": "file"}'),  # answers b first: name must come from the call
        result("a", "WRONG", "plain output"),
        assistant("done", "r2"),
    ]
    turns = to_sharegpt(from_openai_messages(messages), [TERMINAL])
    assert [t["from"] for t in turns] == ["system", "human", "gpt", "tool", "gpt"]
    first, second = turns[3]["value"].split("\n<tool_response>")
    assert json.loads(first.removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")) == {
        "tool_call_id": "b",
        "name": "read_file",
        "content": {"content": "file"},
    }
    assert json.loads(second.removeprefix("\n").removesuffix("\n</tool_response>")) == {
        "tool_call_id": "a",
        "name": "terminal",
        "content": "plain output",
    }


@pytest.mark.parametrize(
    ("content", "embedded"),
    [
        ('  {"exit_code": 0}', {"exit_code": 0}),
        ("[1, 2]", [1, 2]),
        ("{not json", "{not json"),
        ('{"a": 1} plus a hint', '{"a": 1} plus a hint'),
        ("", ""),
    ],
)
def test_tool_content_embedded_as_json_only_when_it_parses(content: str, embedded: Any) -> None:
    turns = to_sharegpt(
        from_openai_messages(
            [user("q"), assistant("", None, [call("x", "terminal", "{}")]), result("x", "t", content)]
        ),
        [],
    )
    body = turns[3]["value"].removeprefix("<tool_response>\n").removesuffix("\n</tool_response>")
    assert json.loads(body)["content"] == embedded


def test_injected_messages_are_skipped_and_later_user_messages_kept() -> None:
    messages = [
        user("the prompt"),
        assistant("partial", "r"),
        user("[System: continue]", _injected=True),
        assistant("injected reply", _injected=True),
        user("a real follow-up"),
        assistant("final", "r3"),
    ]
    turns = to_sharegpt(from_openai_messages(messages), [])
    assert [(t["from"], t["value"]) for t in turns[1:]] == [
        ("human", "the prompt"),
        ("gpt", "<think>\nr\n</think>\npartial"),
        ("human", "a real follow-up"),
        ("gpt", "<think>\nr3\n</think>\nfinal"),
    ]


def test_multimodal_user_content_keeps_only_its_text() -> None:
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    prompt = user([{"type": "text", "text": "What is shown?"}, image])  # type: ignore[arg-type]
    assert to_sharegpt(from_openai_messages([prompt]), [])[1] == {"from": "human", "value": "What is shown?"}


def test_bad_arguments_become_empty_objects_and_are_reported(caplog: pytest.LogCaptureFixture) -> None:
    calls = [
        call("a", "terminal", '{"command": "ls"'),
        call("b", "terminal", "[1]"),
        call("c", "terminal", ""),
    ]
    messages = [user("q"), assistant("", None, calls)] + [result(i, "terminal", "ok") for i in "abc"]
    with caplog.at_level(logging.WARNING, logger="agent.export.sharegpt"):
        converted = convert(from_openai_messages(messages), [])
    assert gpt_values(converted.conversations)[0].count('"arguments": {}') == 3
    assert len(converted.warnings) == 2  # an empty string is a call without arguments, not an error
    assert "not valid JSON" in converted.warnings[0] and '{"command": "ls"' in converted.warnings[0]
    assert "not a JSON object" in converted.warnings[1]
    assert len(caplog.records) == 2


def test_orphan_results_and_unanswered_calls_are_reported() -> None:
    messages = [
        user("q"),
        result("ghost", "terminal", "before any call"),
        assistant("", None, [call("a", "terminal", "{}"), call("b", "terminal", "{}")]),
        result("a", "terminal", "ok"),
        result("zzz", "terminal", "answers nothing"),
    ]
    converted = convert(from_openai_messages(messages), [])
    assert [t["from"] for t in converted.conversations] == ["system", "human", "gpt", "tool"]
    assert "answers nothing" not in converted.conversations[3]["value"]
    assert len(converted.warnings) == 3
    assert "'b'" in converted.warnings[2] and "no result" in converted.warnings[2]


def test_non_object_tool_call_entries_are_refused_by_name() -> None:
    """A history from elsewhere with a call entry that is no object is refused where it is
    read (`from_openai_messages`), naming the message and the entry, before any export."""
    with pytest.raises(MalformedMessage, match=r"message 1: a tool call is no object.*'junk'"):
        from_openai_messages([user("q"), assistant("", None, ["junk", call("a", "terminal", "{}")])])


def test_every_gpt_turn_has_exactly_one_think_block() -> None:
    messages = [
        user("q"),
        assistant("<think>a</think>x", "a", [call("1", "terminal", "{}")]),
        result("1", "terminal", "<think>tool output mentioning think</think>"),
        assistant("<REASONING_SCRATCHPAD>b</REASONING_SCRATCHPAD>y"),
        assistant("plain"),
    ]
    values = gpt_values(to_sharegpt(from_openai_messages(messages), []))
    assert len(values) == 3
    assert all(v.count("<think>") == 1 and v.startswith("<think>\n") for v in values)


def test_sharegpt_is_a_value() -> None:
    assert isinstance(convert([], []), ShareGPT)
    assert [t["from"] for t in convert([], []).conversations] == ["system"]


# ---------------------------------------------------------------- reasoning stats


def test_reasoning_stats_count_native_and_inline_but_not_injected_or_blank() -> None:
    messages = [
        user("q"),
        assistant("a", "native"),
        assistant("<REASONING_SCRATCHPAD>s</REASONING_SCRATCHPAD>b"),
        assistant("<think>t</think>c"),
        assistant("d", "   "),
        assistant("<think></think>e"),
        assistant("f", "injected", _injected=True),
    ]
    stats = reasoning_stats(from_openai_messages(messages))
    assert (stats.assistant_turns, stats.turns_with_reasoning, stats.turns_without_reasoning) == (5, 3, 2)
    assert stats.has_any_reasoning
    assert not reasoning_stats(from_openai_messages([user("q"), assistant("plain")])).has_any_reasoning
    assert not reasoning_stats(from_openai_messages([user("q")])).has_any_reasoning


# ---------------------------------------------------------------- saving


def read_lines(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_save_picks_the_file_by_completion_and_appends(tmp_path: Path) -> None:
    turns = [{"from": "human", "value": "héllo"}]
    ok = save_trajectory(turns, "m", True, directory=tmp_path)
    save_trajectory(turns, "m", True, directory=tmp_path)
    failed = save_trajectory(turns, "m", False, directory=tmp_path)
    custom = save_trajectory(turns, "m", False, filename="mine.jsonl", directory=tmp_path)
    assert (ok.name, failed.name, custom.name) == (
        "trajectory_samples.jsonl",
        "failed_trajectories.jsonl",
        "mine.jsonl",
    )
    rows = read_lines(ok)
    assert len(rows) == 2
    assert list(rows[0]) == ["conversations", "timestamp", "model", "completed"]
    assert rows[0]["conversations"] == turns and rows[0]["model"] == "m" and rows[0]["completed"] is True
    datetime.fromisoformat(rows[0]["timestamp"])
    assert read_lines(failed)[0]["completed"] is False
    assert "héllo" in ok.read_text(encoding="utf-8")


def test_torn_last_line_is_moved_aside_not_glued(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "trajectory_samples.jsonl"
    path.write_text('{"n": 1}\n{"conversations": [{"from": "hum', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="agent.export.sharegpt"):
        save_trajectory([], "m", True, directory=tmp_path)
    rows = read_lines(path)
    assert rows[0] == {"n": 1} and rows[1]["model"] == "m" and len(rows) == 2
    torn = tmp_path / "trajectory_samples.jsonl.torn"
    assert torn.read_text(encoding="utf-8") == '{"conversations": [{"from": "hum\n'
    assert "torn last line" in caplog.text


def test_torn_only_line_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"partial": tr')
    save_trajectory([], "m", True, filename="x.jsonl", directory=tmp_path)
    assert len(read_lines(path)) == 1
    assert (tmp_path / "x.jsonl.torn").read_bytes() == b'{"partial": tr\n'


def test_complete_last_line_missing_only_its_newline_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text('{"n": 1}\n{"n": 2}', encoding="utf-8")
    save_trajectory([], "m", True, filename="x.jsonl", directory=tmp_path)
    rows = read_lines(path)
    assert rows[:2] == [{"n": 1}, {"n": 2}] and len(rows) == 3
    assert not (tmp_path / "x.jsonl.torn").exists()


def test_torn_tail_longer_than_one_scan_block(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    fragment = b'{"v": "' + b"a" * 200_000
    path.write_bytes(b'{"n": 1}\n' + fragment)
    save_trajectory([], "m", True, filename="x.jsonl", directory=tmp_path)
    assert read_lines(path)[0] == {"n": 1} and len(read_lines(path)) == 2
    assert (tmp_path / "x.jsonl.torn").read_bytes() == fragment + b"\n"


# ---------------------------------------------------------------- the export seam


def test_formats_are_chosen_by_name_and_an_unknown_one_is_a_config_error() -> None:
    assert get_format("sharegpt").name == "sharegpt" and "sharegpt" in FORMATS
    with pytest.raises(ConfigError, match="unknown trajectory format 'parquet'; valid: openai, sharegpt"):
        get_format("parquet")


def test_one_analysis_feeds_the_conversion_and_the_statistics() -> None:
    messages = [
        user("q"),
        assistant("<think>inline</think>visible", None, [call("a", "terminal", "{}")]),
        result("a", "terminal", '{"error": "boom"}'),
        assistant("answer"),
    ]
    rendered = render(from_openai_messages(messages), [TERMINAL], all_tools=["terminal", "read_file"])
    assert rendered.fields == {"conversations": to_sharegpt(from_openai_messages(messages), [TERMINAL])}
    assert rendered.analysis.turns[1] == TurnText("inline", "visible")
    assert rendered.analysis.reasoning == ReasoningStats(assistant_turns=2, turns_with_reasoning=1)
    assert rendered.analysis.tool_stats == {
        "read_file": {"count": 0, "success": 0, "failure": 0},
        "terminal": {"count": 1, "success": 0, "failure": 1, "nonzero_exit": 0},
    }


def test_the_sharegpt_format_renders_from_the_analysis_it_is_given() -> None:
    """The conversion reads each turn's reasoning and content from the analysis, never
    parsing the message again: a doctored analysis shows up in the output."""
    messages = [user("q"), assistant("<think>r</think>a")]
    analysis = analyse(from_openai_messages(messages))
    doctored = dataclasses.replace(analysis, turns={1: TurnText("from the analysis", "content too")})
    (value,) = gpt_values(
        get_format("sharegpt").render(from_openai_messages(messages), [], doctored)["conversations"]
    )
    assert value == "<think>\nfrom the analysis\n</think>\ncontent too"


# ---------------------------------------------------------------- well-formedness


@pytest.mark.parametrize(
    ("message", "flaws"),
    [
        (assistant("<tool_call>\n{}\n</tool_call>"), ("leaked_tool_call",)),
        (assistant("<TOOL_CALL>{}</TOOL_CALL>", "r"), ("leaked_tool_call",)),
        (assistant("<tool_call>", None, [call("a", "terminal", "{}")]), ()),  # a real call was made
        (assistant("answer", "I could write <tool_call> here"), ()),  # reasoning may mention it
        (assistant("", None, [call("a", "terminal", "{bad")]), ("invalid_arguments",)),
        (assistant("", None, [call("a", "terminal", "[1]")]), ("invalid_arguments",)),
        (assistant("", None, [call("a", "terminal", "")]), ()),  # no arguments: an empty object
        (assistant("", None, [call("a", "web_search", "{}")]), ("tool_not_offered",)),
        (
            assistant("", None, [call("a", "terminal", "{}"), call("a", "terminal", "{}")]),
            ("duplicate_call_id",),
        ),
        (
            assistant(
                "",
                None,
                [call("a", "terminal", "{}"), call("a~2", "terminal", "{}")],
                _renamed_call_ids={"a~2": "a"},
            ),
            ("duplicate_call_id",),
        ),
    ],
)
def test_the_analysis_notes_what_makes_a_conversation_malformed(
    message: dict[str, Any], flaws: tuple[str, ...]
) -> None:
    assert analyse(from_openai_messages([user("q"), message]), offered={"terminal"}).flaws == flaws


def test_offered_tools_are_checked_only_when_known_and_render_knows_them() -> None:
    messages = [user("q"), assistant("", None, [call("a", "web_search", "{}")])]
    assert analyse(from_openai_messages(messages)).flaws == ()
    assert render(from_openai_messages(messages), [TERMINAL]).analysis.flaws == ("tool_not_offered",)
    api_definition = {"type": "function", "function": {**TERMINAL, "name": "web_search"}}
    assert render(from_openai_messages(messages), [api_definition]).analysis.flaws == ()


def test_repeated_ids_pair_results_with_calls_in_order() -> None:
    messages = [
        user("q"),
        assistant("", None, [call("x", "terminal", "{}"), call("x", "read_file", "{}")]),
        result("x", "terminal", "from terminal"),
        result("x", "read_file", '{"error": "from read_file"}'),
        user("again"),
        assistant("", None, [call("x", "read_file", "{}")]),
        result("x", "read_file", "second turn"),
    ]
    converted = convert(from_openai_messages(messages), [TERMINAL])
    first, second = (
        json.loads(r.split("</tool_response>")[0])
        for r in converted.conversations[3]["value"].split("<tool_response>\n")[1:]
    )
    assert (first["name"], first["content"]) == ("terminal", "from terminal")
    assert (second["name"], second["content"]) == ("read_file", {"error": "from read_file"})
    stats = analyse(from_openai_messages(messages)).tool_stats
    assert stats["terminal"] == {"count": 1, "success": 1, "failure": 0, "nonzero_exit": 0}
    assert stats["read_file"] == {"count": 2, "success": 1, "failure": 1}
