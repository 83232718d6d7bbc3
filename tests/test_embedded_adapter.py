"""The embedded adapter: turn plans, schemas, the rendered prompt, and output → message."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from agent.servers.embedded.adapter import (
    AdapterPolicy,
    RequestRefused,
    build_llama_request,
    build_response,
    output_bound,
    parse_turn,
    plan_turn,
    turn_schema,
)

TERMINAL = {
    "name": "terminal",
    "description": "Run a shell command in the sandbox. Returns its output.",
    "parameters": {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command."},
            "timeout": {"type": "integer", "minimum": 1},
        },
        "required": ["command"],
    },
}
READ_FILE = {
    "name": "read_file",
    "description": "Read a text file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "offset": {"type": "integer"}},
        "required": ["path"],
    },
}
WRITE_FILE = {
    "name": "write_file",
    "description": "Write a file.",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string", "maxLength": 50}},
        "required": ["path", "content"],
    },
}
NO_ARGS = {"name": "clock", "description": "The time.", "parameters": {"type": "object", "properties": {}}}
POLICY = AdapterPolicy()


def tools(*functions: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "function", "function": f} for f in functions]


def body(
    *messages: dict[str, Any], offered: list[dict[str, Any]] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"model": "embedded", "messages": list(messages), "tools": offered or [], **extra}


QUESTION = {"role": "user", "content": "How many lines are in notes.txt?"}
SYSTEM = {"role": "system", "content": "You work in a sandbox."}


def call_turn(call_id: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    function = {"name": name, "arguments": json.dumps(arguments)}
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": call_id, "type": "function", "function": function}],
    }


def result_turn(call_id: str, content: str, name: str | None = None) -> dict[str, Any]:
    message = {"role": "tool", "tool_call_id": call_id, "content": content}
    return message | ({"name": name} if name else {})


AFTER_ONE_CALL = (
    SYSTEM,
    QUESTION,
    call_turn("call_1", "terminal", {"command": "wc -l notes.txt"}),
    result_turn("call_1", '{"output": "3 notes.txt\\n", "exit_code": 0}'),
)

# ---------------------------------------------------------------- which shapes a turn allows


def test_first_turn_with_tools_must_call_a_tool() -> None:
    plan = plan_turn(body(QUESTION, offered=tools(TERMINAL, READ_FILE)), POLICY)
    assert [f["name"] for f in plan.tools] == ["terminal", "read_file"]
    assert plan.answer is False


def test_after_max_tool_rounds_only_the_answer_is_offered() -> None:
    plan = plan_turn(body(*AFTER_ONE_CALL, offered=tools(TERMINAL)), POLICY)
    assert plan.tools == [] and plan.answer is True


def test_between_min_and_max_rounds_both_shapes_are_offered() -> None:
    policy = AdapterPolicy(min_tool_rounds=1, max_tool_rounds=3)
    plan = plan_turn(body(*AFTER_ONE_CALL, offered=tools(TERMINAL)), policy)
    assert [f["name"] for f in plan.tools] == ["terminal"] and plan.answer is True


def test_rounds_restart_at_each_user_message() -> None:
    follow_up = {"role": "user", "content": "And in todo.txt?"}
    plan = plan_turn(body(*AFTER_ONE_CALL, follow_up, offered=tools(TERMINAL)), POLICY)
    assert [f["name"] for f in plan.tools] == ["terminal"]


def test_no_tools_or_tool_choice_none_means_answer_only() -> None:
    assert plan_turn(body(QUESTION), POLICY).tools == []
    plan = plan_turn(body(QUESTION, offered=tools(TERMINAL), tool_choice="none"), POLICY)
    assert plan.tools == [] and plan.answer


def test_tool_choice_naming_a_function_offers_only_that_one() -> None:
    choice = {"type": "function", "function": {"name": "read_file"}}
    plan = plan_turn(body(QUESTION, offered=tools(TERMINAL, READ_FILE), tool_choice=choice), POLICY)
    assert [f["name"] for f in plan.tools] == ["read_file"] and not plan.answer


# ---------------------------------------------------------------- the schema


def branches(schema: dict[str, Any]) -> list[dict[str, Any]]:
    return list(schema.get("anyOf", [schema]))


def test_schema_has_one_branch_per_tool_plus_the_answer() -> None:
    plan = plan_turn(
        body(*AFTER_ONE_CALL, offered=tools(TERMINAL, READ_FILE, WRITE_FILE)),
        AdapterPolicy(max_tool_rounds=2),
    )
    found = branches(turn_schema(plan, POLICY))
    assert [b["properties"].get("tool", {}).get("const") for b in found] == [
        "terminal",
        "read_file",
        "write_file",
        None,
    ]
    assert found[-1]["required"] == ["reasoning", "answer"]
    for branch in found:
        assert branch["additionalProperties"] is False
        assert branch["properties"]["reasoning"]["maxLength"] == POLICY.reasoning_max_chars


def test_tool_branch_arguments_keep_required_properties_with_capped_strings() -> None:
    plan = plan_turn(body(QUESTION, offered=tools(TERMINAL, WRITE_FILE)), POLICY)
    terminal, write = (b["properties"]["arguments"] for b in branches(turn_schema(plan, POLICY)))
    assert terminal["properties"] == {
        "command": {"type": "string", "description": "The command.", "maxLength": 120}
    }
    assert terminal["required"] == ["command"] and terminal["additionalProperties"] is False
    assert write["properties"]["content"]["maxLength"] == 50  # the tool's own cap wins
    loose = turn_schema(plan, AdapterPolicy(required_args_only=False))
    assert "timeout" in branches(loose)[0]["properties"]["arguments"]["properties"]


def test_tool_without_parameters_gets_an_empty_closed_object() -> None:
    plan = plan_turn(body(QUESTION, offered=tools(NO_ARGS)), POLICY)
    arguments = turn_schema(plan, POLICY)["properties"]["arguments"]
    assert arguments == {"type": "object", "properties": {}, "required": [], "additionalProperties": False}


def test_tool_branch_reasoning_must_name_its_tool() -> None:
    plan = plan_turn(body(QUESTION, offered=tools(TERMINAL, READ_FILE)), POLICY)
    terminal, read = branches(turn_schema(plan, POLICY))
    pattern = terminal["properties"]["reasoning"]["pattern"]
    assert re.search(pattern, "I will use the terminal tool to count the lines.")
    assert not re.search(pattern, "I will use the read_file tool to count the lines.")
    assert not re.search(pattern, "I will use terminal to count the lines.")
    assert re.search(read["properties"]["reasoning"]["pattern"], "I will use the read_file tool to look.")


def test_request_carries_the_schema_and_no_tools_field() -> None:
    request = build_llama_request(body(SYSTEM, QUESTION, offered=tools(TERMINAL)), POLICY)
    assert "tools" not in request and request["stream"] is False and request["temperature"] == 0.0
    assert request["response_format"]["type"] == "json_schema"
    schema = request["response_format"]["json_schema"]["schema"]
    assert schema["properties"]["tool"] == {"const": "terminal"}


def test_max_tokens_fits_the_longest_allowed_turn_unless_the_caller_asks_for_less() -> None:
    plan = plan_turn(body(QUESTION, offered=tools(TERMINAL, WRITE_FILE)), POLICY)
    bound = output_bound(plan, POLICY)
    assert bound >= POLICY.reasoning_max_chars + 120 + 50  # write_file's two strings
    assert (
        build_llama_request(body(QUESTION, offered=tools(TERMINAL, WRITE_FILE)), POLICY)["max_tokens"]
        == bound
    )
    asked = build_llama_request(
        body(QUESTION, offered=tools(TERMINAL), max_tokens=40, temperature=0.7), POLICY
    )
    assert asked["max_tokens"] == 40 and asked["temperature"] == 0.7


def test_sampling_fields_llama_cpp_reads_are_passed() -> None:
    sampling = {"seed": 7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "repeat_penalty": 1.1}
    asked = build_llama_request(body(QUESTION, stop=[], presence_penalty=None, **sampling), POLICY)
    assert {key: asked.get(key) for key in sampling} == sampling
    assert "stop" not in asked and "presence_penalty" not in asked


@pytest.mark.parametrize("stop", ["END", ["END", "###"]])
def test_a_stop_is_refused_not_dropped(stop: object) -> None:
    # A row's own sampling can ask one: the prompt fails saying why, rather than its entry
    # recording a stop that never reached llama.cpp (a JSON turn cut by it would be unreadable).
    with pytest.raises(RequestRefused, match=r"stop is not supported: .*remove the row's sampling\.stop"):
        build_llama_request(body(QUESTION, offered=tools(TERMINAL), stop=stop), POLICY)


# ---------------------------------------------------------------- the rendered prompt


def test_tool_results_become_user_messages_and_calls_become_the_models_json() -> None:
    mixed = AdapterPolicy(max_tool_rounds=2)  # tools still offered after one round
    messages = build_llama_request(body(*AFTER_ONE_CALL, offered=tools(TERMINAL)), mixed)["messages"]
    assert {m["role"] for m in messages} <= {"system", "user", "assistant"}
    call, result = messages[-2], messages[-1]
    assert json.loads(call["content"]) == {
        "reasoning": "I will use the terminal tool to find out.",
        "tool": "terminal",
        "arguments": {"command": "wc -l notes.txt"},
    }
    assert result == {
        "role": "user",
        "content": 'Result of terminal:\n{"output": "3 notes.txt\\n", "exit_code": 0}',
    }
    assert "You work in a sandbox." in messages[0]["content"]


def test_answer_only_turn_tells_call_and_result_then_asks_the_question_again() -> None:
    messages = build_llama_request(body(*AFTER_ONE_CALL, offered=tools(TERMINAL)), POLICY)["messages"]
    assert messages[-2] == QUESTION
    last = messages[-1]
    assert last["role"] == "user"
    assert last["content"].startswith(
        'Called terminal with {"command": "wc -l notes.txt"}\n\nResult of terminal:\n'
    )
    assert "3 notes.txt" in last["content"]
    assert last["content"].endswith("Now answer the question: How many lines are in notes.txt?")
    assert "You work in a sandbox." in messages[0]["content"]


def test_results_of_one_turn_share_one_user_message_and_are_clipped() -> None:
    two_calls = {
        "role": "assistant",
        "content": None,
        "reasoning": "Both files.",
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "x"}'}},
            {"id": "b", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "y"}'}},
        ],
    }
    convo = body(
        QUESTION, two_calls, result_turn("a", "X" * 5000), result_turn("b", "why"), offered=tools(READ_FILE)
    )
    messages = build_llama_request(convo, AdapterPolicy(max_tool_rounds=2, tool_result_max_chars=100))[
        "messages"
    ]
    assert len(messages[-2]["content"].splitlines()) == 2  # one JSON line per call
    assert all(
        json.loads(line)["reasoning"] == "Both files." for line in messages[-2]["content"].splitlines()
    )
    assert messages[-1]["content"].count("Result of read_file:") == 2
    assert "[... 4900 more characters]" in messages[-1]["content"]


def test_worked_examples_only_for_offered_tools_whose_arguments_match() -> None:
    odd_terminal = {**TERMINAL, "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}}}
    messages = build_llama_request(body(QUESTION, offered=tools(READ_FILE, odd_terminal)), POLICY)["messages"]
    shown = [json.loads(m["content"]).get("tool") for m in messages if m["role"] == "assistant"]
    assert "read_file" in shown and "terminal" not in shown
    assert messages[-1] == QUESTION


def test_answer_only_turns_show_only_the_answer_example() -> None:
    messages = build_llama_request(body(*AFTER_ONE_CALL, offered=tools(TERMINAL)), POLICY)["messages"]
    (assistant,) = [json.loads(m["content"]) for m in messages if m["role"] == "assistant"]
    assert set(assistant) == {"reasoning", "answer"}


def test_prompt_prefix_is_the_same_for_every_question() -> None:
    """The system prompt and examples are reused from llama.cpp's prompt cache."""
    first = build_llama_request(body(SYSTEM, QUESTION, offered=tools(TERMINAL)), POLICY)["messages"]
    other = build_llama_request(
        body(SYSTEM, {"role": "user", "content": "hi"}, offered=tools(TERMINAL)), POLICY
    )
    assert first[:-1] == other["messages"][:-1]


