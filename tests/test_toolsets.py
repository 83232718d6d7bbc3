"""Toolsets and distributions: the static tables, sampling and the listing."""

from __future__ import annotations

import random
from collections import Counter

import pytest

import toolsets
from agent.errors import ConfigError
from toolsets import (
    DISTRIBUTIONS,
    TOOLSETS,
    format_distributions,
    get_distribution,
    resolve_toolset,
    sample_toolsets_from_distribution,
)

# Reference §5.3, written out independently of the module's own table.
EXPECTED = {
    "default": dict(web=100, vision=100, image_gen=100, terminal=100, file=100, moa=100, browser=100),
    "image_gen": dict(web=55, vision=90, image_gen=90, terminal=45, moa=10),
    "research": dict(web=90, vision=50, terminal=10, moa=40, browser=70),
    "science": dict(web=94, vision=65, image_gen=15, terminal=94, file=94, moa=10, browser=50),
    "development": dict(web=30, vision=10, terminal=80, file=80, moa=60),
    "safe": dict(web=80, vision=60, image_gen=60, moa=50, browser=70),
    "balanced": dict(web=50, vision=50, image_gen=50, terminal=50, file=50, moa=50, browser=50),
    "minimal": dict(web=100),
    "terminal_only": dict(terminal=100, file=100),
    "terminal_web": dict(web=100, terminal=100, file=100),
    "creative": dict(web=30, vision=90, image_gen=90),
    "reasoning": dict(web=30, terminal=20, moa=90),
    "browser_use": dict(web=80, vision=70, browser=100),
    "browser_only": dict(browser=100),
    "browser_tasks": dict(vision=12, terminal=15, browser=97),
    "terminal_tasks": dict(web=97, vision=50, image_gen=10, terminal=97, file=97, browser=75),
    "mixed_tasks": dict(web=35, vision=15, image_gen=15, terminal=92, file=92, browser=92),
}


def test_the_seventeen_distributions_and_their_probabilities() -> None:
    assert len(DISTRIBUTIONS) == 17
    assert {name: dist.toolsets for name, dist in DISTRIBUTIONS.items()} == EXPECTED
    assert all(dist.description for dist in DISTRIBUTIONS.values())
    for dist in DISTRIBUTIONS.values():  # dict order is the sampling order: the table's column order
        order = list(TOOLSETS)
        assert list(dist.toolsets) == sorted(dist.toolsets, key=order.index)


def test_toolsets_and_their_tools() -> None:
    assert {name: ts.tool_names for name, ts in TOOLSETS.items()} == {
        "web": ("web_search", "web_extract"),
        "vision": ("vision_analyze",),
        "image_gen": ("image_generate",),
        "terminal": ("terminal", "process"),
        "file": ("read_file", "write_file", "patch", "search_files"),
        "moa": ("mixture_of_agents",),
        "browser": (
            "browser_navigate",
            "browser_snapshot",
            "browser_click",
            "browser_type",
            "browser_scroll",
            "browser_back",
            "browser_press",
            "browser_get_images",
            "browser_vision",
            "browser_console",
        ),
    }
    tools = [tool for ts in TOOLSETS.values() for tool in ts.tool_names]
    assert len(tools) == len(set(tools)) == 21  # web_search belongs to web only


def test_unknown_names_are_config_errors_listing_valid_ones() -> None:
    with pytest.raises(ConfigError, match="valid: balanced, browser_only"):
        get_distribution("nope")
    with pytest.raises(ConfigError, match=r"valid: browser, file.*all"):
        resolve_toolset("web_tools")
    with pytest.raises(ConfigError):
        sample_toolsets_from_distribution("nope", random.Random(0))


def test_resolve_toolset() -> None:
    assert resolve_toolset("terminal") == ["terminal", "process"]
    everything = resolve_toolset("all")
    assert len(everything) == 21 and everything[:2] == ["web_search", "web_extract"]


def test_seeded_sampling_is_reproducible() -> None:
    draws = [sample_toolsets_from_distribution("balanced", random.Random(7)) for _ in range(2)]
    assert draws[0] == draws[1]
    rng_a, rng_b = random.Random(42), random.Random(42)
    seq_a = [sample_toolsets_from_distribution("science", rng_a) for _ in range(50)]
    seq_b = [sample_toolsets_from_distribution("science", rng_b) for _ in range(50)]
    assert seq_a == seq_b
    assert len({tuple(s) for s in seq_a}) > 1  # it is random, not constant


class _NeverRng(random.Random):
    """A real generator whose every draw is as high as it gets: no toolset is ever drawn."""

    def random(self) -> float:
        return 0.999999


def test_at_least_one_toolset_is_always_chosen() -> None:
    never = _NeverRng()
    assert sample_toolsets_from_distribution("browser_tasks", never) == ["browser"]
    assert sample_toolsets_from_distribution("reasoning", never) == ["moa"]
    assert sample_toolsets_from_distribution("creative", never) == ["vision"]  # tie: first in order
    assert sample_toolsets_from_distribution("default", never) == list(TOOLSETS)  # 100% always drawn
    rng = random.Random(3)
    assert all(sample_toolsets_from_distribution("browser_tasks", rng) for _ in range(500))


def test_sampled_frequencies_match_the_probabilities() -> None:
    rng, n = random.Random(1234), 20_000
    counts: Counter[str] = Counter()
    for _ in range(n):
        sample = sample_toolsets_from_distribution("science", rng)
        assert sample == [t for t in DISTRIBUTIONS["science"].toolsets if t in sample]  # dict order
        counts.update(sample)
    for toolset, percent in DISTRIBUTIONS["science"].toolsets.items():
        assert abs(100 * counts[toolset] / n - percent) < 1.5, toolset  # > 4 sigma at n=20000


def test_format_distributions_marks_unavailable_toolsets() -> None:
    available: dict[str, str | None] = {name: None for name in TOOLSETS}
    available["browser"] = "no browser here"
    available["web"] = "no web here"
    text = format_distributions(available)
    headers = [line.split(":")[0] for line in text.splitlines() if line and not line.startswith(" ")]
    assert headers[:17] == sorted(DISTRIBUTIONS)
    block = text.split("browser_tasks:")[1].split("\n")[1:4]
    assert [line.split()[0] for line in block] == ["browser", "terminal", "vision"]  # by probability
    assert "(unavailable)" in block[0] and "(unavailable)" not in block[1]
    assert "browser_only: Browser only  [nothing usable here]" in text
    assert "  browser: no browser here" in text and "  web: no web here" in text
    assert "vision:" not in text.split("Unavailable on this machine:")[1]


def test_format_distributions_treats_unlisted_toolsets_as_unknown() -> None:
    text = format_distributions({})
    assert "  moa: availability unknown" in text
    assert toolsets.ALL == "all"
