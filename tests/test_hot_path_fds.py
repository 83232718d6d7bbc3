"""Every conversation in flight at once fits in the open files the runner plans for (issue 26:
"16,384 in flight must work"): with the soft limit far below what they need and the hard limit
exactly `agent.batch.capacity.needed_fds` of them, a run whose conversations all wait on the
model together, each with its sandbox open, finishes every one. Fails when a conversation
holds more descriptors than `FDS_PER_CONVERSATION` says (EMFILE), or when the soft limit is
not raised."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

from agent.batch.capacity import needed_fds
from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import BatchCLI, read_jsonl, tool_then_answer, write_dataset

IN_FLIGHT = 300  # past the soft limit (256) on their own
SOFT = 256


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, needed_fds(IN_FLIGHT)))


def test_every_conversation_in_flight_fits_the_planned_open_files(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    # Each waits on its first reply, then on its second after its command ran: all at once.
    sim_endpoint.set_default_script(tool_then_answer(delay=3.0))
    prompts = [f"Prompt {n}" for n in range(IN_FLIGHT)]
    write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    cli = BatchCLI(tmp_path, sim_endpoint)
    done = subprocess.run(
        cli.argv(f"--dataset_file={tmp_path / 'd.jsonl'}", "--batch_size=100", "--run_name=fds",
                 "--num_workers=1", f"--max_inflight={IN_FLIGHT}", "--sandbox=local"),
        cwd=tmp_path, env=cli.env(), capture_output=True, text=True, timeout=240, check=False,
        preexec_fn=_limits,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    entries = read_jsonl(cli.run_dir("fds") / "trajectories.jsonl")
    assert len(entries) == IN_FLIGHT and all(e["completed"] for e in entries), done.stderr[-4000:]
    assert "Too many open files" not in done.stderr