# ---------------------------------------------------------------- output → assistant message


def test_tool_call_output_becomes_tool_calls_with_reasoning() -> None:
    text = json.dumps(
        {
            "reasoning": "I will use terminal to count.",
            "tool": "terminal",
            "arguments": {"command": "wc -l x"},
        }
    )
    message = parse_turn(text, {"terminal"}, first_call=3)
    assert message["content"] is None and message["reasoning"] == "I will use terminal to count."
    assert message["reasoning_forced"] is True  # the grammar wrote its opening words
    (call,) = message["tool_calls"]
    assert call["id"] == "call_3" and call["type"] == "function"
    assert call["function"]["name"] == "terminal"
    assert json.loads(call["function"]["arguments"]) == {"command": "wc -l x"}


def test_answer_output_becomes_content_with_reasoning() -> None:
    message = parse_turn('{"reasoning": "It said 3.", "answer": "3 lines."}', {"terminal"}, 1)
    assert message == {
        "role": "assistant",
        "content": "3 lines.",
        "reasoning": "It said 3.",
        "reasoning_forced": True,
    }


@pytest.mark.parametrize(
    "text",
    [
        '{"reasoning": "cut at max_tok',
        "not json at all",
        "[1, 2]",
        '{"reasoning": "x", "tool": "rm_everything", "arguments": {}}',
        '{"reasoning": "x", "tool": "terminal", "arguments": "ls"}',
    ],
)
def test_malformed_output_is_no_answer_not_the_raw_text(text: str) -> None:
    message = parse_turn(text, {"terminal"}, 1)
    assert message["content"] == "" and "tool_calls" not in message


