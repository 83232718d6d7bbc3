"""statistics.json describes the whole run across invocations: a resume that finds everything
done keeps the earlier figures (it used to write 0 prompts in 0.02 s, no timeline, 0 calls),
and an interrupted run plus its resume add up to what the data holds.

Unit checks of `agent.store.run_history`, then real runner subprocesses against the simulated
endpoint over HTTP, with a real Ctrl-C (SIGINT to the runner's process group).
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from agent.servers.simulated.server import EndpointFault, SimulatedEndpoint, Turn
from agent.store.run_history import join_timelines, previous_invocations, with_history
from agent.store.statistics import render_statistics
from agent.store.timeline import COLUMNS, TIMELINE_POINTS
from tests.support.batch import (
    QUICK_AND_SLOW,
    BatchCLI,
    interrupt_after_the_quick_prompts,
    interrupted_flags,
    kill_started,
    read_json,
    read_jsonl,
    tool_then_answer,
    wait_until,
    write_dataset,
)


@pytest.fixture(autouse=True)
def no_stray_processes() -> Iterator[None]:
    yield
    kill_started()


def invocation_doc(processed: int, duration: float, calls: int, points: list[list[float]]) -> dict[str, Any]:
    """A statistics.json document as one invocation writes it, before `with_history`."""
    return {
        "duration_seconds": duration,
        "completed_at": "2026-01-01T00:00:00+00:00",
        "this_invocation": {"processed": processed, "completed": processed, "api_calls": 2 * processed},
        "tokens": {"this_invocation": {"total": 10 * processed}},
        "cost": {"this_invocation_usd": None},
        "discarded": {},
        "failures": {},
        "rate_limiting": {"calls": calls, "peak_inflight": 2, "limit_history": [[0.0, 4.0]]},
        "timeline": {"columns": list(COLUMNS), "points": points},
    }


def point(seconds: float, finished: float) -> list[float]:
    return [seconds, finished, 0, 10 * finished, 1, 1, 4, 0, 0]


def test_a_resume_with_nothing_to_do_keeps_the_runs_figures() -> None:
    first = with_history(invocation_doc(4, 3.0, 8, [point(1, 2), point(2, 4)]), None, ran=True)
    again = with_history(invocation_doc(0, 0.02, 0, []), first, ran=False)
    assert again["whole_run"]["processed"] == first["whole_run"]["processed"] == 4
    assert again["whole_run"]["api_calls"] == 8 and again["whole_run"]["tokens"]["total"] == 40
    assert again["duration_seconds"] == first["duration_seconds"] == 3.0  # only time spent running
    assert again["rate_limiting"]["calls"] == 8 and again["timeline"] == first["timeline"]
    assert again["this_invocation"]["processed"] == 0 and again["this_invocation"]["duration_seconds"] == 0.02
    assert [i["ran_prompts"] for i in again["invocations"]] == [True, False]


def test_a_resume_that_runs_prompts_adds_to_the_run_on_one_clock() -> None:
    first = with_history(invocation_doc(2, 3.0, 4, [point(1, 1), point(2, 2)]), None, ran=True)
    second = with_history(invocation_doc(3, 5.0, 6, [point(1, 3)]), first, ran=True)
    assert second["whole_run"]["processed"] == 5 and second["rate_limiting"]["calls"] == 10
    assert second["duration_seconds"] == 8.0 and second["whole_run"]["prompts_per_second"] == 0.625
    # seconds after the first invocation's 3 s; cumulative counters after its last values
    assert second["timeline"]["points"][-1][:4] == [4.0, 5.0, 0.0, 50.0]
    assert second["rate_limiting"]["limit_history"] == [[0.0, 4.0], [3.0, 4.0]]


def test_the_runs_limit_range_spans_every_invocation() -> None:
    docs = [invocation_doc(2, 3.0, 4, [point(1, 2)]) for _ in range(3)]
    for doc, run_limit in zip(docs, ([16.0, 64.0], None, [8.0, 32.0]), strict=True):
        doc["rate_limiting"]["run_limit"] = run_limit
    first = with_history(docs[0], None, ran=True)
    second = with_history(docs[1], first, ran=True)  # none granted (nothing to run): kept
    third = with_history(docs[2], json.loads(json.dumps(second)), ran=True)
    assert [d["rate_limiting"]["run_limit"] for d in (first, second, third)] == [
        [16.0, 64.0],
        [16.0, 64.0],
        [8.0, 64.0],
    ]
    broken = invocation_doc(1, 1.0, 2, [])
    broken["rate_limiting"]["run_limit"] = ["x", True]  # an edited file: left out, not a crash
    assert with_history(broken, third, ran=True)["rate_limiting"]["run_limit"] == [8.0, 64.0]


def test_the_summary_of_a_resume_shows_the_whole_run() -> None:
    first = with_history(invocation_doc(4, 3.0, 8, [point(1, 4)]), None, ran=True)
    again = with_history(invocation_doc(0, 0.02, 0, []), first, ran=False)
    console = Console(file=io.StringIO(), width=400)
    render_statistics(again, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "Prompts processed this run: 0" in text
    assert "Whole run (2 invocations): 4 prompts processed (✓ 4 completed" in text  # none failed
    assert "· 8 model calls · 40 tokens · cost unknown · 0:00:03 (3.00 s) running" in text
    assert "Endpoint (whole run, 2 invocations): 8 requests" in text


def test_a_document_from_an_older_version_counts_as_one_invocation() -> None:
    old = invocation_doc(4, 3.0, 8, [point(1, 4)])  # no `invocations`: written before them
    assert [i["processed"] for i in previous_invocations(old)] == [4]
    assert with_history(invocation_doc(1, 1.0, 2, []), old, ran=True)["whole_run"]["processed"] == 5
    assert previous_invocations(None) == [] and previous_invocations({"garbage": 1}) == []


def test_a_joined_timeline_stays_bounded() -> None:
    earlier = {"columns": list(COLUMNS), "points": [point(i, i) for i in range(TIMELINE_POINTS)]}
    later = {"columns": list(COLUMNS), "points": [point(i, i) for i in range(TIMELINE_POINTS)]}
    joined = join_timelines(earlier, later, float(TIMELINE_POINTS))["points"]
    assert len(joined) <= TIMELINE_POINTS and joined[-1][0] == 2 * TIMELINE_POINTS - 1
    assert [p[0] for p in joined] == sorted(p[0] for p in joined)


# ---------------------------------------------------------------- end to end


def summary_rows(report: str) -> dict[str, str]:
    """The report's summary table, label -> value."""
    table = report.split('<table class="summary">', 1)[1].split("</table>", 1)[0]
    return dict(re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td></tr>", table))


def data_figures(run_dir: Path) -> tuple[int, int, int]:
    """(prompts, model calls, tokens) of what the run directory holds: output and discards."""
    entries = read_jsonl(run_dir / "trajectories.jsonl")
    entries += [d["entry"] for d in read_jsonl(run_dir / "discarded.jsonl")]
    calls = sum(e["api_calls"] for e in entries)
    return len(entries), calls, sum(e["metadata"]["usage"]["total_tokens"] for e in entries)


def test_resume_after_a_finished_run_keeps_the_figures_and_the_report(tmp_path: Path) -> None:
    prompts = [f"History {i}" for i in range(4)]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer(delay=0.6))  # a run of seconds: timeline ticks
        write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=h", "--num_workers=1")
        first = cli.run(*flags)
        assert first.returncode == 0, first
        run_dir = cli.run_dir("h")
        before, report = read_json(run_dir / "statistics.json"), (run_dir / "report.html").read_text()
        again = cli.run(*flags, "--resume")
        assert again.returncode == 0, again
    after = read_json(run_dir / "statistics.json")
    assert before["timeline"]["points"], "the first run recorded no timeline"
    for key in ("duration_seconds", "timeline", "trajectories", "reasoning_statistics"):
        assert after[key] == before[key], key
    for scope in ("whole_run", "merged_output"):
        assert after["tokens"][scope] == before["tokens"][scope] and after["tokens"][scope]["total"] > 0
    assert {k: v for k, v in after["rate_limiting"].items() if k != "workers"} == {
        k: v for k, v in before["rate_limiting"].items() if k != "workers"
    }
    whole, first_run = after["whole_run"], before["whole_run"]
    assert {k: v for k, v in whole.items() if k != "invocations"} == {
        k: v for k, v in first_run.items() if k != "invocations"
    }
    assert (whole["invocations"], whole["processed"], whole["api_calls"]) == (2, 4, 8)
    assert after["this_invocation"]["processed"] == 0
    rows, rows_before = summary_rows((run_dir / "report.html").read_text()), summary_rows(report)
    rows.pop("Finished at"), rows_before.pop("Finished at")
    processed = rows.pop("Prompts processed (whole run)")
    assert processed == rows_before.pop("Prompts processed (whole run)").replace(
        "1 invocation ", "2 invocations "
    )
    assert processed.startswith("4 prompts in ") and rows == rows_before
    assert "older version" not in (run_dir / "report.html").read_text()


