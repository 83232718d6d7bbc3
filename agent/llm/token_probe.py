"""The start-up probe of `--capture_tokens`: what token ids the endpoint gives, found once.

One tiny chat call (a few output tokens) per known token API (`agent.llm.tokens.TOKEN_APIS`),
in order, through the run's own client: the first whose reply carries prompt and completion
ids is the run's API. A reply without them, or a request the server refuses (400/422: an
OpenAI-strict server rejects unknown fields), means that API is not offered; any other failure
(no connection, a bad key, a model that does not exist) is no finding about tokens, so it is
raised as the call's error for the CLI edge to say.
"""

from __future__ import annotations

import asyncio

from agent.config.agent_config import AgentConfig
from agent.errors import FailureClass, ModelAPIError
from agent.llm.factory import open_chat_model
from agent.llm.tokens import TOKEN_APIS
from agent.protocols import ChatRequest
from agent.protocols.tokens import TokenSupport

PROBE_MAX_TOKENS = 4  # enough for a reply of a token or two, cheap on any endpoint
PROBE_MESSAGES = ({"role": "user", "content": "Reply with the word OK."},)
NOT_OFFERED = (FailureClass.INVALID_RESPONSE, FailureClass.BAD_REQUEST)


async def probe_tokens(config: AgentConfig) -> TokenSupport:
    """What the endpoint of `config` gives; ModelAPIError when it could not be asked."""
    model = open_chat_model(config)
    refused: list[str] = []
    try:
        for api in TOKEN_APIS.values():
            messages = [dict(m) for m in PROBE_MESSAGES]
            request = ChatRequest(messages, [], max_tokens=PROBE_MAX_TOKENS, token_api=api.name)
            try:
                tokens = (await model.complete(request)).tokens
            except ModelAPIError as exc:
                if exc.error_class not in NOT_OFFERED:
                    raise
                refused.append(f"{api.name}: {exc}")
                continue
            assert tokens is not None  # a reply to a token request without ids raised above
            return TokenSupport(api.name, True, True, tokens.logprobs is not None)
    finally:
        await model.aclose()
    return TokenSupport(None, False, False, False, detail="; ".join(refused))


def probe(config: AgentConfig) -> TokenSupport:
    """`probe_tokens` from synchronous code (the CLI edge)."""
    return asyncio.run(probe_tokens(config))


def describe(support: TokenSupport, url: str) -> str:
    """The probe's finding in one line (the operator's log)."""
    if not support.usable:
        return f"token capture: {url} gives no token ids ({support.detail or 'no known token API answered'})"
    given = ["prompt ids", "completion ids"] + (["logprobs"] if support.logprobs else [])
    listed = ", ".join(given[:-1]) + " and " + given[-1]
    server = TOKEN_APIS[str(support.api)].server
    return f"token capture: {url} gives {listed} ({support.api}: {server})"
