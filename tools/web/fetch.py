"""How `web_extract` fetches a page: `agent.common.fetch` (every hop checked by the network
policy, each connection resolved through it) under the page rules. A page is read up to
MAX_BYTES (after decompression): the rest of a larger page is not read, and the page says it
was cut; any answer below 400 is read.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp

from agent.common.fetch import Fetched, FetchRules, policy_session, read_capped
from agent.common.network_policy import NetworkPolicy

MAX_BYTES = 2 * 1024 * 1024
USER_AGENT = "Mozilla/5.0 (compatible; agent-batch-runner web_extract)"
PAGE_RULES = FetchRules(max_bytes=MAX_BYTES, oversize="truncate", statuses=range(200, 400))
Page = Fetched  # a fetched page, what the page converters read


@asynccontextmanager
async def fetch_session(policy: NetworkPolicy) -> AsyncIterator[aiohttp.ClientSession]:
    """The worker's session for pages (one per allow list)."""
    headers = {"User-Agent": USER_AGENT, "Accept": "text/html,application/xhtml+xml,text/*;q=0.9,*/*;q=0.5"}
    async with policy_session(policy, headers) as session:
        yield session


__all__ = ["MAX_BYTES", "PAGE_RULES", "Page", "fetch_session", "read_capped"]
