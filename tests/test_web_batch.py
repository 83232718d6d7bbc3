"""End to end: batch runs whose prompts call the web tools, against the simulated endpoint over
HTTP. Offline with the shipped corpus (`--distribution=minimal`: web only), and with a search API
(a loopback TEST DOUBLE of Tavily) whose canary key must reach the API and nothing else: not the
trajectories, logs, run_config.json, statistics, nor a command in the sandbox."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import (
    BatchCLI,
    assert_nothing_left,
    kill_started,
    read_json,
    read_jsonl,
    wait_until,
    write_dataset,
)
from tests.support.search_api_doubles import LoopbackServer, SearchAPIDouble, hostile_html

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO / "data" / "corpus"
CANARY = "tvly-canary-9f8e7d6c5b4a"


class WebCLI(BatchCLI):
    def __init__(self, workdir: Path, endpoint: SimulatedEndpoint, extra_env: dict[str, str]) -> None:
        super().__init__(workdir, endpoint)
        self.extra_env = extra_env

    def env(self) -> dict[str, str]:
        return {**super().env(), "XDG_CACHE_HOME": str(self.workdir / "cache"), **self.extra_env}


def call(name: str, **arguments: Any) -> Turn:
    return Turn(reasoning=f"I will use {name}.", tool_calls=((name, json.dumps(arguments)),))


def tool_results(entry: dict[str, Any]) -> list[Any]:
    """The tool results of an entry, parsed from its `<tool_response>` turns."""
    found = []
    for turn in entry["conversations"]:
        if turn["from"] == "tool":
            body = turn["value"].split("<tool_response>", 1)[1].rsplit("</tool_response>", 1)[0]
            found.append(json.loads(body)["content"])
    return found


def test_an_offline_research_run_searches_and_reads_the_shipped_corpus(tmp_path: Path) -> None:
    prompt = "How do plants make oxygen?"
    with SimulatedEndpoint() as endpoint:
        endpoint.script(
            prompt,
            [
                call("web_search", query="plants light oxygen photosynthesis"),
                call("web_extract", urls=["corpus://science/photosynthesis.md", "https://example.com/"]),
                Turn(content="Photosynthesis splits water and releases oxygen.", reasoning="Done."),
            ],
        )
        dataset = write_dataset(
            tmp_path / "prompts.jsonl", [{"prompt": prompt}, {"prompt": "Anything on tides?"}]
        )
        cli = WebCLI(tmp_path, endpoint, {})
        done = cli.run(
            f"--dataset_file={dataset}",
            "--batch_size=2",
            "--run_name=offline",
            "--distribution=minimal",
            f"--web_corpus={CORPUS}",
            "--num_workers=1",
            "--model=sim/model",
        )
    assert done.returncode == 0, done
    entries = {
        entry["conversations"][1]["value"]: entry
        for entry in read_jsonl(cli.run_dir("offline") / "trajectories.jsonl")
    }
    entry = entries[prompt]
    assert entry["toolsets_used"] == ["web"]
    search, extract = tool_results(entry)
    assert search["results"][0] == {
        **search["results"][0],
        "title": "Photosynthesis",
        "url": "corpus://science/photosynthesis.md",
    }
    page, outside = extract["results"]
    assert "RuBisCO" in page["content"] and "not in the offline corpus" in outside["error"]
    assert (
        entry["tool_stats"]["web_search"]["success"] == 1
        and entry["tool_stats"]["web_extract"]["success"] == 1
    )
    other = entries["Anything on tides?"]  # the default simulated model calls an offered web tool
    assert other["toolsets_used"] == ["web"] and sum(s["count"] for s in other["tool_stats"].values()) == 1


def test_a_search_api_key_reaches_the_api_and_nothing_the_run_writes_or_the_sandbox_reads(
    tmp_path: Path,
) -> None:
    prompt = "Find something about otters and show the environment."
    snoop = "env; tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' '\\n' < /proc/$PPID/cmdline; true"
    with SimulatedEndpoint() as endpoint, SearchAPIDouble("tavily") as tavily:
        endpoint.script(
            prompt,
            [
                call("web_search", query="sea otters"),
                call("terminal", command=snoop),
                Turn(content="Done.", reasoning="Done."),
            ],
        )
        dataset = write_dataset(tmp_path / "prompts.jsonl", [{"prompt": prompt}])
        cli = WebCLI(tmp_path, endpoint, {"TAVILY_API_KEY": CANARY})
        done = cli.run(
            f"--dataset_file={dataset}",
            "--batch_size=1",
            "--run_name=keyed",
            "--distribution=terminal_web",
            "--web_backend=tavily",
            f"--web_api_url={tavily.base_url}",
            "--num_workers=1",
            "--model=sim/model",
            "--verbose",
        )
    assert done.returncode == 0, done
    assert [r.headers["Authorization"] for r in tavily.received] == [f"Bearer {CANARY}"]
    run_dir = cli.run_dir("keyed")
    [entry] = read_jsonl(run_dir / "trajectories.jsonl")
    search, terminal = tool_results(entry)
    assert search["results"][0]["title"] == "Tavily sea otters 0"
    assert "PATH=" in terminal["output"]  # the command ran and printed its environment
    assert read_json(run_dir / "run_config.json")["agent"]["tools"]["web_keys"] == ["tavily"]
    written = [p for p in cli.workdir.rglob("*") if p.is_file() and "cache" not in p.parts]
    assert any(p.name == "trajectories.jsonl" for p in written)
    for path in written:
        assert CANARY.encode() not in path.read_bytes(), path
    assert CANARY not in done.stdout + done.stderr


@pytest.fixture
def hostile_site() -> Iterator[tuple[LoopbackServer, list[float]]]:
    """A page on 127.0.0.1 that takes trafilatura ~100 s of CPU; the times it was served."""
    served: list[float] = []

    async def page(request: web.Request) -> web.Response:
        served.append(time.monotonic())
        return web.Response(body=hostile_html(), content_type="text/html")

    with LoopbackServer([("GET", "/hostile", page)]) as server:
        yield server, served


def hostile_run(tmp_path: Path, endpoint: SimulatedEndpoint, url: str) -> WebCLI:
    """A run whose prompt makes a sandbox (a command), then extracts the hostile page."""
    endpoint.script(
        "Read the page",
        [
            call("terminal", command="echo ready"),
            call("web_extract", urls=[url]),
            Turn(content="Done.", reasoning="Done."),
        ],
    )
    write_dataset(tmp_path / "prompts.jsonl", [{"prompt": "Read the page"}])
    return WebCLI(tmp_path, endpoint, {"TAVILY_API_KEY": CANARY})


def hostile_flags(tavily: SearchAPIDouble, run_name: str) -> tuple[str, ...]:
    return (
        "--dataset_file=prompts.jsonl",
        "--batch_size=1",
        f"--run_name={run_name}",
        "--distribution=terminal_web",
        "--web_backend=tavily",
        f"--web_api_url={tavily.base_url}",
        "--allow_hosts=127.0.0.1",
        "--num_workers=1",
        "--model=sim/model",
    )


def test_prompt_timeout_ends_a_run_whose_page_is_still_being_converted(
    tmp_path: Path, hostile_site: tuple[LoopbackServer, list[float]]
) -> None:
    server, served = hostile_site
    with SimulatedEndpoint() as endpoint, SearchAPIDouble("tavily") as tavily:
        cli = hostile_run(tmp_path, endpoint, f"{server.base_url}/hostile")
        done = cli.run(*hostile_flags(tavily, "slow"), "--prompt_timeout=8", timeout=200)
    assert done.returncode == 1, done
    ended = time.monotonic()
    [failure] = read_jsonl(cli.run_dir("slow") / "failures.jsonl")
    assert failure["error_class"] == "prompt_timeout"
    print(f"served to run end: {ended - served[0]:.1f} s")
    assert len(served) == 1 and ended - served[0] < 30, ended - served[0]  # unbounded: ~100 s
    assert not any(cli.sandbox_root("slow").glob("*"))


def test_sigterm_during_a_conversion_exits_130_at_once_and_leaves_no_sandbox(
    tmp_path: Path, hostile_site: tuple[LoopbackServer, list[float]]
) -> None:
    server, served = hostile_site
    with SimulatedEndpoint() as endpoint, SearchAPIDouble("tavily") as tavily:
        cli = hostile_run(tmp_path, endpoint, f"{server.base_url}/hostile")
        runner = cli.start(*hostile_flags(tavily, "stopped"))
        try:
            wait_until(lambda: bool(served), "the page served", 120)
            time.sleep(2.0)  # converting it now (for ~100 s if nothing stops it)
            assert any(cli.sandbox_root("stopped").glob("*"))  # the prompt's sandbox
            signalled = time.monotonic()
            runner.send_signal(signal.SIGTERM)
            code = runner.wait(timeout=120)
            took = time.monotonic() - signalled
            assert_nothing_left(runner.pid)  # before the finally below kills the run's group
        finally:
            kill_started()
    print(f"SIGTERM to exit: {took:.1f} s")  # the figure for the issue
    assert code == 130, (tmp_path / "runner.err").read_text()[-3000:]
    assert took < 15, took  # the worker was killed at its 30 s grace, the sandbox left behind
    assert not any(cli.sandbox_root("stopped").glob("*"))