def test_response_numbers_calls_after_earlier_ones_and_takes_usage_from_llama() -> None:
    llama = {
        "id": "chatcmpl-x",
        "created": 7,
        "choices": [
            {
                "finish_reason": "stop",
                "message": {
                    "content": json.dumps(
                        {
                            "reasoning": "I will use terminal to look.",
                            "tool": "terminal",
                            "arguments": {"a": 1},
                        }
                    )
                },
            }
        ],
        "usage": {"prompt_tokens": 500, "completion_tokens": 30, "total_tokens": 530},
    }
    response = build_response(body(*AFTER_ONE_CALL, offered=tools(TERMINAL)), llama)
    (choice,) = response["choices"]
    assert response["object"] == "chat.completion" and response["model"] == "embedded"
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["id"] == "call_2"
    assert response["usage"] == {"prompt_tokens": 500, "completion_tokens": 30, "total_tokens": 530}


def test_response_for_cut_output_keeps_finish_reason_length() -> None:
    llama = {"choices": [{"finish_reason": "length", "message": {"content": '{"reasoning": "I will'}}]}
    response = build_response(body(QUESTION, offered=tools(TERMINAL)), llama)
    (choice,) = response["choices"]
    assert choice["finish_reason"] == "length" and choice["message"]["content"] == ""  # no raw JSON answer
    assert response["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
