"""The report without a browser: its streaming figures and bounded sample, escaping of every
text, the unmerged (interrupted) case, the command line `python -m agent.report`, redaction,
and the bounded timeline statistics.json carries."""

from __future__ import annotations

import itertools
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agent.report.build import RunReport
from agent.report.digest import RunDigest
from agent.report.figures import histogram, in_flight
from agent.report.page import embedded_json
from agent.report.sample import StratifiedSample, shares
from agent.report.turns import cut, readable
from agent.store.key_book import KeySet
from agent.store.keys import prompt_key
from agent.store.timeline import COLUMNS, Timeline
from bench.report import synthetic_entry, write_synthetic_run
from tests.support.batch import REPO
from tests.support.report import page_data

HOSTILE = "</script><!-- <img src=x onerror=alert(1)> & \u2028"


def hostile_entry(index: int) -> dict[str, Any]:
    entry = synthetic_entry(index, random.Random(index))
    entry["conversations"][1]["value"] = f"Prompt {HOSTILE}"
    entry["conversations"][-1]["value"] = f"<think>\n{HOSTILE}\n</think>\nAnswer {HOSTILE}"
    entry["toolsets_used"] = [HOSTILE]
    return entry


def test_shares_give_rare_strata_all_they_have_and_fill_the_budget() -> None:
    assert shares({"completed": 10_000, "gave_up": 3, "truncated": 200}, 500) == {
        "gave_up": 3,
        "truncated": 200,
        "completed": 297,
    }
    assert shares({"a": 2, "b": 1}, 500) == {"a": 2, "b": 1}


def test_stratified_sample_is_bounded_reproducible_and_keeps_rare_outcomes() -> None:
    def draw() -> list[int]:
        sample: StratifiedSample[int] = StratifiedSample(size=50, seed=7)
        for i in range(20_000):
            sample.offer("rare" if i % 1000 == 0 else "common", i)
        return sample.drawn()

    drawn = draw()
    assert len(drawn) == 50 and drawn == draw()
    assert sorted(i for i in drawn if i % 1000 == 0) == list(range(0, 20_000, 1000))  # all 20 rare
    assert len({i for i in drawn if i % 1000}) == 30
    assert max(drawn) > 10_000  # drawn over the whole stream, not its head


def test_timeline_stays_bounded_and_evenly_spaced_with_the_last_point() -> None:
    timeline = Timeline(limit=16)
    for tick in range(1000):
        timeline.add([tick] + [0] * (len(COLUMNS) - 1))
    seconds = [point[0] for point in timeline.points]
    assert len(seconds) <= 16 and seconds[0] == 0 and seconds[-1] == 999
    gaps = {b - a for a, b in itertools.pairwise(seconds[:-1])}
    assert len(gaps) == 1  # one stride between every kept point
    with pytest.raises(ValueError, match="has 9 values"):
        timeline.add([1.0])


def test_embedded_json_cannot_end_the_script_or_open_a_comment() -> None:
    text = embedded_json({"text": HOSTILE})
    assert not set(text) & {"<", ">", "&"} and text.isascii()
    assert json.loads(text) == {"text": HOSTILE}


def test_turns_pair_calls_with_results_fold_reasoning_and_cut_long_text() -> None:
    entry = synthetic_entry(3, random.Random(1))
    turns = readable(entry["conversations"], lambda text: 0)
    calls = [call for turn in turns if turn["role"] == "gpt" for call in turn["calls"]]
    assert calls and all(call["result"]["name"] == call["name"] for call in calls)
    assert all(turn["think"] for turn in turns if turn["role"] == "gpt")
    assert not [turn for turn in turns if turn["role"] == "tool"]  # every result found its call
    long = cut("x" * 10_000)
    assert len(long) < 4_100 and "[6,000 characters cut]" in long


def test_histogram_bins_small_ranges_per_value_and_large_ones_in_round_widths() -> None:
    assert histogram([1, 1, 2, 4]) == [("1", 2.0), ("2", 1.0), ("3", 0.0), ("4", 1.0)]
    bars = histogram(list(range(0, 10_000, 7)))
    assert bars[0][0] == "0–499" and sum(count for _, count in bars) == len(range(0, 10_000, 7))