def test_an_interrupted_run_and_its_resume_add_up_to_the_data(tmp_path: Path) -> None:
    with SimulatedEndpoint() as endpoint:
        cli = interrupt_after_the_quick_prompts(tmp_path, endpoint, "ir")
        run_dir = cli.run_dir("ir")
        interrupted = read_json(run_dir / "statistics.json")
        assert interrupted["completion"]["interrupted_in_flight"] == 2  # running, not "not started"
        assert interrupted["completion"]["not_started"] == 0
        err = " ".join((tmp_path / "runner.err").read_text().replace("│", " ").split())
        assert "Interrupted in flight: 2 prompts (dataset indices 1, 3)" in err
        for prompt in QUICK_AND_SLOW:
            endpoint.script(prompt, tool_then_answer())
        resumed = cli.run(*interrupted_flags("ir"), "--resume")
        assert resumed.returncode == 0, resumed
    stats = read_json(run_dir / "statistics.json")
    whole = stats["whole_run"]
    assert (whole["processed"], whole["api_calls"], whole["tokens"]["total"]) == data_figures(run_dir)
    assert (whole["invocations"], whole["processed"]) == (2, 4)
    assert stats["rate_limiting"]["calls"] >= whole["api_calls"]  # the cancelled prompts' calls too
    assert stats["duration_seconds"] == pytest.approx(
        sum(i["duration_seconds"] for i in stats["invocations"])
    )


