"""Shared harness of the report tests (this module holds no tests): one real batch run against
the simulated endpoint whose entries include hostile text, a discard, a failure, a failed tool
call and throttling, and a headless Debian Chromium driven by Playwright.

Chromium: /usr/bin/chromium (Debian's, installed by .ci/run; Playwright's own browser download
is not used). Under CI=true a missing Chromium or Playwright fails the test; elsewhere it skips.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent.servers.faults import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import REPO, BatchCLI, Finished, write_dataset

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]
HOSTILE_MARKUP = "</script><img src=x onerror=window.__pwned=1>"
HOSTILE = "Hostile row: print the markup"
NO_REASONING = "Plain row: answer without thinking"
FAILING = "Failing row: the endpoint refuses it"
TOOL_ERROR = "Tool error row: a bad timeout"
PROMPTS = 20  # plain rows besides the scripted ones


@dataclass(frozen=True)
class ReportRun:
    run_dir: Path
    result: Finished
    statistics: dict[str, Any]
    entries: list[dict[str, Any]]
    discarded: list[dict[str, Any]]

    @property
    def report(self) -> Path:
        return self.run_dir / "report.html"


def missing(reason: str) -> None:
    """Fail under CI, skip elsewhere."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: required; .ci/run installs chromium)")
    pytest.skip(reason)


def script(endpoint: SimulatedEndpoint) -> None:
    terminal = (("terminal", json.dumps({"command": f"echo '{HOSTILE_MARKUP}'"})),)
    endpoint.script(
        HOSTILE,
        [
            Turn(reasoning="I will <b>echo</b> it", tool_calls=terminal),
            Turn(content=f"Printed {HOSTILE_MARKUP}<script>window.__pwned=2</script>", reasoning="Done."),
        ],
    )
    endpoint.script(NO_REASONING, [Turn(content="An answer with no reasoning.")])
    endpoint.script(FAILING, [Turn(fault=EndpointFault(400, f"refused {HOSTILE_MARKUP}"))])
    bad_timeout = (("terminal", json.dumps({"command": "true", "timeout": "soon"})),)
    endpoint.script(
        TOOL_ERROR,
        [Turn(reasoning="Run it.", tool_calls=bad_timeout), Turn(content="It failed.", reasoning="Oh.")],
    )


# The development distribution samples web and moa too: give them a backend.
CORPUS = Path(__file__).resolve().parents[2] / "data" / "corpus"
TOOL_FLAGS = (f"--web_corpus={CORPUS}", "--moa_models=sim/reference")


def run_batch(workdir: Path) -> ReportRun:
    """A real run: 24 prompts, 2 workers, 1.5 s per call and some 429s, so in-flight, pulses (sent
    about once a second) and the limiter show in the timeline however fast the machine is."""
    with SimulatedEndpoint(latency=1.5, rate_429=0.1, retry_after=0.2, seed=3) as endpoint:
        script(endpoint)
        cli = BatchCLI(workdir, endpoint)
        rows = [{"prompt": p} for p in (HOSTILE, NO_REASONING, FAILING, TOOL_ERROR)]
        rows += [{"prompt": f"Plain task {i}: list the files"} for i in range(PROMPTS)]
        dataset = write_dataset(workdir / "rows.jsonl", rows)
        flags = ("--batch_size=8", "--distribution=development", "--seed=5", "--num_workers=2", *TOOL_FLAGS)
        result = cli.run(f"--dataset_file={dataset}", "--run_name=report", "--model=sim/report", *flags)
    run_dir = cli.run_dir("report")

    def lines(name: str) -> list[dict[str, Any]]:
        path = run_dir / name
        return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    statistics = json.loads((run_dir / "statistics.json").read_text())
    return ReportRun(run_dir, result, statistics, lines("trajectories.jsonl"), lines("discarded.jsonl"))


def save_artifact(source: Path) -> None:
    """Under CI, keep a copy in test-artifacts/report/ (ignored by git) for the CI job to upload."""
    if os.environ.get("CI", "").lower() == "true":
        target = REPO / "test-artifacts" / "report"
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target / source.name)


DATA = re.compile(r'<script type="application/json" id="report-data">(.*?)</script>', re.DOTALL)


def page_data(html: str) -> dict[str, Any]:
    match = DATA.search(html)
    assert match is not None
    data: dict[str, Any] = json.loads(match.group(1))
    return data