def test_every_text_of_the_page_is_escaped(tmp_path: Path) -> None:
    run = tmp_path / "hostile"
    run.mkdir()
    entries = [hostile_entry(i) for i in range(3)]
    (run / "trajectories.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    failure = {
        "prompt_key": "k:0",
        "prompt_index": 9,
        "error_class": HOSTILE,
        "message": HOSTILE,
        "attempt": 1,
    }
    (run / "failures.jsonl").write_text(json.dumps(failure) + "\n")
    (run / "statistics.json").write_text(json.dumps({"run_name": HOSTILE, "model": HOSTILE}))
    html = RunReport(run).write().read_text()
    assert html.count("<script") == 2  # the data block and our script, nothing from the run
    assert "<img" not in html and "<!--" not in html and "</script><!" not in html
    assert html.count("&lt;img src=x onerror=alert(1)&gt;") >= 3  # run name, failure class, message
    data = page_data(html)
    assert [e["toolsets"] for e in data["entries"]] == [[HOSTILE]] * 3


def test_figures_count_every_entry_and_the_browser_holds_a_bounded_sample(tmp_path: Path) -> None:
    run = tmp_path / "big"
    write_synthetic_run(run, 3000)
    kept, discarded, failed = (
        len((run / name).read_text().splitlines())
        for name in ("trajectories.jsonl", "discarded.jsonl", "failures.jsonl")
    )
    report = RunReport(run, sample_size=200)
    html = report.write().read_text()
    digest = report.digest
    assert digest.entries == kept and sum(digest.outcomes.values()) == kept
    assert sum(digest.discards.values()) == discarded and sum(digest.still_failed().values()) == failed
    assert len(digest.turns) == len(digest.tokens) == kept
    data = page_data(html)
    assert len(data["entries"]) == 200
    assert len(data["systems"]) == 1  # the shared system prompt is held once
    outcomes = {e["outcome"] for e in data["entries"]}
    assert {"completed", "gave_up", "discarded"} <= outcomes  # rare strata are in the sample
    assert f"<td>In the output</td><td>{kept:,}</td>" in html
    assert 'data-plot="throughput"' in html  # no timeline: prompts/s from the entries' timestamps
    assert 'data-empty="in_flight"' in html


def test_failures_done_since_are_not_counted_as_failed() -> None:
    digest = RunDigest()
    digest.add_failure({"prompt_key": "a:0", "error_class": "server_error", "message": "503"})
    digest.add_failure({"prompt_key": "b:0", "error_class": "server_error", "message": "503"})
    entry = synthetic_entry(0, random.Random(0))
    entry["metadata"]["prompt_key"] = "a:0"
    digest.add_entry(entry)
    assert digest.failures["server_error"] == 2 and digest.still_failed() == {"server_error": 1}


def test_a_digest_fed_unkeyed_holds_no_key_per_entry_and_takes_the_outputs_keys() -> None:
    digest = RunDigest(keyed=False)  # a run's fold: the merge gives the keys at the end
    for key in ("a:0", "b:0"):
        digest.add_failure({"prompt_key": key, "error_class": "server_error", "message": "503"})
    entry = synthetic_entry(0, random.Random(0))
    entry["metadata"]["prompt_key"] = "a:0"
    digest.add_entry(entry)
    assert digest.done_keys == set() and digest.still_failed() == {"server_error": 2}
    digest.output_keys = KeySet({"a:0"})
    assert digest.still_failed() == {"server_error": 1}
    digest.add_discard({"prompt_key": "a:0", "reason": "no_reasoning", "entry": entry})  # in the output
    discarded = synthetic_entry(1, random.Random(1))
    discarded["metadata"]["prompt_key"] = "c:0"
    for _ in range(2):  # the second record of c:0 is its prompt's, counted already
        digest.add_discard({"prompt_key": "c:0", "reason": "no_reasoning", "entry": discarded})
    assert digest.discards == {"no_reasoning": 1} and digest.done_keys == {"c:0"}


