"""Endpoints scripted beyond what SimulatedEndpoint offers, shared by the loop's and the worker's
tests."""

from __future__ import annotations

from typing import Any

from agent.servers.endpoint_server import EndpointServer
from agent.servers.simulated.replies import build_completion
from agent.servers.simulated.server import Turn


def endpoint_with_call_ids(turns: list[Turn], ids: list[str | None]) -> EndpointServer:
    """Simulated replies to a conversation in `turns`, whose tool calls get `ids` (None: no id)."""

    async def respond(body: dict[str, Any]) -> dict[str, Any]:
        done = sum(1 for m in body["messages"] if m["role"] == "assistant")
        completion = build_completion(body, turns[done], "sim-model")
        made = completion["choices"][0]["message"].get("tool_calls", [])
        for tool_call, call_id in zip(made, ids if made else [], strict=True):
            tool_call["id"] = call_id
        return completion

    return EndpointServer(respond)
