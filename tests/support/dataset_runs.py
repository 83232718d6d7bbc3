"""Shared by the tests of datasets beyond JSONL (tests/test_dataset_parquet.py,
tests/test_dataset_hub.py; this module holds no tests): a real batch run over the dataset,
SIGKILLed mid-run (the runner's main pid, as an OOM kill does), then --resume, after which every
prompt is in the output exactly once."""

from __future__ import annotations

import os
import signal
from collections import Counter
from collections.abc import Callable, Sequence

from agent.servers.simulated.server import SimulatedEndpoint
from tests.support.batch import (
    BatchCLI,
    Finished,
    batch_prompts,
    session_pids,
    tool_then_answer,
    trajectory_prompts,
    wait_until,
)

RUN = "ds"


def script_prompts(endpoint: SimulatedEndpoint, prompts: Sequence[str], delay: float = 0.15) -> None:
    """Each prompt a terminal call then an answer, slow enough for a kill to land mid-run."""
    for prompt in set(prompts):
        endpoint.script(prompt, tool_then_answer(delay=delay))


def kill_mid_run_then_resume(
    cli: BatchCLI,
    flags: Sequence[str],
    expected: Counter[str],
    *,
    before_resume: Callable[[], None] = lambda: None,
    resume_flags: Sequence[str] = (),
) -> Finished:
    """Start the run, SIGKILL its main pid once some (not all) prompts are written, then
    (after `before_resume`) --resume to the end with `resume_flags` too: every prompt copy of
    `expected` exactly once, in the output and in the batch files. Returns the resume's outcome."""
    proc = cli.start(*flags, f"--run_name={RUN}", "--num_workers=2", "--max_inflight=2")
    run_dir = cli.run_dir(RUN)
    total = sum(expected.values())
    wait_until(lambda: sum(batch_prompts(run_dir).values()) >= 2 or proc.poll() is not None, "progress", 120)
    assert proc.poll() is None, "the run ended before the kill"
    assert sum(batch_prompts(run_dir).values()) < total
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    wait_until(lambda: not session_pids(proc.pid), f"the workers of killed runner {proc.pid} to exit")
    before_resume()
    resumed = cli.run(*flags, f"--run_name={RUN}", "--resume", *resume_flags)
    assert resumed.returncode == 0, resumed
    assert trajectory_prompts(run_dir) == expected
    assert batch_prompts(run_dir) == expected  # no batch file holds a prompt twice
    return resumed
