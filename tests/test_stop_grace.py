"""A worker that outlives the stop's grace (a tool blocking its event loop ignores the stop):
killed at STOP_GRACE, and its prompt counted as interrupted in flight, as a worker that stopped
in time says of its own. Unreported, it was counted "not started". (Over 30 s: the grace.)"""

from __future__ import annotations

import signal
from pathlib import Path

from agent.batch.scheduler import STOP_GRACE
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support.batch import (
    BatchCLI,
    assert_nothing_left,
    kill_started,
    read_json,
    wait_until,
    write_dataset,
)

BLOCKS = """
import time
from pathlib import Path
from agent.protocols import ToolSpec, Toolset

async def block(args, context):
    Path("blocking").write_text("now")
    time.sleep(600)  # holds the worker's event loop: it cannot act on the stop
    return "never"

SCHEMA = {"name": "block", "description": "d", "parameters": {"type": "object", "properties": {}}}
TOOLSET = Toolset("blocking", "blocks its worker", (ToolSpec("block", SCHEMA, block),))
"""


def test_a_worker_killed_at_the_grace_leaves_its_prompt_interrupted_in_flight(tmp_path: Path) -> None:
    (tmp_path / "blocks.py").write_text(BLOCKS, encoding="utf-8")
    (tmp_path / "dists.yaml").write_text("only:\n  description: d\n  toolsets: {blocking: 100}\n")
    write_dataset(tmp_path / "d.jsonl", [{"prompt": "go"}])
    with SimulatedEndpoint() as endpoint:
        endpoint.script(
            "go", [Turn(reasoning="r", tool_calls=(("block", "{}"),)), Turn(content="done", reasoning="r")]
        )
        cli = BatchCLI(tmp_path, endpoint)
        runner = cli.start(
            "--dataset_file=d.jsonl", "--batch_size=1", "--run_name=g", "--num_workers=1",
            "--tools_module=blocks.py", "--distributions_file=dists.yaml", "--distribution=only",
        )  # fmt: skip
        try:
            wait_until(lambda: (tmp_path / "blocking").exists(), "the tool blocking its worker", 120)
            runner.send_signal(signal.SIGTERM)
            code = runner.wait(timeout=STOP_GRACE + 90)
            assert_nothing_left(runner.pid)
        finally:
            kill_started()
    assert code == 130, (tmp_path / "runner.err").read_text()[-3000:]
    completion = read_json(cli.run_dir("g") / "statistics.json")["completion"]
    assert (completion["interrupted_in_flight"], completion["not_started"]) == (1, 0), completion
    err = " ".join((tmp_path / "runner.err").read_text().replace("│", " ").split())
    assert "Interrupted in flight: 1 prompts (dataset indices 0)" in err, err[-2000:]
