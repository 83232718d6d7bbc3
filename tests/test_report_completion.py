"""The report's split of the valid prompts is statistics.json's `completion`, read as it is:
after a resume interrupted before it retried a failure of an earlier invocation, and after a
resume with a smaller --max_samples, its parts are the same numbers and add up to the valid
prompts (the files' records would count the earlier failure, or prompts no longer in the
dataset, a second time).

The real batch_runner.py against the simulated endpoint over HTTP, local sandboxes."""

from __future__ import annotations

import html
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.report.sections import COMPLETION_PARTS
from agent.servers.endpoint_server import EndpointFault
from agent.servers.simulated.server import SimulatedEndpoint, Turn
from tests.support import batch
from tests.support.batch import BatchCLI, read_json

FAIL = Turn(fault=EndpointFault(500, "down"))


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    batch.kill_started()


def summary_rows(run_dir: Path) -> dict[str, str]:
    """The report's summary table, label -> value as shown."""
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    table = re.search(r'<table class="summary">(.*?)</table>', page, re.S)
    assert table is not None
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>", table.group(1))
    return {html.unescape(label): html.unescape(value) for label, value in rows}


def assert_report_reads_the_completion(run_dir: Path) -> dict[str, int]:
    """The report's parts are statistics.json's, and they add up to its valid prompts."""
    done, shown = read_json(run_dir / "statistics.json")["completion"], summary_rows(run_dir)
    parts = {key: int(shown[label].replace(",", "")) for key, label in COMPLETION_PARTS if label in shown}
    assert parts == {key: done[key] for key, _ in COMPLETION_PARTS if key in parts}, (shown, done)
    assert "Failed (not done since)" not in shown
    assert sum(parts.values()) == done["valid_prompts"] == int(shown["Valid prompts"]), (shown, done)
    return parts


def test_an_interrupted_resume_reports_the_earlier_failure_as_statistics_json_does(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    batch.prompts_dataset(tmp_path / "a.jsonl", [*(f"N{i}" for i in range(5)), "Fails"])
    sim_endpoint.set_default_script(batch.tool_then_answer())
    sim_endpoint.script("Fails", [FAIL])
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--run_name=mixed", "--batch_size=10", "--num_workers=1", "--max_inflight=2", "--max_retries=0")
    first = cli.run("--dataset_file=a.jsonl", *flags)
    assert first.returncode == 1, first
    assert assert_report_reads_the_completion(cli.run_dir("mixed"))["failed"] == 1

    # the new prompts hang: two in flight when it is stopped, the failing one not retried
    batch.prompts_dataset(tmp_path / "b.jsonl", [*(f"N{i}" for i in range(25)), "Fails"])
    sim_endpoint.clear()
    sim_endpoint.set_default_script(batch.tool_then_answer(command="sleep 30"))
    sim_endpoint.script("Fails", [FAIL])
    before = len(sim_endpoint.requests)
    runner = cli.start("--dataset_file=b.jsonl", *flags, "--resume")
    batch.wait_until(lambda: len(sim_endpoint.requests) - before == 2, "two prompts in flight", 120)
    os.killpg(runner.pid, signal.SIGTERM)
    assert runner.wait(timeout=90) == 130
    parts = assert_report_reads_the_completion(cli.run_dir("mixed"))
    assert parts["interrupted_in_flight"] == 2 and parts["in_output"] == 5
    assert parts["failed"] == 0 and parts["not_started"] == 26 - 5 - 2  # "Fails" among them


def test_a_resume_with_a_smaller_max_samples_reports_no_failure_of_the_rows_left_out(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    batch.prompts_dataset(tmp_path / "d.jsonl", ["Fine 0", "Fine 1", "Fails 0", "Fails 1", "Fails 2"])
    sim_endpoint.set_default_script(batch.tool_then_answer())
    for row in range(3):
        sim_endpoint.script(f"Fails {row}", [FAIL])
    cli = BatchCLI(tmp_path, sim_endpoint)
    flags = ("--dataset_file=d.jsonl", "--batch_size=10", "--run_name=fewer", "--max_retries=0")
    assert cli.run(*flags).returncode == 1
    resumed = cli.run(*flags, "--resume", "--max_samples=2")
    assert resumed.returncode == 0, resumed
    parts = assert_report_reads_the_completion(cli.run_dir("fewer"))
    assert parts == {
        "in_output": 2,
        "discarded": 0,
        "failed": 0,
        "not_started": 0,
        "interrupted_in_flight": 0,
    }