def test_the_timelines_last_point_holds_the_runs_endpoint_totals(tmp_path: Path) -> None:
    """The 5xx of a run's last second were missing from the last point (0 against 3 in
    `rate_limiting`): the workers pulse once a second, their goodbyes carry the final counts."""
    prompts = [f"Down {i}" for i in range(3)] + ["Up"]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts[:3]:
            endpoint.script(prompt, [Turn(fault=EndpointFault(500, "down"))])  # every call
        endpoint.script("Up", tool_then_answer())
        write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        flags = ("--dataset_file=d.jsonl", "--batch_size=2", "--run_name=t", "--max_retries=0")
        done = cli.run(*flags, "--num_workers=2")
    assert done.returncode == 1, done  # three prompts failed
    stats = read_json(cli.run_dir("t") / "statistics.json")
    last = dict(zip(stats["timeline"]["columns"], stats["timeline"]["points"][-1], strict=True))
    limiting = stats["rate_limiting"]
    assert limiting["server_errors"] == 3
    assert (last["server_errors"], last["rate_limited"]) == (3, limiting["rate_limited"])
    assert (last["finished"], last["failed"]) == (4, 3)


def test_the_summary_and_report_say_what_the_data_holds(tmp_path: Path) -> None:
    """Under --max_samples, the dataset line says how many rows were used; one batch is "1 batch";
    a run whose filter discarded everything still counts the turns it made (as discarded)."""
    prompts = [f"Numbers {i}" for i in range(12)]
    with SimulatedEndpoint() as endpoint:
        for prompt in prompts:
            endpoint.script(prompt, tool_then_answer(reasoning=False))
        write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
        cli = BatchCLI(tmp_path, endpoint)
        done = cli.run("--dataset_file=d.jsonl", "--batch_size=10", "--run_name=n", "--max_samples=3")
    assert done.returncode == 0, done
    run_dir = cli.run_dir("n")
    stats = read_json(run_dir / "statistics.json")
    assert stats["dataset"] | {"file": None} == {
        "file": None, "lines": 12, "valid": 12, "used": 3, "max_samples": 3, "invalid": 0
    }  # fmt: skip
    discarded = [d["entry"] for d in read_jsonl(run_dir / "discarded.jsonl")]
    turns = sum(1 for e in discarded for t in e["conversations"] if t["from"] == "gpt")
    assert len(discarded) == 3 and turns == 6
    reasoning = stats["reasoning_statistics"]
    assert reasoning["total_assistant_turns"] == 0  # the output is empty
    assert reasoning["discarded_entries"] == {"assistant_turns": turns, "turns_with_reasoning": 0}
    err = " ".join(done.stderr.replace("│", " ").split())
    assert "dataset 3 prompts in 1 batch of 10" in err and "1 batches" not in err
    assert "Dataset: lines 12 · valid 12 · used 3 (--max_samples=3) · invalid 0" in err
    assert "discarded entries (not in the output): 6 assistant turns, 0 with reasoning" in err
    rows = summary_rows((run_dir / "report.html").read_text())
    assert rows["Reasoning coverage"] == (
        "0.0% of 0 assistant turns in the output (discarded entries: 6 turns, 0 with reasoning)"
    )


