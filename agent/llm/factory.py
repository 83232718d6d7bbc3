"""Opening the chat model for an agent configuration: the one place a client is made."""

from __future__ import annotations

from agent.config.agent_config import AgentConfig, embedded_hint, is_loopback
from agent.errors import ConfigError
from agent.llm.client import OpenAIChatModel
from agent.llm.rate_limit import AdaptiveLimiter

LOOPBACK_KEY = "none"  # what the SDK sends to a local endpoint that needs no key


def open_chat_model(
    config: AgentConfig, *, limiter: AdaptiveLimiter | None = None, max_connections: int | None = None
) -> OpenAIChatModel:
    """The model of `config` over HTTP (close it with `aclose`). An endpoint on this machine
    needs no key; any other without one is a ConfigError naming where a key comes from."""
    key = config.api_key or (LOOPBACK_KEY if is_loopback(config.base_url) else None)
    if not key:
        raise ConfigError(
            f"no API key for {config.base_url}: pass --api_key or set OPENROUTER_API_KEY / OPENAI_API_KEY"
            + embedded_hint(config.model)
        )
    pool: dict[str, int] = {} if max_connections is None else {"max_connections": max_connections}
    return OpenAIChatModel(
        base_url=config.base_url,
        api_key=key,
        model=config.model,
        timeout=config.request_timeout,
        max_retries=config.max_retries,
        max_reply_bytes=config.max_reply_bytes,
        limiter=limiter,
        image_api="chat" if config.dialect == "openrouter" else "images",  # OpenRouter has no images API
        **pool,  # absent: the client's own default
    )
