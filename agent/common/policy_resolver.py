"""aiohttp's name resolution through a `NetworkPolicy`, for `agent.common.fetch`'s sessions: a
module of its own, so that importing `agent.common.fetch` does not import aiohttp."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult

from agent.common.network_policy import NetworkPolicy


class PolicyResolver(AbstractResolver):
    """aiohttp's name resolution through the policy: only allowed addresses come back, checked
    when the connection is made (a name that resolves elsewhere after an earlier check cannot
    reach a refused address)."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        shown = f"[{host}]" if ":" in host else host
        addresses = await self._policy.resolve(f"http://{shown}:{port or 80}/")
        return [
            ResolveResult(
                hostname=host,
                host=address,
                port=port,
                proto=0,
                flags=socket.AI_NUMERICHOST,
                family=socket.AF_INET6 if ":" in address else socket.AF_INET,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None
