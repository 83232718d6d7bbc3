"""Availability is explicit: a run whose distribution needs a toolset that cannot run here
stops before any token, one line per missing toolset; with --allow_missing_toolsets it runs,
its entries record the sampled toolsets and those lost, statistics.json and the summary count
them; --list_distributions shows every toolset's backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.protocols import ToolConfig
from agent.servers.simulated.server import SimulatedEndpoint
from agent.toolbox.registry import TOOLSETS, toolset_availability, toolset_backends, unavailable_toolsets
from tests.support.batch import API_KEY, BatchCLI, prompts_dataset, read_json, read_jsonl

# Web needs a search backend (none is configured here); the browser is made unavailable by
# pointing it at a Chromium that does not exist, so the tests run alike with or without one.
NO_BROWSER = "--browser_executable=/nonexistent/chromium"
CONFIG = ToolConfig(browser_executable="/nonexistent/chromium", artifacts_dir="<output_dir>/<run_name>")
WEB_WHY = toolset_availability(CONFIG)["web"]
BROWSER_WHY = toolset_availability(CONFIG)["browser"]
assert WEB_WHY is not None and BROWSER_WHY is not None


@pytest.fixture
def cli(tmp_path: Path, sim_endpoint: SimulatedEndpoint) -> BatchCLI:
    return BatchCLI(tmp_path, sim_endpoint)


def test_a_distribution_needing_an_unavailable_toolset_stops_before_any_token(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts_dataset(cli.workdir / "p.jsonl", ["never sent"])
    run = cli.run(
        "--dataset_file=p.jsonl",
        "--batch_size=1",
        "--run_name=stop",
        "--distribution=browser_use",
        NO_BROWSER,
    )
    assert run.returncode == 2, run
    lines = [line for line in run.stderr.splitlines() if line.strip()]
    missing = unavailable_toolsets(["web", "vision", "browser"], CONFIG)
    assert lines == [
        "error: --distribution=browser_use needs toolsets that are unavailable here (enable them, "
        "or pass --allow_missing_toolsets to run without them):",
        *(f"  {toolset}: {why}" for toolset, why in missing.items()),
    ]
    assert "browser" in missing and "web" in missing
    assert sim_endpoint.requests == []
    assert not cli.run_dir("stop").exists()


def test_allowed_missing_toolsets_are_recorded_and_counted(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts = [f"lost toolset prompt {i}" for i in range(6)]
    prompts_dataset(cli.workdir / "p.jsonl", prompts)
    flags = ("--dataset_file=p.jsonl", "--batch_size=3", "--run_name=lost", "--num_workers=1")
    run = cli.run(*flags, "--distribution=terminal_web", "--allow_missing_toolsets", "--max_turns=2")
    assert run.returncode == 0, run
    entries = read_jsonl(cli.run_dir("lost") / "trajectories.jsonl")
    assert len(entries) == 6
    for entry in entries:
        assert entry["toolsets_used"] == ["web", "terminal", "file"]  # sampled, in the table's order
        assert entry["metadata"]["toolsets_unavailable"] == ["web"]
    for request in sim_endpoint.requests:
        offered = {tool["function"]["name"] for tool in request.body["tools"]}
        assert offered == {*TOOLSETS["terminal"].tool_names, *TOOLSETS["file"].tool_names}
    stats = read_json(cli.run_dir("lost") / "statistics.json")
    assert stats["toolsets"] == {
        "sampled": {"file": 6, "terminal": 6, "web": 6},
        "unavailable": {"web": 6},
        "prompts_missing_toolsets": 6,
    }
    assert "Prompts that lost a sampled toolset (unavailable here): 6 (web 6)" in run.stderr
    assert API_KEY not in (cli.run_dir("lost") / "run_config.json").read_text()


def test_a_browser_executable_that_is_no_browser_stops_the_run_before_any_token(
    cli: BatchCLI, sim_endpoint: SimulatedEndpoint
) -> None:
    prompts_dataset(cli.workdir / "p.jsonl", ["never sent"])
    run = cli.run(
        "--dataset_file=p.jsonl", "--batch_size=1", "--run_name=stop", "--distribution=browser_only",
        "--browser_executable=/bin/false",
    )  # fmt: skip
    assert run.returncode == 2, run
    assert "  browser: --browser_executable=/bin/false: /bin/false --version exited 1" in run.stderr, run
    assert sim_endpoint.requests == []


def test_list_distributions_shows_each_toolsets_backend(cli: BatchCLI) -> None:
    run = cli.run("--list_distributions", NO_BROWSER, output=False)
    assert run.returncode == 0, run
    lines = run.stdout.splitlines()
    start = lines.index("Toolset backends with these settings:")
    section = lines[start + 1 : start + 1 + len(TOOLSETS)]
    assert [line.split()[0] for line in section] == list(TOOLSETS)
    backends = toolset_backends(CONFIG)
    for line in section:
        name, described = line.split(maxsplit=1)
        assert described == backends[name]
    assert backends["terminal"] == "the prompt's sandbox (--sandbox)"
    assert backends["browser"] == f"unavailable: {BROWSER_WHY}"


def test_unavailable_toolsets_expands_all_and_keeps_only_the_missing() -> None:
    missing = unavailable_toolsets(["all"], CONFIG)
    assert "terminal" not in missing and "file" not in missing
    assert missing["web"] == WEB_WHY
    assert unavailable_toolsets(["terminal", "file"]) == {}
