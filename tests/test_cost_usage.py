"""Usage and cost: what a reply's usage says, how calls add up, how a price table prices them;
the filter table and the price flags' checks."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest

from agent.batch.recovery import filter_warnings
from agent.cli.flags import BY_NAME
from agent.config.agent_config import AgentConfig
from agent.config.run_config import KEPT_BY, RunConfig
from agent.errors import ConfigError
from agent.llm.reply import parse_reply
from agent.protocols import Prices, Usage


def reply_with(usage: dict[str, object]) -> Usage:
    body = {"choices": [{"message": {"role": "assistant", "content": "hi"}}], "usage": usage}
    return parse_reply(json.dumps(body).encode()).usage


def test_a_reply_carries_the_providers_cost_and_cached_tokens() -> None:
    usage = reply_with(
        {
            "prompt_tokens": 100,
            "completion_tokens": 20,
            "cost": 0.0042,
            "prompt_tokens_details": {"cached_tokens": 60},
        }
    )
    assert (usage.prompt_tokens, usage.completion_tokens, usage.cached_tokens) == (100, 20, 60)
    assert usage.cost_usd == 0.0042


@pytest.mark.parametrize("cost", [-1, True, "0.1", None, math.inf])
def test_a_cost_that_is_no_price_is_unknown(cost: object) -> None:
    usage = {"prompt_tokens": 1, "completion_tokens": 1, "cost": cost}
    body = json.dumps({"choices": [{"message": {"content": ""}}], "usage": usage}, allow_nan=True)
    assert parse_reply(body.encode()).usage.cost_usd is None


def test_costs_add_up_and_unknown_stays_unknown() -> None:
    assert (Usage() + Usage()).cost_usd is None
    assert (Usage(cost_usd=0.5) + Usage()).cost_usd == 0.5
    assert (Usage(1, 2, 0, 1, 0.25) + Usage(3, 4, 0, 2, 0.5)) == Usage(4, 6, 0, 3, 0.75)


def test_a_price_table_prices_tokens_and_cached_tokens_unless_the_provider_did() -> None:
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=200_000, cached_tokens=400_000)
    assert usage.priced(Prices(3.0, 15.0)).cost_usd == pytest.approx(3.0 + 3.0)
    assert usage.priced(Prices(3.0, 15.0, cached=0.3)).cost_usd == pytest.approx(1.8 + 0.12 + 3.0)
    assert usage.priced(None).cost_usd is None
    assert Usage(10, 10, cost_usd=0.01).priced(Prices(1e6, 1e6)).cost_usd == 0.01


def test_usage_dict_shows_cost_and_cached_tokens_only_when_there_are_any() -> None:
    assert list(Usage(1, 2, 3).as_dict()) == [
        "prompt_tokens",
        "completion_tokens",
        "reasoning_tokens",
        "total_tokens",
    ]
    assert Usage(1, 2, 0, 1, 0.5).as_dict() == {
        "prompt_tokens": 1,
        "completion_tokens": 2,
        "reasoning_tokens": 0,
        "total_tokens": 3,
        "cached_tokens": 1,
        "cost_usd": 0.5,
    }


def test_every_filter_is_kept_by_a_boolean_run_flag() -> None:
    """Flawed entries are discarded unless kept; a drifted one is kept unless dropped (its RL row
    is still exact, only fewer of its ids count as generated: docs/tokens.md)."""
    fields = {f.name: f for f in dataclasses.fields(RunConfig)}
    kept_by_default = {"token_drift"}
    for reason, name in KEPT_BY.items():
        assert fields[name].default is (reason in kept_by_default), reason
        assert BY_NAME[name].kind == "bool"


def config(**changes: object) -> RunConfig:
    return RunConfig(dataset_file="d.jsonl", batch_size=1, run_name="r", agent=AgentConfig(), **changes)


def test_keeps_follows_the_table() -> None:
    assert config(keep_no_reasoning=True).keeps("no_reasoning")
    assert not config().keeps("no_reasoning") and not config(keep_no_reasoning=True).keeps("other")


@pytest.mark.parametrize("prices", [{"price_input": 1.0}, {"price_output": 1.0}, {"price_cached": 1.0}])
def test_a_half_price_table_is_refused(prices: dict[str, float]) -> None:
    with pytest.raises(ConfigError, match="--price"):
        config(**prices)


def test_filters_that_dropped_most_entries_are_named_with_their_flag() -> None:
    assert filter_warnings({"no_reasoning": 6, "odd": 1}, 10) == [
        {"reason": "no_reasoning", "discarded": 6, "entries": 10, "kept_by": "--keep_no_reasoning"}
    ]
    assert filter_warnings({"no_reasoning": 5}, 10) == []
    assert filter_warnings({"unknown_filter": 3}, 3)[0]["kept_by"] is None
