"""Errors an endpoint reports inside a 200 reply, as OpenRouter does once a model has started
(its docs: the body's `error`, or a choice's `error` with `finish_reason: "error"`): classified by
their code as the HTTP status they stand for, retried when that is transient, and never taken for
an empty answer. Through the real SDK, against an `EndpointServer` on loopback that answers each
body as given (HTTP 200)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import agent.llm.client as llm_client
from agent.errors import ModelAPIError
from agent.llm.client import OpenAIChatModel
from agent.protocols import ChatRequest, ModelReply
from agent.servers.endpoint_server import EndpointServer

OK = {"choices": [{"message": {"role": "assistant", "content": "recovered"}, "finish_reason": "stop"}]}


def in_body(code: Any, message: str = "upstream provider timed out") -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def in_choice(code: Any, message: str = "the provider crashed mid-answer") -> dict[str, Any]:
    message_part = {"role": "assistant", "content": ""}
    choice = {"message": message_part, "finish_reason": "error", "error": {"code": code, "message": message}}
    return {"id": "gen-1", "choices": [choice]}


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(llm_client, "BACKOFF_BASE", 0.01)


def serve(bodies: list[dict[str, Any]], max_retries: int = 3) -> tuple[ModelReply | ModelAPIError, int]:
    """Answer each request with the next body (the last one repeats); what `complete` gave, and
    how many requests were made."""
    asked = 0

    async def respond(body: dict[str, Any]) -> dict[str, Any]:
        nonlocal asked
        asked += 1
        return bodies[min(asked, len(bodies)) - 1]

    async def go(base_url: str) -> ModelReply | ModelAPIError:
        model = OpenAIChatModel(base_url=base_url, api_key="k", model="m", max_retries=max_retries)
        try:
            return await model.complete(ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[]))
        except ModelAPIError as exc:
            return exc
        finally:
            await model.aclose()

    with EndpointServer(respond) as endpoint:
        return asyncio.run(go(endpoint.base_url)), asked


@pytest.mark.parametrize(
    "reported", [in_body(502), in_choice(502), in_body("503"), in_choice(None), in_body(429)]
)
def test_a_transient_error_in_the_reply_is_retried(reported: dict[str, Any]) -> None:
    got, requests = serve([reported, OK])
    assert isinstance(got, ModelReply) and got.content == "recovered"
    assert requests == 2


@pytest.mark.parametrize(
    ("reported", "error_class"),
    [(in_body(502), "server_error"), (in_choice(None), "server_error"), (in_body(429), "rate_limit")],
)
def test_retries_spent_on_reported_errors_fail_the_call_saying_what_the_endpoint_said(
    reported: dict[str, Any], error_class: str
) -> None:
    got, requests = serve([reported], max_retries=2)
    assert isinstance(got, ModelAPIError)
    assert (got.error_class, got.attempts, requests) == (error_class, 3, 3)
    said = reported.get("error") or reported["choices"][0]["error"]
    assert said["message"] in str(got)


@pytest.mark.parametrize(
    ("reported", "error_class"),
    [(in_body(400, "bad params"), "bad_request"), (in_choice(401, "key revoked"), "auth"),
     (in_body(404, "no such model"), "not_found"), (in_body(402, "insufficient credits"), "bad_request")],
)  # fmt: skip
def test_a_permanent_error_in_the_reply_fails_at_once(reported: dict[str, Any], error_class: str) -> None:
    got, requests = serve([reported, OK])
    assert isinstance(got, ModelAPIError)
    assert (got.error_class, got.status, requests) == (error_class, reported_code(reported), 1)


def reported_code(reported: dict[str, Any]) -> int:
    return int((reported.get("error") or reported["choices"][0]["error"])["code"])


def test_content_sent_as_a_list_of_text_parts_is_the_answer() -> None:
    parts = [
        {"type": "text", "text": "list "},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "content"},
    ]
    got, _ = serve(
        [{"choices": [{"message": {"role": "assistant", "content": parts}, "finish_reason": "stop"}]}]
    )
    assert isinstance(got, ModelReply) and got.content == "list content"
