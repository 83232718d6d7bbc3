"""A batch run with `--distribution=browser_only` (the real runner as a subprocess, the simulated
endpoint over HTTP, pages on 127.0.0.1 in real Chromium): every prompt is offered the browser
tools and uses them, and no Chromium outlives the run. The runner's TMPDIR here is longer than
a Chromium singleton socket's path allows (the tools give Chromium a short one)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.fixtures.browser import require_browser
from tests.support.batch import (
    API_KEY,
    BatchCLI,
    human_prompt,
    kill_started,
    read_jsonl,
    wait_until,
    write_dataset,
)
from tests.support.browser import chromium_pids, serve_pages
from tools.browser import TOOLSET
from tools.browser.host import MAX_TMPDIR_BYTES

PROMPTS = [f"Browse to the next page and press its button ({i})" for i in range(4)]


@pytest.fixture(autouse=True)
def nothing_left(tmp_path: Path) -> Iterator[None]:
    require_browser()
    yield
    kill_started()
    for pid in chromium_pids(tmp_path):  # only after a failure: the runner should have ended them
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def process_text(pid: int) -> bytes:
    """A process's command line and environment (empty if it ended meanwhile)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return b""


def script(endpoint: SimulatedEndpoint, base: str) -> None:
    for prompt in PROMPTS:
        navigate = ("browser_navigate", json.dumps({"url": base + "/next"}))
        snapshot = ("browser_snapshot", json.dumps({"full": True}))
        turns = [Turn(tool_calls=(navigate,)), Turn(tool_calls=(snapshot,)), Turn(content="Done.")]
        endpoint.script(prompt, [dataclasses.replace(turn, reasoning="Browse first.") for turn in turns])


def test_browser_only_run_uses_the_browser_and_leaves_no_chromium(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    cli = BatchCLI(tmp_path / ("a-long-directory-name-" * 3), sim_endpoint)
    assert len(str(cli.tmpdir)) > MAX_TMPDIR_BYTES
    dataset = write_dataset(cli.workdir / "prompts.jsonl", [{"prompt": p} for p in PROMPTS])
    with serve_pages() as (base, paths):
        script(sim_endpoint, base)
        runner = cli.start(
            f"--dataset_file={dataset}",
            "--run_name=browse",
            "--distribution=browser_only",
            "--allow_hosts=127.0.0.1",
            "--num_workers=1",
            "--batch_size=2",
        )
        seen: set[int] = set()
        leaked: list[int] = []
        while runner.poll() is None:  # Chromium runs under the worker while the run goes on
            for pid in set(chromium_pids(cli.tmpdir)) - seen:
                seen.add(pid)
                leaked += [pid] if API_KEY.encode() in process_text(pid) else []
            time.sleep(0.05)
    assert runner.returncode == 0, (cli.workdir / "runner.err").read_text()
    assert seen, "no Chromium was seen during the run"
    assert leaked == []  # the API key is in neither Chromium's command line nor its environment
    wait_until(lambda: not chromium_pids(cli.tmpdir), "Chromium ending with the worker", timeout=15)

    entries = read_jsonl(cli.run_dir("browse") / "trajectories.jsonl")
    assert sorted(human_prompt(e) for e in entries) == sorted(PROMPTS)
    for entry in entries:
        assert entry["completed"] and entry["toolsets_used"] == ["browser"]
        tool_turns = [t["value"] for t in entry["conversations"] if t["from"] == "tool"]
        assert entry["tool_stats"]["browser_navigate"] == {"count": 1, "success": 1, "failure": 0}, tool_turns
        assert any('button \\"Press me\\"' in turn for turn in tool_turns), tool_turns
    assert paths.count("/next") == len(PROMPTS)
    offered = {tool["function"]["name"] for tool in sim_endpoint.requests[0].body["tools"]}
    assert offered == set(TOOLSET.tool_names)