def test_a_report_read_from_the_files_keys_a_legacy_line_as_the_merge_does(tmp_path: Path) -> None:
    """A line another tool wrote has no prompt_key: the merge keys it by its prompt's text, and
    so does a report read from trajectories.jsonl, as the run's own report (told the merge's
    keys) does: a failure of that prompt is done since."""
    entry = synthetic_entry(0, random.Random(0))
    del entry["metadata"]["prompt_key"]
    text = next(t["value"] for t in entry["conversations"] if t["from"] == "human")
    (tmp_path / "trajectories.jsonl").write_text(json.dumps(entry) + "\n")
    failure = {"prompt_key": prompt_key(text, 0), "error_class": "server_error", "message": "503"}
    (tmp_path / "failures.jsonl").write_text(json.dumps(failure) + "\n")
    report = RunReport(tmp_path)
    report.write({})
    assert report.digest.failures == {"server_error": 1} and report.digest.still_failed() == {}


def test_a_discard_moved_into_the_output_since_counts_once() -> None:
    digest = RunDigest()
    entry = synthetic_entry(0, random.Random(0))
    digest.add_entry(entry)
    digest.add_discard(
        {"prompt_key": entry["metadata"]["prompt_key"], "reason": "no_reasoning", "entry": entry}
    )
    digest.add_discard({"prompt_key": "other:0", "reason": "no_reasoning", "entry": entry})
    assert digest.entries == 1 and digest.discards == {"no_reasoning": 1}
    assert sum(digest.sample.seen.values()) == 2


