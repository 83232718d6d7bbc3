"""web_search through each search API (loopback TEST DOUBLES speaking the vendors' documented
shapes, tests/support/search_api_doubles.py), the backend choice and its unavailability reasons, the
errors the model reads, and the settings the command line builds (keys from the environment
only, never in the public config)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from agent.cli.batch_cli import build_run_config
from agent.cli.command_line import read_command_line
from agent.cli.flags import BATCH
from agent.errors import ConfigError
from agent.protocols import ToolConfig
from agent.toolbox.context import SandboxContext
from agent.toolbox.registry import resolve_tools, toolset_availability
from tests.support.search_api_doubles import SearchAPIDouble
from tools.web import backends, search_client
from tools.web.handlers import web_search
from tools.web.search_apis import RESULTS, SEARCH_APIS

KEY = "canary-search-key-5d1e9b"


def search(config: ToolConfig, query: str = "tide pools") -> dict[str, Any]:
    async def call() -> dict[str, Any]:
        context = SandboxContext(None, config)  # type: ignore[arg-type]  # web tools need no sandbox
        try:
            return await web_search({"query": query}, context)
        finally:
            await context.aclose()

    return asyncio.run(call())


def api_config(double: SearchAPIDouble, key: str | None = KEY) -> ToolConfig:
    keys = {double.vendor: key} if key else {}
    return ToolConfig(web_backend=double.vendor, web_keys=keys, web_api_url=double.base_url)


AUTH = {
    "firecrawl": ("Authorization", f"Bearer {KEY}"),
    "tavily": ("Authorization", f"Bearer {KEY}"),
    "exa": ("x-api-key", KEY),
}
BODY = {
    "firecrawl": {"query": "tide pools", "limit": RESULTS},
    "tavily": {"query": "tide pools", "max_results": RESULTS, "search_depth": "basic"},
    "exa": {"query": "tide pools", "numResults": RESULTS, "type": "auto", "contents": {"highlights": True}},
}


@pytest.mark.parametrize("vendor", ["firecrawl", "tavily", "exa"])
def test_each_search_api_gets_its_documented_request_and_its_answer_becomes_results(vendor: str) -> None:
    with SearchAPIDouble(vendor) as double:
        result = search(api_config(double))
    [request] = double.received
    assert (request.method, request.path) == ("POST", {"firecrawl": "/v2/search"}.get(vendor, "/search"))
    header, value = AUTH[vendor]
    assert request.headers[header] == value
    assert request.body == BODY[vendor]
    results = result["results"]
    assert 1 <= len(results) <= RESULTS
    assert all(set(item) == {"title", "url", "snippet"} for item in results)
    first = results[0]
    assert first["url"].startswith("https://") and "tide pools" in first["title"]
    assert "tide pools" in first["snippet"]  # description / content / highlights, per vendor


def test_firecrawl_v1_answers_of_a_self_hosted_server_are_read_too() -> None:
    v1 = {"success": True, "data": [{"url": "https://a.example", "title": "A", "description": "d"}]}
    assert SEARCH_APIS["firecrawl"].results(v1) == [
        {"title": "A", "url": "https://a.example", "snippet": "d"}
    ]


def test_a_self_hosted_firecrawl_needs_no_key_and_gets_no_authorization_header() -> None:
    with SearchAPIDouble("firecrawl") as double:
        result = search(api_config(double, key=None))
    assert result["results"]
    assert "Authorization" not in double.received[0].headers


@pytest.mark.parametrize(
    ("status", "says"),
    [
        (401, "HTTP 401, the API key was refused"),
        (402, "out of credits"),
        (429, "rate limited"),
        (500, "HTTP 500, server error"),
    ],
)
def test_api_errors_become_results_the_model_reads_without_the_key(status: int, says: str) -> None:
    with SearchAPIDouble("tavily") as double:
        double.fail_with(status, {"detail": {"error": f"bad key {KEY}"}})  # a vendor echoing the key
        result = search(api_config(double))
    assert says in result["error"] and "tavily" in result["error"]
    assert KEY not in json.dumps(result)


def test_an_unreadable_answer_is_an_error_result() -> None:
    with SearchAPIDouble("exa") as double:
        double.raw_answer = b"<html>gateway</html>"
        result = search(api_config(double))
    assert "unreadable answer" in result["error"]


def test_a_search_api_that_does_not_answer_in_time_is_an_error_result(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(search_client, "TIMEOUT", aiohttp.ClientTimeout(total=0.3))
    with SearchAPIDouble("firecrawl") as double:
        double.delay = 2.0
        result = search(api_config(double))
    assert "did not answer within" in result["error"]


def test_auto_takes_the_corpus_then_the_first_keyed_api_in_the_reference_order(tmp_path: Path) -> None:
    choose = backends.search_backend
    assert choose(ToolConfig(web_keys={"exa": "k", "tavily": "k"})) == "tavily"
    assert choose(ToolConfig(web_keys={"exa": "k", "firecrawl": "k"})) == "firecrawl"
    assert choose(ToolConfig(web_api_url="http://10.0.0.5:3002")) == "firecrawl"  # self-hosted
    assert choose(ToolConfig(web_corpus=str(tmp_path), web_keys={"exa": "k"})) == "corpus"
    assert choose(ToolConfig(web_backend="exa", web_keys={"tavily": "k"})) is None


@pytest.mark.parametrize(
    ("config", "names"),
    [
        (ToolConfig(), ("FIRECRAWL_API_KEY", "TAVILY_API_KEY", "EXA_API_KEY", "--web_corpus")),
        (ToolConfig(web_backend="exa"), ("EXA_API_KEY",)),
        (ToolConfig(web_backend="firecrawl"), ("FIRECRAWL_API_KEY", "FIRECRAWL_API_URL")),
    ],
)
def test_web_search_is_not_offered_without_a_backend_and_says_how_to_enable_it(
    config: ToolConfig, names: tuple[str, ...]
) -> None:
    resolved = resolve_tools(["web"], config=config)
    assert resolved.specs == () and resolved.toolsets_used == []
    for tool in ("web_search", "web_extract"):
        reason = resolved.unavailable[tool]
        assert all(name in reason for name in names), reason
    assert toolset_availability(config)["web"] == reason  # what --list_distributions shows


def values(*argv: str) -> Mapping[str, Any]:
    parsed = read_command_line(BATCH, ["--dataset_file=d.jsonl", "--batch_size=1", "--run_name=r", *argv])
    assert parsed is not None
    return parsed


def test_keys_come_from_the_environment_and_the_public_config_names_only_the_backends(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TAVILY_API_KEY", KEY)
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-or-test-0000")
    config = build_run_config(values(f"--output_dir={tmp_path}"))
    assert config.agent.tools.web_keys == {"tavily": KEY}
    assert config.agent.tools.public()["web_keys"] == ["tavily"]
    assert KEY not in json.dumps(config.agent.tools.public()) and KEY not in repr(config)


def test_firecrawl_api_url_from_the_environment_selects_a_self_hosted_firecrawl(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("FIRECRAWL_API_URL", "http://127.0.0.1:3002")
    tools = build_run_config(values(f"--output_dir={tmp_path}")).agent.tools
    assert tools.web_api_url == "http://127.0.0.1:3002"
    assert backends.search_backend(tools) == "firecrawl"
    tavily = build_run_config(values(f"--output_dir={tmp_path}", "--web_backend=tavily")).agent.tools
    assert tavily.web_api_url is None  # FIRECRAWL_API_URL is Firecrawl's only


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--web_backend=corpus",), "--web_backend=corpus needs --web_corpus"),
        (("--web_corpus=/nonexistent/corpus",), "--web_corpus: /nonexistent/corpus is not a directory"),
        (("--web_api_url=ftp://x",), "--web_api_url"),
        (("--web_corpus_url=127.0.0.1:8000",), "--web_corpus_url"),
    ],
)
def test_bad_web_settings_are_one_line_naming_the_flag(
    argv: tuple[str, ...], says: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match=re.escape(says)):
        build_run_config(values(f"--output_dir={tmp_path}", *argv))


def test_an_empty_corpus_folder_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "corpus").mkdir()
    (tmp_path / "corpus" / "image.png").write_bytes(b"\x89PNG")
    with pytest.raises(ConfigError, match="holds no documents"):
        build_run_config(values(f"--output_dir={tmp_path}", f"--web_corpus={tmp_path / 'corpus'}"))
