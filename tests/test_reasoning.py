"""Reasoning capture: every provider style (fields and inline blocks) ends up once, in one
`<think>` block per gpt turn of the saved trajectory, with clean content. End to end through the
simulated endpoint, plus the extraction rules on their own."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agent.llm.reasoning import extract, split_inline
from agent.sandboxes import SandboxOptions
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from run_agent import AIAgent

PLAN = "PLAN: list the directory with the terminal tool first."
CONCLUSION = "CONCLUSION: the tool said hello, so the answer is hello."
ANSWER = "The directory greets you: hello."
CALL = (("terminal", '{"command": "echo hello"}'),)
TAGS = re.compile(r"</?(think|thinking|thought|reasoning|REASONING_SCRATCHPAD)>", re.IGNORECASE)


def inline(tag: str) -> Any:
    return lambda reasoning, content: Turn(content=f"<{tag}>\n{reasoning}\n</{tag}>\n{content}")


def field(name: str) -> Any:
    return lambda reasoning, content: Turn(content=content, reasoning=reasoning, reasoning_field=name)


STYLES = {
    "reasoning": field("reasoning"),
    "reasoning_content": field("reasoning_content"),
    "reasoning_details": field("reasoning_details"),
    "think": inline("think"),
    "thinking": inline("thinking"),
    "scratchpad": inline("REASONING_SCRATCHPAD"),
    # the same reasoning both in a field and inline, as some providers do
    "field_and_inline": lambda r, c: Turn(content=f"<think>{r}</think>\n{c}", reasoning=r),
    "content_field_and_inline": lambda r, c: Turn(
        content=f"<thinking>\n{r}\n</thinking>{c}", reasoning=r, reasoning_field="reasoning_content"
    ),
    # the opening tag was in the chat template, so the output starts inside the block
    "template_opened": lambda r, c: Turn(content=f"{r}\n</think>\n\n{c}"),
}


def with_calls(turn: Turn) -> Turn:
    return Turn(
        content=turn.content, reasoning=turn.reasoning, reasoning_field=turn.reasoning_field, tool_calls=CALL
    )


def converse(
    endpoint: SimulatedEndpoint, tmp_path: Path, turns: list[Turn]
) -> tuple[dict[str, Any], list[str]]:
    """Run one tool-then-answer conversation; the result and the saved gpt turns."""
    endpoint.script("why hello", turns)
    agent = AIAgent(
        base_url=endpoint.base_url,
        api_key="k",
        model="sim-model",
        enabled_toolsets=["terminal"],
        save_trajectories=True,
        max_retries=0,
        sandbox=SandboxOptions(backend="local", root=str(tmp_path / "sandboxes")),
        trajectory_dir=str(tmp_path),
    )
    result = agent.run_conversation("why hello")
    (line,) = (tmp_path / "trajectory_samples.jsonl").read_text(encoding="utf-8").splitlines()
    gpt = [t["value"] for t in json.loads(line)["conversations"] if t["from"] == "gpt"]
    return result, gpt


def split_think(value: str) -> tuple[str, str]:
    """(the think block's text, what follows it) for a gpt turn with exactly one block."""
    assert value.count("<think>") == 1 and value.count("</think>") == 1, value
    assert value.startswith("<think>\n")
    inside, rest = value[len("<think>\n") :].split("</think>")
    return inside.strip(), rest.strip()


@pytest.mark.parametrize("style", list(STYLES))
def test_each_style_is_saved_once_in_one_think_block_per_gpt_turn(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, style: str
) -> None:
    make = STYLES[style]
    turns = [with_calls(make(PLAN, "")), make(CONCLUSION, ANSWER)]
    result, (first, second) = converse(sim_endpoint, tmp_path, turns)

    assert result["completed"] and result["final_response"] == ANSWER
    think, rest = split_think(first)
    assert think == PLAN and first.count(PLAN) == 1
    assert rest.startswith("<tool_call>") and TAGS.search(rest) is None
    think, rest = split_think(second)
    assert think == CONCLUSION and second.count(CONCLUSION) == 1
    assert rest == ANSWER

    first_reply, second_reply = (m for m in result["messages"] if m["role"] == "assistant")
    assert (first_reply["reasoning"], first_reply["content"]) == (PLAN, "")
    assert (second_reply["reasoning"], second_reply["content"]) == (CONCLUSION, ANSWER)
    resent = sim_endpoint.requests[1].body["messages"]
    assert all(TAGS.search(json.dumps(m.get("content"))) is None for m in resent)  # clean history goes back


def test_without_reasoning_each_gpt_turn_gets_an_empty_think_block(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    result, (first, second) = converse(sim_endpoint, tmp_path, [Turn(tool_calls=CALL), Turn(content=ANSWER)])
    assert split_think(first) == ("", first.split("</think>")[1].strip())
    assert split_think(second) == ("", ANSWER)
    assert all(m.get("reasoning") is None for m in result["messages"] if m["role"] == "assistant")


LITERAL = "Wrap it like this: <think>my plan</think> and then answer."


@pytest.mark.parametrize(
    "final",
    [
        Turn(content=LITERAL),  # no reasoning at all
        Turn(content=f"<think>{CONCLUSION}</think>\n{LITERAL}"),  # reasoning opens the content
        Turn(content=LITERAL, reasoning=CONCLUSION),  # native reasoning
        Turn(content=f"<think>{CONCLUSION}</think>{LITERAL}", reasoning=CONCLUSION),  # both
    ],
)
def test_tags_inside_the_answer_are_the_answers_own_words(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path, final: Turn
) -> None:
    result, (_, second) = converse(sim_endpoint, tmp_path, [Turn(tool_calls=CALL), final])

    assert result["final_response"] == LITERAL
    think = CONCLUSION if final.reasoning or final.content != LITERAL else ""
    assert second == (f"<think>\n{think}\n</think>\n" if think else "<think>\n</think>\n") + LITERAL
    assert all("my plan" not in (m.get("reasoning") or "") for m in result["messages"])


def test_the_export_does_not_split_what_the_loop_kept_as_the_answer(
    sim_endpoint: SimulatedEndpoint, tmp_path: Path
) -> None:
    """The empty block opening the reply is the reasoning; the block after it is the answer's
    own text, and stays so when the trajectory is written."""
    said = "<think>quoted</think> is how a block looks."
    result, (_, second) = converse(
        sim_endpoint, tmp_path, [Turn(tool_calls=CALL), Turn(content=f"<think></think>{said}")]
    )
    assert result["final_response"] == said
    assert second == "<think>\n</think>\n" + said


# ---------------------------------------------------------------- extraction rules


def test_the_same_reasoning_in_several_fields_is_kept_once() -> None:
    details = [{"type": "reasoning.text", "text": "step one"}]
    assert extract({"reasoning": "step one", "reasoning_details": details}, "ok") == ("step one", "ok")
    assert extract({"reasoning_content": "step one"}, "<think>step one</think>ok") == ("step one", "ok")


def test_a_longer_copy_replaces_the_part_it_contains() -> None:
    text, content = extract({"reasoning": "step one"}, "<think>step one, then step two</think>answer")
    assert (text, content) == ("step one, then step two", "answer")


def test_with_native_reasoning_nothing_new_in_the_content_is_reasoning() -> None:
    content = "<think>inline one</think>mid<thinking>inline two</thinking>end"
    assert extract({"reasoning": "native"}, content) == ("native", content)
    assert extract({"reasoning_details": [{"text": "n"}]}, "x</think>y") == ("n", "x</think>y")
    assert extract({"reasoning": "native"}, "<think></think>answer") == ("native", "answer")


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        ([{"type": "reasoning.summary", "summary": "a summary"}], "a summary"),
        ([{"type": "reasoning.text", "text": "t1"}, {"type": "reasoning.text", "text": "t2"}], "t1\n\nt2"),
        ([{"type": "reasoning.encrypted", "data": "opaque"}], None),
        ("not a list", None),
    ],
)
def test_reasoning_details_text_is_captured(details: Any, expected: str | None) -> None:
    assert extract({"reasoning_details": details}, "answer") == (expected, "answer")


