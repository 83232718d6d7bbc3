"""Calling a search API over HTTP: one aiohttp session per worker (`web.api`), one POST per
search, and every failure (a refused key, a rate limit, a timeout, an answer that is not the
documented shape) turned into a message the model reads. No retries: the model decides."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from tools.web.fetch import read_capped
from tools.web.search_apis import SearchAPI

TIMEOUT = aiohttp.ClientTimeout(total=30, sock_connect=10)
MAX_REPLY_BYTES = 4 * 1024 * 1024
_STATUS_MEANING = {
    400: "the request was refused as invalid",
    401: "the API key was refused",
    402: "payment required: the account is out of credits",
    403: "the API key is not allowed to search",
    429: "rate limited: too many searches, try again later",
}


class SearchFailed(Exception):
    """The search did not give results; the message is the tool result's error."""


@asynccontextmanager
async def api_session() -> AsyncIterator[aiohttp.ClientSession]:
    """The worker's session for search APIs (they are the operator's choice: not subject to
    the network policy, which guards what the model asks to fetch)."""
    async with aiohttp.ClientSession(timeout=TIMEOUT, trust_env=False) as session:
        yield session


async def search(
    session: aiohttp.ClientSession, api: SearchAPI, query: str, key: str | None, base_url: str | None
) -> list[dict[str, str]]:
    """The API's results for `query`; raises SearchFailed with the reason."""
    url = (base_url or api.base_url).rstrip("/") + api.path
    try:
        async with session.post(url, json=api.body(query), headers=api.headers(key)) as response:
            raw = await read_capped(response, MAX_REPLY_BYTES)
            status = response.status
    except TimeoutError:
        raise SearchFailed(f"{api.name} search did not answer within {TIMEOUT.total:.0f} s") from None
    except aiohttp.ClientError as exc:
        raise SearchFailed(f"{api.name} search could not be reached ({type(exc).__name__})") from None
    if status >= 400:
        meaning = _STATUS_MEANING.get(status, "server error" if status >= 500 else "request failed")
        raise SearchFailed(f"{api.name} search failed: HTTP {status}, {meaning}{_detail(raw, key)}")
    try:
        if len(raw) > MAX_REPLY_BYTES:
            raise ValueError("the answer is larger than 4 MiB")
        return api.results(json.loads(raw))
    except ValueError as exc:  # JSONDecodeError included
        raise SearchFailed(f"{api.name} search gave an unreadable answer: {exc}") from None


def _detail(raw: bytes, key: str | None) -> str:
    """The vendor's own error message, short (bodies are `{"error": ...}` or `{"detail": ...}`),
    without the key should the vendor echo it (the run's redaction would catch it later too)."""
    try:
        payload = json.loads(raw)
    except ValueError:
        return ""
    if not isinstance(payload, dict):
        return ""
    message = payload.get("error") or payload.get("detail") or payload.get("message")
    if isinstance(message, dict):
        message = message.get("error") or message.get("message")
    text = str(message).replace(key, "[REDACTED]") if key else str(message)
    return f" ({text[:200]})" if message else ""
