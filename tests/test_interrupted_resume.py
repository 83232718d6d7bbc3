"""After a complete run, a --resume interrupted by Ctrl-C leaves trajectories.jsonl as the first
run merged it (2 entries) and the resume's entry only in the batch files (3 in all). Its
statistics.json described the file with zeros (0 entries, 0 merged tokens, no tools) and a
post-process `--export` said "Exported 2 entries" as if that were the run. Real runner
subprocesses against the simulated endpoint, a real SIGINT."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agent.servers.simulated.server import SimulatedEndpoint
from agent.store.statistics import render_statistics
from agent.store.unmerged import carry_output_figures
from tests.support.batch import (
    interrupt_a_resume,
    interrupted_flags,
    kill_started,
    read_json,
    read_jsonl,
    tool_then_answer,
)


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def test_statistics_of_an_interrupted_resume_describe_the_merged_file_on_disk(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = interrupt_a_resume(tmp_path, endpoint, "st")
        run_dir = cli.run_dir("st")
        stats = read_json(run_dir / "statistics.json")
        on_disk = read_jsonl(run_dir / "trajectories.jsonl")
        endpoint.script("Slow 0", tool_then_answer())  # quick now
        resumed = cli.run(*interrupted_flags("st"), "--resume")
    assert stats["merged"] is False and stats["completion"]["in_output"] == 3
    trajectories = stats["trajectories"]
    assert trajectories["entries"] == len(on_disk) == 2
    assert trajectories["api_calls"] == sum(e["api_calls"] for e in on_disk) > 0
    tokens = sum(e["metadata"]["usage"]["total_tokens"] for e in on_disk)
    assert stats["tokens"]["merged_output"]["total"] == tokens > 0
    assert stats["tool_statistics"]["terminal"]["count"] == 2  # one call in each entry
    assert stats["reasoning_statistics"]["total_assistant_turns"] == 4
    assert stats["tokens"]["this_invocation"]["total"] > 0  # the resume's own work, still counted
    assert resumed.returncode == 0, resumed  # then a whole merge counts the file again
    final = read_json(run_dir / "statistics.json")
    assert final["merged"] is True and final["trajectories"]["entries"] == 4


def test_exporting_after_an_interrupted_resume_says_the_export_is_not_the_whole_run(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = interrupt_a_resume(tmp_path, endpoint, "ex")
        exported = cli.run("--run_name=ex", "--export=openai")
    assert exported.returncode == 0, exported
    rows = (cli.run_dir("ex") / "export" / "openai.jsonl").read_text().splitlines()
    assert len(rows) == 2 and all(json.loads(row) for row in rows)
    err = " ".join(exported.stderr.split())
    assert "Exported 2 entries (openai)" in err
    assert "warning: the export is not the whole run" in err
    assert "the batch files hold 1 more (3 in all)" in err and "--resume" in err


def unmerged_doc() -> dict[str, Any]:
    """What an interrupted invocation counted of the output it did not write: zeros."""
    return {
        "merged": False,
        "trajectories": {"entries": 0, "completed": 0, "partial": 0, "api_calls": 0},
        "tool_statistics": {},
        "tool_statistics_other": {},
        "reasoning_statistics": {"total_assistant_turns": 0},
        "outcomes": {},
        "toolsets": {},
        "tokens": {"merged_output": {"total": 0}, "this_invocation": {"total": 9}},
        "cost": {"merged_output_usd": None, "this_invocation_usd": 0.5},
    }


def test_figures_no_document_describes_are_null_and_a_missing_output_keeps_its_zeros(
    tmp_path: Path,
) -> None:
    doc = unmerged_doc()
    carry_output_figures(doc, None, tmp_path, merged=False)  # no trajectories.jsonl: 0 is true
    assert doc == unmerged_doc()
    (tmp_path / "trajectories.jsonl").write_text("{}\n")
    for previous in (None, {"trajectories": None, "tokens": {"merged_output": {"total": 7}}}):
        doc = unmerged_doc()  # statistics.json deleted, or an earlier interrupted one did not know
        carry_output_figures(doc, previous, tmp_path, merged=False)
        assert doc["trajectories"] is None and doc["tool_statistics"] is None
        assert doc["tokens"] == {"merged_output": None, "this_invocation": {"total": 9}}
        assert doc["cost"] == {"merged_output_usd": None, "this_invocation_usd": 0.5}
        console = Console(record=True, width=120, file=io.StringIO())
        render_statistics(doc, console)  # the summary of such a document is still printed
        assert "not rewritten (interrupted)" in console.export_text()
    merged = unmerged_doc()
    carry_output_figures(merged, None, tmp_path, merged=True)  # a merge counted the file itself
    assert merged == unmerged_doc()