def test_a_dataset_changed_under_the_run_ends_it_with_its_figures_and_exit_2(tmp_path: Path) -> None:
    """A line edited while the run reads the dataset: no new prompt starts, the running ones
    finish, the run writes its checkpoint, statistics and merged output as at any stop and
    exits 2 naming the line. Its figures are then in the whole run's sums after the --resume
    that finishes the (new) dataset: nothing run is counted twice or left out."""
    prompts = [f"p{i:03d} " + "x" * 1000 for i in range(120)]  # past the reader's 8 KiB buffer
    dataset = write_dataset(tmp_path / "d.jsonl", [{"prompt": p} for p in prompts])
    flags = (
        "--dataset_file=d.jsonl",
        "--batch_size=10",
        "--run_name=ch",
        "--num_workers=1",
        "--max_inflight=1",
    )
    with SimulatedEndpoint() as endpoint:
        endpoint.set_default_script([Turn(content="done", reasoning="Think.", delay=0.05)])
        cli = BatchCLI(tmp_path, endpoint)
        proc = cli.start(*flags)
        wait_until(lambda: len(endpoint.requests) >= 3, "the first prompts", 120)
        raw = dataset.read_bytes()
        with dataset.open("r+b") as edit:  # in place, as an editor saving over it would
            edit.seek(raw.index(b"p100 "))
            edit.write(b"q100 ")
        assert proc.wait(timeout=120) == 2
        err = (tmp_path / "runner.err").read_text()
        run_dir = cli.run_dir("ch")
        first = read_json(run_dir / "statistics.json")
        merged = read_jsonl(run_dir / "trajectories.jsonl")
        resumed = cli.run(*flags, "--resume")
    assert "d.jsonl:101: the dataset changed since the run scanned it" in err
    last = err.rstrip().splitlines()[-1]
    assert last == (
        "Not done: 20 not started of 120 prompts (the dataset changed since the run scanned it). "
        "Next: rerun with --resume to run them."
    )
    completion = first["completion"]
    assert completion["stopped_by"] == "dataset_changed" and completion["exit_code"] == 2
    assert completion["in_output"] == len(merged) == 100 == first["whole_run"]["processed"]
    assert completion["not_started"] == 20
    assert resumed.returncode == 0, resumed
    again = read_json(run_dir / "statistics.json")
    final = read_jsonl(run_dir / "trajectories.jsonl")
    assert sorted(e["conversations"][1]["value"] for e in final) == sorted(
        p.replace("p100 ", "q100 ") for p in prompts
    )  # the dataset as it is now, each prompt once
    assert again["whole_run"]["invocations"] == 2
    assert again["whole_run"]["processed"] == 120 == len(endpoint.requests)
