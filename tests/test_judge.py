"""The LLM judge against the simulated endpoint's judge model over real HTTP, through the real
chat model (as agent.llm.factory opens it): a pass, a fail, a malformed reply asked again, one
that stays malformed or an endpoint that fails (judge_error, not a fail), an endpoint refusing
response_format; its tokens and cost counted; the transcript it is shown capped. And the
simulated endpoint's right/wrong rule, deterministic by the request's seed."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from agent.config.agent_config import AgentConfig
from agent.config.verify_config import JudgeCheck
from agent.llm.client import OpenAIChatModel
from agent.llm.factory import open_chat_model
from agent.protocols import ChatRequest, Prices
from agent.protocols.turns import AssistantTurn, ToolTurn, UserTurn, turn_call
from agent.protocols.verification import Attempt, CheckResult, Verification
from agent.servers.simulated.server import SimulatedEndpoint
from agent.verify import judge
from agent.verify.judge import judge_attempt, judge_usage
from agent.verify.judge_prompt import RATIONALE_CHARS, TRANSCRIPT_CHARS, parse_verdict, render_transcript
from tests.support.media import sim_prompt_tokens

pytestmark = pytest.mark.anyio
TASK = "What is six times seven? [answer=42]"
RUBRIC = "Pass when the final answer is the right number."


def _attempt(final: str | None = "It is 42.", prompt: str = TASK, tool_output: str = "42\n") -> Attempt:
    turns = (
        UserTurn(prompt),
        AssistantTurn(None, "I will compute it.", (turn_call("c1", "terminal", '{"command": "echo 42"}'),)),
        ToolTurn("c1", "terminal", tool_output, False),
        AssistantTurn(final, "Done."),
    )
    return Attempt(prompt, turns, final, "completed", 0, {}, {})


@asynccontextmanager
async def _model(endpoint: SimulatedEndpoint, **changes: Any) -> AsyncIterator[OpenAIChatModel]:
    config = AgentConfig(model="sim-model", base_url=endpoint.base_url, **{"max_retries": 0, **changes})
    model = open_chat_model(config)
    try:
        yield model
    finally:
        await model.aclose()


async def _judge(
    endpoint: SimulatedEndpoint, attempt: Attempt, judge_model: str = "sim-judge", **options: Any
) -> CheckResult:
    async with _model(endpoint) as model:
        return await judge_attempt(attempt, JudgeCheck(RUBRIC), model, judge_model, **options)


async def test_a_right_final_answer_passes_and_the_judge_saw_rubric_task_transcript_and_answer(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    result = await _judge(sim_endpoint, _attempt())
    assert (result.method, result.passed, result.score, result.error) == ("judge", True, 1.0, None)
    assert result.details == {
        "model": "sim-judge",
        "tries": 1,
        "rationale": "Judged by rule: the final answer contains '42'.",
    }
    [request] = sim_endpoint.requests
    body = request.body
    assert body["model"] == "sim-judge" and "tools" not in body
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["score", "passed", "rationale"]
    shown = body["messages"][1]["content"]
    assert f"<rubric>\n{RUBRIC}\n</rubric>" in shown and f"<task>\n{TASK}\n</task>" in shown
    assert '[call terminal] {"command": "echo 42"}\n[tool terminal] 42' in shown
    assert "I will compute it." not in shown  # reasoning is not what is judged
    assert shown.endswith("<final_answer>\nIt is 42.\n</final_answer>")
    assert result.prompt_tokens == sim_prompt_tokens(body) and result.completion_tokens > 0
    assert result.cost_usd == 0.0 and result.duration_s > 0


async def test_a_wrong_or_missing_final_answer_fails_and_a_rubric_marker_wins(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    wrong = await _judge(sim_endpoint, _attempt("It is 43."))
    assert (wrong.passed, wrong.score, wrong.error) == (False, 0.0, None)
    missing = await _judge(sim_endpoint, _attempt(None))
    assert (missing.passed, missing.score) == (False, 0.0)
    assert (
        "outcome 'completed' and no final answer" in sim_endpoint.requests[-1].body["messages"][1]["content"]
    )
    async with _model(sim_endpoint) as model:
        check = JudgeCheck("Pass when the answer names the unit. [expect=apples]")
        named = await judge_attempt(_attempt("42 apples"), check, model, "sim-judge")
    assert named.passed is True and "'apples'" in named.details["rationale"]


async def test_a_malformed_reply_is_asked_again_with_what_was_wrong(sim_endpoint: SimulatedEndpoint) -> None:
    result = await _judge(sim_endpoint, _attempt(), "sim-judge-malformed-2")
    assert (result.passed, result.score, result.error, result.details["tries"]) == (True, 1.0, None, 3)
    bodies = [r.body for r in sim_endpoint.requests]
    assert len(bodies) == 3
    again = bodies[2]["messages"]
    assert [m["role"] for m in again] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert again[3]["content"].startswith(
        "That reply was not the JSON object asked for (the reply holds no JSON"
    )
    # Every try's tokens are the check's.
    assert result.prompt_tokens == sum(sim_prompt_tokens(b) for b in bodies)


async def test_a_reply_that_stays_malformed_is_a_judge_error_not_a_fail(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    result = await _judge(sim_endpoint, _attempt(), "sim-judge-malformed")
    assert (result.passed, result.score) == (None, None)
    assert result.error == (
        "judge_error: the judge's reply stayed malformed after 3 tries: the reply holds no JSON object"
    )
    assert result.details["last_reply"] == "I think the attempt mostly works, score it high."
    assert len(sim_endpoint.requests) == 3 and result.prompt_tokens > 0
    assert Verification((result,)).passed is None and Verification((result,)).reward is None
    assert result.record()["error"].startswith("judge_error: ")


async def test_an_endpoint_failure_is_a_judge_error(
    make_sim_endpoint: Callable[..., SimulatedEndpoint],
) -> None:
    endpoint = make_sim_endpoint(model_ids=("sim-model",), reject_unknown_models=True)
    result = await _judge(endpoint, _attempt())
    assert (result.passed, result.score, result.prompt_tokens) == (None, None, 0)
    assert result.error is not None
    assert result.error.startswith("judge_error: the judge call failed: not_found: NotFoundError")
    assert len(endpoint.requests) == 1  # a 404 is not a refusal of response_format: not asked again


async def test_an_endpoint_refusing_response_format_is_asked_without_it(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    judge._unstructured.discard("sim-judge-unstructured")
    first = await _judge(sim_endpoint, _attempt(), "sim-judge-unstructured")
    second = await _judge(sim_endpoint, _attempt(), "sim-judge-unstructured")
    assert (first.passed, second.passed) == (True, True)
    assert ["response_format" in r.body for r in sim_endpoint.requests] == [True, False, False]


async def test_a_fenced_reply_among_prose_is_read(sim_endpoint: SimulatedEndpoint) -> None:
    result = await _judge(sim_endpoint, _attempt(), "sim-judge-fenced")
    assert (result.passed, result.score, result.details["tries"]) == (True, 1.0, 1)


async def test_its_cost_is_priced_and_counted_in_the_usage_and_the_limiter(
    sim_endpoint: SimulatedEndpoint,
) -> None:
    prices = Prices(input=3.0, output=15.0)
    async with _model(sim_endpoint) as model:
        before = model.limiter
        result = await judge_attempt(_attempt(), JudgeCheck(RUBRIC), model, "sim-judge", prices=prices)
    assert before is None
    expected = (result.prompt_tokens * 3.0 + result.completion_tokens * 15.0) / 1e6
    assert result.cost_usd == pytest.approx(expected) and result.cost_usd > 0
    assert result.record()["tokens"] == {
        "prompt": result.prompt_tokens,
        "completion": result.completion_tokens,
    }
    answer_check = CheckResult("answer", True, 1.0)
    usage = judge_usage(Verification((answer_check, result)))
    assert (usage.prompt_tokens, usage.completion_tokens) == (result.prompt_tokens, result.completion_tokens)
    assert usage.cost_usd == pytest.approx(expected)
    assert judge_usage(None).cost_usd is None  # no judge: the entry's usage keeps its bytes
    assert judge_usage(Verification((answer_check,))).total_tokens == 0


def test_parsing_is_lenient_about_where_and_strict_about_what() -> None:
    good = '{"score": 0.5, "passed": false, "rationale": "half"}'
    assert (
        parse_verdict(good) == parse_verdict(f"Sure.\n```json\n{good}\n```") == parse_verdict(f"x {good} y")
    )
    assert parse_verdict('{"score": 1, "passed": true}').rationale == ""
    long = parse_verdict(json.dumps({"score": 1, "passed": True, "rationale": "x" * 5000})).rationale
    assert long.startswith("x" * RATIONALE_CHARS) and len(long) < RATIONALE_CHARS + 40
    for reply, why in [
        ("no json here", "the reply holds no JSON object"),
        ('{"score": 1.5, "passed": true}', "score 1.5 is not in [0, 1]"),
        ('{"score": true, "passed": true}', "score is not a number (got true)"),
        ('{"score": 1, "passed": "yes"}', 'passed is not true or false (got "yes")'),
        ("[1, 2]", "the reply is no JSON object"),
    ]:
        with pytest.raises(ValueError, match=None) as caught:
            parse_verdict(reply)
        assert str(caught.value) == why


def test_a_huge_transcript_is_cut_in_the_middle_keeping_its_start_and_end() -> None:
    attempt = _attempt(tool_output="y" * 10_000)
    many = attempt.turns[:1] + attempt.turns[1:3] * 40 + attempt.turns[3:]
    text = render_transcript(many)
    assert len(text) < TRANSCRIPT_CHARS + 100
    assert text.startswith(f"[user] {TASK}") and text.endswith("[assistant] It is 42.")
    assert "characters of the transcript left out" in text
    assert "[… 8000 more characters]" in text  # each tool result clipped first


async def _answer(model: OpenAIChatModel, prompt: str, seed: int | None) -> str:
    extra = {} if seed is None else {"seed": seed}
    messages = [{"role": "user", "content": prompt}]
    return (await model.complete(ChatRequest(messages, [], extra_params=extra))).content


async def test_the_endpoint_answers_right_or_wrong_by_the_seed(sim_endpoint: SimulatedEndpoint) -> None:
    async with _model(sim_endpoint) as model:
        answers = [await _answer(model, "Q [answer=42 right=0,2]", s) for s in range(4)]
        modular = [await _answer(model, "Q [answer=3.5 right=1 of=3]", s) for s in range(6)]
        edges = [await _answer(model, p, None) for p in ("Q [answer=x right=none]", "Q [answer=7]", "Q")]
        again = [await _answer(model, "Q [answer=42 right=0,2]", s) for s in range(4)]
    assert answers == again == ["42", "43", "42", "43"]
    assert modular == ["4.5", "3.5", "4.5", "4.5", "3.5", "4.5"]
    assert edges == ["I do not know", "7", "Here is my answer to: Q"]  # no marker: as before
