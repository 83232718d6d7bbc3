"""Building the chat-completions request: what the model sees on each call.

The ephemeral system prompt and prefill messages are added here, at call time, and never
enter the saved history. Provider routing and reasoning control go where the endpoint's
dialect understands them; a flag that cannot be honoured is said once in the log. Sampling
fields (`agent.config.sampling`) are standard OpenAI fields, sent the same in every dialect, and
only when chosen.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from agent.config.agent_config import AgentConfig
from agent.protocols import ChatRequest

log = logging.getLogger(__name__)

BASE_SYSTEM_PROMPT = (
    "You are a capable assistant working in a private sandbox. Use the tools provided when they "
    "help you answer; think before acting; when you have the answer, reply without calling tools."
)

_said: set[str] = set()
_said_lock = threading.Lock()


def say_once(key: str, message: str) -> None:
    """Log `message` at WARNING the first time `key` is seen in this process."""
    with _said_lock:
        if key in _said:
            return
        _said.add(key)
    log.warning(message)


def _provider_block(config: AgentConfig) -> dict[str, Any]:
    block: dict[str, Any] = {}
    if config.providers_allowed:
        block["only"] = list(config.providers_allowed)
    if config.providers_ignored:
        block["ignore"] = list(config.providers_ignored)
    if config.providers_order:
        block["order"] = list(config.providers_order)
    if config.provider_sort:
        block["sort"] = config.provider_sort
    return block


def _dialect_fields(config: AgentConfig) -> tuple[dict[str, Any], dict[str, Any]]:
    """(extra_body, top-level params) for routing and reasoning in the endpoint's dialect."""
    extra: dict[str, Any] = {}
    params: dict[str, Any] = {}
    provider = _provider_block(config)
    reasoning = config.reasoning_config
    dialect = config.dialect
    if dialect == "openrouter":
        if provider:
            extra["provider"] = provider
        if reasoning:
            extra["reasoning"] = dict(reasoning)
        return extra, params
    if provider:
        say_once(
            f"provider:{config.base_url}",
            f"provider routing flags are ignored: {config.base_url} is not OpenRouter "
            "(pass --api_dialect=openrouter to send them anyway)",
        )
    if reasoning and dialect == "openai":
        params["reasoning_effort"] = reasoning.get("effort", "medium")
    elif reasoning:
        say_once(
            f"reasoning:{config.base_url}",
            f"reasoning flags are not sent: {config.base_url} has no known reasoning parameter "
            "(pass --api_dialect=openrouter or openai to send them)",
        )
    return extra, params


def system_prompt(config: AgentConfig) -> str:
    if config.ephemeral_system_prompt:
        return BASE_SYSTEM_PROMPT + "\n\n" + config.ephemeral_system_prompt
    return BASE_SYSTEM_PROMPT


def _api_copy(message: dict[str, Any], *, with_reasoning: bool = False) -> dict[str, Any]:
    """The history message as sent: our private fields (reasoning, _injected…) removed; with
    `with_reasoning`, an assistant turn's reasoning given back as the servers read it."""
    out = {k: v for k, v in message.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
    if message.get("reasoning_details"):
        out["reasoning_details"] = message["reasoning_details"]  # providers continue signed reasoning
    if with_reasoning and message.get("role") == "assistant" and message.get("reasoning"):
        # Templates such as Qwen3's render an earlier turn's <think> block from its
        # `reasoning_content` (the turns after the last user message; without it they render
        # the turn without its reasoning, and every later prompt drifts from what was
        # generated). vLLM reads `reasoning` and hands it to the template as both names
        # (vllm/entrypoints/chat_utils.py at vllm-project/vllm@bd5ec6d50b83); SGLang's message
        # model carries `reasoning_content` to its template: both are sent.
        out["reasoning"] = out["reasoning_content"] = message["reasoning"]
    return out


def build_request(
    config: AgentConfig, history: Sequence[dict[str, Any]], tools: list[dict[str, Any]]
) -> ChatRequest:
    messages = [{"role": "system", "content": system_prompt(config)}]
    messages += [dict(m) for m in config.prefill_messages]
    # Only a token-capturing run sends reasoning back: without it the request keeps its bytes.
    given_back = config.token_api is not None
    messages += [_api_copy(m, with_reasoning=given_back) for m in history]
    extra, params = _dialect_fields(config)
    sampling = config.prompt_sampling()
    sent = sampling.sent()
    max_tokens = sent.pop("max_tokens", None)  # the client names it as the dialect does
    for name in sampling.extra:  # extra fields in the body's top level, as the SDK's extra_body
        extra[name] = sent.pop(name)
    return ChatRequest(
        messages=messages,
        tools=tools,
        max_tokens=max_tokens,
        extra_body=extra,
        extra_params={**params, **sent},
        token_api=config.token_api,
    )
