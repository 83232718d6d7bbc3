"""Sums of usages: tokens (`add_tokens`) and USD (`Spend`), as statistics.json counts them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent.store.jsonl import json_int

TOKEN_KEYS = ("prompt", "completion", "reasoning", "total")


def add_tokens(total: Counter[str], usage: Any) -> None:
    """Add `{prompt, completion, reasoning, total}` from an OpenAI-style usage mapping."""
    usage = usage if isinstance(usage, Mapping) else {}
    prompt, completion = json_int(usage.get("prompt_tokens")), json_int(usage.get("completion_tokens"))
    total["prompt"] += prompt
    total["completion"] += completion
    total["reasoning"] += json_int(usage.get("reasoning_tokens"))
    total["total"] += json_int(usage.get("total_tokens")) if "total_tokens" in usage else prompt + completion


@dataclass
class Spend:
    """USD summed from usages' `cost_usd`, and how many had one (none known is not 0 USD)."""

    usd: float = 0.0
    costed: int = 0

    def add(self, usage: Any) -> None:
        cost = usage.get("cost_usd") if isinstance(usage, Mapping) else None
        if isinstance(cost, int | float) and not isinstance(cost, bool):
            self.usd += cost
            self.costed += 1

    def known(self) -> float | None:
        return round(self.usd, 6) if self.costed else None
