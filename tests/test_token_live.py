"""Opt-in: the token API shapes against a real vLLM server (`LIVE_ENDPOINT_TESTS=1` and
`VLLM_BASE_URL=http://host:8000/v1`; `VLLM_MODEL` names the model, else the server's first;
`VLLM_API_KEY` if it wants one). What `tests/test_token_capture.py` assumes of vLLM's replies
(its vLLM shape double) is checked here against the real thing: the probe finds "vllm", the
raw body has vLLM's fields with their types, and our reading agrees with vLLM's own counts.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import openai
import pytest

from agent.config.agent_config import AgentConfig
from agent.llm.client import OpenAIChatModel
from agent.llm.token_probe import probe
from agent.llm.tokens import TOKEN_APIS
from agent.protocols import ChatRequest, ModelReply

BASE_URL = os.environ.get("VLLM_BASE_URL", "")
KEY = os.environ.get("VLLM_API_KEY", "none")
pytestmark = [
    pytest.mark.live,
    pytest.mark.skipif(
        os.environ.get("LIVE_ENDPOINT_TESTS") != "1" or not BASE_URL,
        reason="live: set LIVE_ENDPOINT_TESTS=1 and VLLM_BASE_URL to check against a real vLLM",
    ),
]
TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}},
    },
}
ASK = [{"role": "user", "content": "What is 2 + 3? Use the add tool."}]


@pytest.fixture(scope="module")
def model_name() -> str:
    named = os.environ.get("VLLM_MODEL")
    if named:
        return named
    with openai.OpenAI(base_url=BASE_URL, api_key=KEY) as client:
        return client.models.list().data[0].id


def test_the_probe_finds_vllm_with_logprobs(model_name: str) -> None:
    support = probe(AgentConfig(model=model_name, base_url=BASE_URL, api_key=KEY))
    assert (support.api, support.prompt_ids, support.completion_ids, support.logprobs) == (
        "vllm",
        True,
        True,
        True,
    )


def test_the_raw_reply_has_vllms_fields_with_their_types(model_name: str) -> None:
    with openai.OpenAI(base_url=BASE_URL, api_key=KEY) as client:
        raw = client.post(
            "/chat/completions",
            body={"model": model_name, "messages": ASK, "max_tokens": 16, **TOKEN_APIS["vllm"].fields},
            cast_to=object,
        )
    assert isinstance(raw, dict)
    body: dict[str, Any] = raw
    choice = body["choices"][0]
    assert all(type(i) is int for i in body["prompt_token_ids"]) and body["prompt_token_ids"]
    assert all(type(i) is int for i in choice["token_ids"]) and choice["token_ids"]
    entries = choice["logprobs"]["content"]
    assert len(entries) == len(choice["token_ids"])
    assert {"token", "logprob", "bytes", "top_logprobs"} <= set(entries[0]) and entries[0][
        "top_logprobs"
    ] == []
    assert body["usage"]["prompt_tokens"] == len(body["prompt_token_ids"])


def test_a_tool_calling_exchange_is_read_with_its_counts(model_name: str) -> None:
    async def go() -> list[ModelReply]:
        model = OpenAIChatModel(base_url=BASE_URL, api_key=KEY, model=model_name, max_retries=1)
        try:
            first = await model.complete(ChatRequest(list(ASK), [TOOL], max_tokens=256, token_api="vllm"))
            calls = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                     for c in first.tool_calls]  # fmt: skip
            said: dict[str, Any] = {
                "role": "assistant",
                "content": first.content,
                "tool_calls": calls or None,
            }
            if first.reasoning:
                said["reasoning"] = said["reasoning_content"] = first.reasoning
            results = [{"role": "tool", "tool_call_id": c.id, "content": "5"} for c in first.tool_calls]
            history = (
                [*ASK, said, *results] if calls else [*ASK, said, {"role": "user", "content": "Thanks."}]
            )
            return [
                first,
                await model.complete(ChatRequest(history, [TOOL], max_tokens=64, token_api="vllm")),
            ]
        finally:
            await model.aclose()

    for reply in asyncio.run(go()):
        assert reply.tokens is not None and reply.tokens.logprobs is not None
        assert len(reply.tokens.prompt_ids) == reply.usage.prompt_tokens
        assert len(reply.tokens.completion_ids) == reply.usage.completion_tokens == len(reply.tokens.logprobs)
        assert max(reply.tokens.logprobs) <= 0.001