def test_an_interrupted_run_is_reported_from_its_batch_files(tmp_path: Path) -> None:
    run = tmp_path / "interrupted"
    run.mkdir()
    entries = [synthetic_entry(i, random.Random(i)) for i in range(6)]
    (run / "batch_0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries[:4]) + "{torn\n")
    (run / "batch_1.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries[3:]))  # 3 twice
    stale = [synthetic_entry(99, random.Random(99))]
    (run / "trajectories.jsonl").write_text(json.dumps(stale[0]) + "\n")  # from an earlier merge
    (run / "statistics.json").write_text(json.dumps({"run_name": "interrupted", "merged": False}))
    report = RunReport(run)
    report.write()
    assert report.digest.entries == 6
    assert sorted(e["index"] for e in report.digest.drawn()) == list(range(6))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.report", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        check=False,
    )


def test_cli_writes_the_report_and_refuses_bad_input_in_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_synthetic_run(run, 40)
    done = cli(str(run), "--sample=5")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(run / "report.html")
    assert len(page_data((run / "report.html").read_text())["entries"]) == 5
    other = tmp_path / "elsewhere.html"
    assert cli(str(run), f"--output={other}").returncode == 0 and other.exists()
    for args, named in (
        ((str(tmp_path / "nothing"),), "not a run directory"),
        ((str(run), "--sample=0"), "--sample must be a whole number"),
        ((str(run), "--sampel=3"), "unrecognized arguments: --sampel=3"),
        ((str(run), f"--output={tmp_path}/no/dir/r.html"), "--output:"),
        ((str(run), "--output="), "argument --output: must name a file, got ''"),  # once a traceback
        ((str(run), "--output=."), "argument --output: must name a file, got '.'"),
        ((str(run), f"--output={tmp_path}"), "argument --output: must name a file"),  # a directory
    ):
        refused = cli(*args)
        assert refused.returncode == 2 and named in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    unwritable = cli(str(run), "--output=/sys/r.html")  # no file can be made there, by root neither
    assert unwritable.returncode == 1 and unwritable.stderr.strip().splitlines() == [
        "python -m agent.report: /sys/r.html: not written (Permission denied)"
    ]


def test_a_statistics_file_of_the_wrong_shape_is_left_out_of_the_report_not_a_traceback(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    write_synthetic_run(run, 5)
    (run / "statistics.json").write_text('{"completion": 5}')
    done = cli(str(run))
    assert done.returncode == 0, done.stderr
    assert "statistics.json: not used for the report (its 'completion' is not an object)" in done.stderr


def test_cli_redacts_secrets_of_the_environment(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_synthetic_run(run, 5)
    secret = "sk-or-v1-0123456789abcdef"
    entry = json.loads((run / "trajectories.jsonl").read_text().splitlines()[0])
    entry["conversations"][1]["value"] = f"my key is {secret}"
    (run / "trajectories.jsonl").write_text(json.dumps(entry) + "\n")
    assert cli(str(run), env={"OPENROUTER_API_KEY": secret}).returncode == 0
    html = (run / "report.html").read_text()
    assert secret not in html and "my key is [REDACTED]" in html


# VmHWM: this process's peak resident memory (ru_maxrss would count the forking test's too)
PEAK = """import re, sys
from pathlib import Path
from agent.report.build import RunReport
RunReport(Path(sys.argv[1])).write({})
print(int(re.search(r"VmHWM:\\s+(\\d+)", Path("/proc/self/status").read_text()).group(1)) // 1024)"""


def test_model_chosen_names_and_ids_are_cut_so_the_page_and_memory_stay_bounded(tmp_path: Path) -> None:
    # A model names the tools it calls and their call ids: 10 entries calling a tool whose name
    # is 3 MB (in the call, the result and tool_stats) made a 90 MB page and a 524 MB peak.
    run = tmp_path / "run"
    write_synthetic_run(run, 10)
    name, call_id = "t" * 3_000_000, "c" * 3_000_000
    lines = []
    for line in (run / "trajectories.jsonl").read_text().splitlines():
        entry = json.loads(line)
        call = json.dumps({"name": name, "arguments": {"path": "x" * 100_000}})
        result = json.dumps({"tool_call_id": call_id, "name": name, "content": "y" * 100_000})
        entry["conversations"][2:2] = [
            {"from": "gpt", "value": f"<tool_call>\n{call}\n</tool_call>"},
            {"from": "tool", "value": f"<tool_response>\n{result}\n</tool_response>"},
        ]
        entry["tool_stats"][name] = {"count": 1, "success": 1, "failure": 0}
        entry["metadata"]["outcome"] = "o" * 1_000_000
        lines.append(json.dumps(entry))
    (run / "trajectories.jsonl").write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        [sys.executable, "-c", PEAK, str(run)], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.returncode == 0, done.stderr
    size = (run / "report.html").stat().st_size
    peak_mb = int(done.stdout.split()[-1])
    print(f"report {size / 1e6:.2f} MB, peak {peak_mb} MB")  # the figures
    assert size < 1_500_000, size
    assert peak_mb < 250, peak_mb  # the input's lines are 7 MB each: held a few at a time, not all
    data = page_data((run / "report.html").read_text())
    call_shown = next(
        c for e in data["entries"] for t in e["turns"] for c in t.get("calls", ()) if "…" in c["name"]
    )
    assert len(call_shown["name"]) < 300 and len(call_shown["result"]["id"]) < 300


def test_the_in_flight_plot_draws_the_runs_limit_not_the_workers_idle_shares() -> None:
    # The timeline's `limit` is the workers' shares, 0 whenever they idle (a tool call): drawn
    # as "in-flight limit", it showed the limit falling to 0 every few seconds.
    points = [[t, 0, 0, 0, 2, 1, 0.0 if t % 2 else 4.0, 0, 0] for t in range(10)]
    stats = {
        "timeline": {"columns": list(COLUMNS), "points": points},
        "rate_limiting": {"limit_history": [[0.0, 64.0]]},
        "duration_seconds": 10,
    }
    svg = in_flight(stats)
    assert svg is not None
    legend = re.findall(r'class="legend"[^>]*>([^<]*)<', svg)
    assert legend == ["prompts in flight", "model calls in flight", "the run&#x27;s in-flight limit"]