@pytest.mark.parametrize(
    ("content", "found", "cleaned"),
    [
        ("<THINK>upper</THINK>answer", ["upper"], "answer"),
        ("<REASONING_SCRATCHPAD>pad</REASONING_SCRATCHPAD>\nanswer", ["pad"], "answer"),
        ("  <think>cut at max_tok", ["cut at max_tok"], ""),  # never closed
        ("answer first <think>not reasoning", [], "answer first <think>not reasoning"),  # not at the start
        ("<think>a</think>Use <think>x</think> tags.", ["a"], "Use <think>x</think> tags."),
        ("<think>a</think><thinking>b</thinking>c", ["a"], "<thinking>b</thinking>c"),  # one block only
        ("from the template</think>answer", ["from the template"], "answer"),  # never opened
        ("</think>answer", [], "answer"),
        ("<think></think>answer", [], "answer"),
        ("no reasoning at all", [], "no reasoning at all"),
    ],
)
def test_inline_blocks_are_split_from_the_content(content: str, found: list[str], cleaned: str) -> None:
    assert split_inline(content) == (found, cleaned)


def test_no_reasoning_anywhere_is_none() -> None:
    assert extract({}, None) == (None, "")
    assert extract({"reasoning": "   "}, "  answer  ") == (None, "answer")
