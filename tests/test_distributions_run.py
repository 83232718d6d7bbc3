"""Every one of the 17 distributions, run for real: a batch against the simulated
endpoint (its default policy calls one offered tool with valid arguments, url tools on a page
served here on loopback, then answers). Every prompt gets a non-empty toolset, every sampled
toolset's tools are offered in the requests the endpoint received, and no file the run wrote
(run directory, sandboxes) holds the API key.

A distribution that needs a toolset not implemented yet (`PENDING`) must stop before any
token instead, naming each missing toolset: empty `PENDING` as the toolsets land.
"""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.protocols import ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.distributions import DISTRIBUTIONS
from agent.toolbox.registry import ALL_TOOLS, TOOLSETS, toolset_availability, unavailable_reason
from tests.support.batch import (
    API_KEY,
    BatchCLI,
    Finished,
    human_prompt,
    prompts_dataset,
    read_json,
    read_jsonl,
)

PENDING: frozenset[str] = frozenset()  # toolsets not implemented yet: none left
PROMPTS = 50  # a distribution that draws: enough prompts to see its toolsets in many combinations
# A distribution whose every toolset is at 100% draws the same toolsets for every prompt (seeded
# or not): more prompts repeat the same check (browser_only's 50 took 25-75 s of Chromium).
FIXED_PROMPTS = 10
# What the runs' flags below configure (the batch CLI sets artifacts_dir to the run directory).
CORPUS = Path(__file__).resolve().parent.parent / "data" / "corpus"
TOOLS = ToolConfig(
    allow_hosts=("127.0.0.1",), moa_models=("sim-model",), artifacts_dir="run", web_corpus=str(CORPUS)
)
PAGE = (
    b"<html><head><title>Loopback page</title></head><body><h1>Hello</h1><a href='/'>home</a></body></html>"
)


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: pytest shows stderr of failing tests


@pytest.fixture
def page_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def endpoint(page_url: str) -> Iterator[SimulatedEndpoint]:
    with SimulatedEndpoint(tool_url=page_url) as started:
        yield started


def test_pending_toolsets_are_exactly_the_unavailable_ones() -> None:
    """When a toolset lands, this fails until it leaves PENDING (and its runs are checked)."""
    availability = toolset_availability(TOOLS)
    assert {name for name, why in availability.items() if why is not None} == PENDING


@dataclass(frozen=True)
class DistributionRun:
    workdir: Path
    cli: BatchCLI
    prompts: list[str]
    finished: Finished


def _run(workdir: Path, endpoint: SimulatedEndpoint, name: str) -> DistributionRun:
    """One run of the distribution (a runner and one worker). Each test makes its own, so that
    pytest-xdist spreads the 17 runs over its workers."""
    cli = BatchCLI(workdir, endpoint)
    count = FIXED_PROMPTS if _fixed(name) else PROMPTS
    prompts = [f"{name} distribution prompt {i}" for i in range(count)]
    prompts_dataset(workdir / "p.jsonl", prompts)
    finished = cli.run(
        "--dataset_file=p.jsonl", f"--batch_size={count}", "--run_name=dist", f"--distribution={name}",
        "--num_workers=1", "--max_turns=2", "--seed=5", "--allow_hosts=127.0.0.1",
        "--moa_models=sim-model", f"--web_corpus={CORPUS}",
    )  # fmt: skip
    return DistributionRun(workdir, cli, prompts, finished)


@pytest.mark.long
@pytest.mark.parametrize("name", sorted(DISTRIBUTIONS))
def test_a_batch_run_of_the_distribution(name: str, tmp_path: Path, endpoint: SimulatedEndpoint) -> None:
    runs = {name: _run(tmp_path, endpoint, name)}
    cli, prompts, run = runs[name].cli, runs[name].prompts, runs[name].finished
    offered = _offered_by_prompt(endpoint, set(prompts))
    missing = sorted(set(DISTRIBUTIONS[name].toolsets) & PENDING)
    if missing:
        assert run.returncode == 2, run
        assert [line.split(":")[0].strip() for line in run.stderr.splitlines()[1:] if line.strip()] == [
            toolset for toolset in DISTRIBUTIONS[name].toolsets if toolset in PENDING
        ]
        assert offered == {}, "a distribution that cannot run sent a request"
        return
    assert run.returncode == 0, run
    entries = read_jsonl(cli.run_dir("dist") / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == sorted(prompts)
    for entry in entries:
        sampled = entry["toolsets_used"]
        assert sampled and set(sampled) <= set(DISTRIBUTIONS[name].toolsets)
        if _fixed(name):  # the reason it runs fewer prompts: each draws the same toolsets
            assert set(sampled) == set(DISTRIBUTIONS[name].toolsets), sampled
        assert entry["metadata"]["toolsets_unavailable"] == []
        expected = {tool for toolset in sampled for tool in TOOLSETS[toolset].tool_names}
        expected = {tool for tool in expected if unavailable_reason(ALL_TOOLS[tool], TOOLS) is None}
        assert offered[human_prompt(entry)] == expected, entry["toolsets_used"]
        assert all(set(TOOLSETS[toolset].tool_names) & expected for toolset in sampled)
    assert read_json(cli.run_dir("dist") / "statistics.json")["toolsets"]["prompts_missing_toolsets"] == 0
    assert _files_holding(runs[name].workdir, API_KEY.encode()) == []


def _fixed(name: str) -> bool:
    """Every toolset of the distribution is drawn for every prompt."""
    return all(percent == 100 for percent in DISTRIBUTIONS[name].toolsets.values())


def _offered_by_prompt(endpoint: SimulatedEndpoint, prompts: set[str]) -> dict[str, set[str]]:
    """The tools each prompt's requests offered (the same in every request of a prompt)."""
    offered: dict[str, set[str]] = {}
    for request in endpoint.requests:
        users = [m for m in request.body.get("messages", []) if m.get("role") == "user"]
        prompt = users[0]["content"] if users else None
        if isinstance(prompt, str) and prompt in prompts:  # not a tool's own call (vision, moa)
            names = {tool["function"]["name"] for tool in request.body.get("tools") or []}
            assert offered.setdefault(prompt, names) == names
    return offered


def _files_holding(root: Path, secret: bytes) -> list[str]:
    """Files under `root` (the run directory, sandboxes, logs) whose bytes hold `secret`."""
    return [
        str(path)
        for path in root.rglob("*")
        if path.is_file() and not path.is_symlink() and path.name != "p.jsonl" and secret in path.read_bytes()
    ]
