"""Tool names are the model's choice, and it may invent thousands of them: what is keyed by a
tool name (statistics.json's tool table and unknown tools, the summary's tool table, the
report's tool plot, table and sampled entries) stays bounded, with one row summing the rest so
the totals still add up to every call."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from agent.report.build import RunReport
from agent.store.merge import merge_run
from agent.store.statistics import RunStatistics, render_statistics
from tests.support.report import page_data

ENTRIES = 20  # each calls its share of the invented names, all in one turn
PAD = "N" * 180  # the hostile tester's names: ~190 characters each


def invented(count: int) -> list[str]:
    return [f"t{i:05d}_{PAD}" for i in range(count)]  # one length: sizes compare


def entry(index: int, names: list[str]) -> dict[str, Any]:
    """An entry calling each of `names` once (the first also a second time, failing)."""
    calls = "".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': {}})}\n</tool_call>\n" for n in names)
    answers = [json.dumps({"tool_call_id": f"c{i}", "name": n, "content": "ok"}) for i, n in enumerate(names)]
    results = "\n".join(f"<tool_response>\n{a}\n</tool_response>" for a in answers)
    stats = {n: {"count": 1, "success": 1, "failure": 0} for n in names}
    stats[names[0]] = {"count": 2, "success": 1, "failure": 1}
    stats["terminal"] = {"count": 3, "success": 3, "failure": 0}
    return {
        "prompt_index": index,
        "conversations": [
            {"from": "human", "value": f"task {index}"},
            {"from": "gpt", "value": f"<think>\nr\n</think>\n{calls}".rstrip()},
            {"from": "tool", "value": results},
            {"from": "gpt", "value": "<think>\nr\n</think>\ndone"},
        ],
        "tool_stats": stats,
        "metadata": {"prompt_key": f"k{index}", "outcome": "completed", "usage": {}},
    }


def write_run(run: Path, distinct: int) -> list[dict[str, Any]]:
    names = invented(distinct)
    share = distinct // ENTRIES
    entries = [entry(i, names[i * share : (i + 1) * share]) for i in range(ENTRIES)]
    run.mkdir(parents=True)
    (run / "batch_0.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    return entries


def statistics(run: Path) -> dict[str, Any]:
    """statistics.json as the run writes it: the merge (keeping malformed entries) feeds the
    statistics, its report goes into `merge`."""
    stats = RunStatistics()
    merged = merge_run(run, valid_tools={"terminal"}, on_entry=stats.add_entry)
    return stats.to_dict(
        run_name="run",
        distribution="default",
        model="m",
        total_prompts=ENTRIES,
        batch_size=ENTRIES,
        total_batches=1,
        duration_seconds=1.0,
        merge=merged.as_dict(),
    )


def sizes(tmp_path: Path, distinct: int) -> tuple[int, int, int, dict[str, Any]]:
    run = tmp_path / str(distinct)
    write_run(run, distinct)
    document = statistics(run)
    text = json.dumps(document)
    (run / "statistics.json").write_text(text)
    page = RunReport(run).write()
    console = Console(file=io.StringIO(), width=120)
    render_statistics(document, console)
    lines = console.file.getvalue().count("\n")  # type: ignore[attr-defined]
    return len(text), page.stat().st_size, lines, document


def test_files_and_summary_do_not_grow_with_distinct_invented_tool_names(tmp_path: Path) -> None:
    json_small, page_small, lines_small, _ = sizes(tmp_path, 1_000)
    json_large, page_large, lines_large, document = sizes(tmp_path, 5_000)
    assert abs(json_large - json_small) < 4_000, (json_small, json_large)
    assert abs(page_large - page_small) < 4_000, (page_small, page_large)
    assert json_large < 60_000 and lines_large == lines_small and lines_large < 150
    # the numbers stay honest: the rows listed and the `other` row add up to every call
    tools, other = document["tool_statistics"], document["tool_statistics_other"]
    assert len(tools) == 50 and tools["terminal"]["count"] == 3 * ENTRIES
    assert sum(row["count"] for row in tools.values()) + other["count"] == 5_000 + ENTRIES + 3 * ENTRIES
    assert len(tools) + other["tools"] == 5_001
    assert other["failure"] + sum(row["failure"] for row in tools.values()) == ENTRIES
    merge = document["merge"]
    assert len(merge["unknown_tools"]) == 50
    assert sum(merge["unknown_tools"].values()) + merge["unknown_tools_other"]["entries"] == 5_000
    assert merge["unknown_tools_other"]["names"] == 4_950


def test_the_report_lists_the_most_called_tools_and_sums_the_rest(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_run(run, 2_000)
    html = RunReport(run).write().read_text()
    assert "1,971 other tools" in html  # 2,001 tools: terminal and 29 invented ones named
    # per sampled entry: 30 names in its tool list, 50 calls and their results; plot and table
    assert html.count(PAD) < ENTRIES * (30 + 2 * 50) + 100
    sampled = page_data(html)["entries"]
    assert all(len(e["tools"]) == 30 and e["tools_more"] == 71 for e in sampled)
    turn = sampled[0]["turns"][1]
    assert len(turn["calls"]) == 50 and "50 more tool calls of this turn not shown" in turn["text"]
    assert all("result" in call for call in turn["calls"])  # results stay paired with their calls
    assert sampled[0]["turns"][2]["text"] == "[50 more tool results of this turn not shown]"


def test_a_huge_invented_name_is_cut_in_statistics_json(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    huge = "x" * 500_000
    (run / "batch_0.jsonl").write_text(json.dumps(entry(0, [huge])) + "\n")
    document = statistics(run)
    assert len(json.dumps(document)) < 5_000
    cut = "x" * 200 + "… [499,800 characters cut]"
    assert document["tool_statistics"][cut]["count"] == 2 and document["merge"]["unknown_tools"] == {cut: 1}
