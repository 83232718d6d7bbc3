"""The end of a run counts the merged output's statistics and report as the result lines are
written (`agent.batch.end_fold`), not by reading them back: the numbers must be those of a full
recount over the same run directory, as the end of a run counted them before (every line of
trajectories.jsonl, then the current discards), for a fresh run, a resumed one (shards holding
an earlier invocation's lines and this one's) and a run whose fold is dropped (--keep moving
counted entries out at the end: counted again from the files).
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
from openai import OpenAI

from agent.batch.recovery import current_discards
from agent.config.verify_config import VerifyOptions
from agent.report.build import RunReport
from agent.report.digest import sample_rank
from agent.report.sample import StratifiedSample
from agent.servers.simulated.server import SimulatedEndpoint
from agent.store.directory import RunDirectory
from agent.store.jsonl import read_lines
from agent.store.key_book import KeySet
from agent.store.output_figures import FIGURES_FILE
from agent.store.shard_index import ShardChanged
from agent.store.statistics import RunStatistics
from agent.store.unmerged import OUTPUT_SECTIONS  # the sections counted from the merged output
from tests.support.batch import BatchCLI, prompts_dataset, read_json
from tests.support.scripted_backend import run_scripted, scripted_config


def recounted(run_dir: Path) -> dict[str, Any]:
    """The merged output's sections of statistics.json counted from the files, as the end of a
    run counted them before: every entry of trajectories.jsonl, then the current discards."""
    stats, merged = RunStatistics(), KeySet()
    for _line, entry in read_lines(run_dir / "trajectories.jsonl"):
        assert entry is not None
        stats.add_entry(entry)
        merged.add(entry["metadata"]["prompt_key"])
    for entry in current_discards(run_dir, merged):
        stats.add_discarded_entry(entry)
    names = ("run_name", "distribution", "model", "total_prompts", "batch_size", "total_batches")
    document = stats.to_dict(
        **dict.fromkeys(names[:3], ""), **dict.fromkeys(names[3:], 1), duration_seconds=1.0
    )
    return output_sections(document)


def output_sections(document: dict[str, Any]) -> dict[str, Any]:
    return {
        **{name: document.get(name) for name in OUTPUT_SECTIONS},
        "tokens": document["tokens"]["merged_output"],
        "usd": document["cost"]["merged_output_usd"],
    }


def assert_as_recounted(run_dir: Path, tmp_path: Path) -> None:
    """statistics.json and report.html say what a recount of the run directory says."""
    stats = read_json(run_dir / "statistics.json")
    assert output_sections(stats) == recounted(run_dir)
    again = RunReport(run_dir).write(stats, output=tmp_path / "recounted.html")
    assert page(again) == page(run_dir / "report.html")


def page(path: Path) -> str:
    """A report page but for what differs each time one is written: its nonce and its time."""
    text = re.sub(r"nonce(-|=\")[A-Za-z0-9_-]+", "nonce", path.read_text(encoding="utf-8"))
    return re.sub(r"generated \S+ from", "generated from", text)


def test_a_run_and_its_resume_report_the_numbers_of_a_full_recount(
    tmp_path: Path, sim_endpoint: SimulatedEndpoint
) -> None:
    cli = BatchCLI(tmp_path, sim_endpoint)
    dataset = cli.workdir / "prompts.jsonl"
    prompts_dataset(dataset, [f"task {i}: list the files" for i in range(8)])
    first = cli.run(f"--dataset_file={dataset}", "--batch_size=5", "--run_name=fold", "--num_workers=1")
    assert first.returncode == 0, first
    run_dir = cli.run_dir("fold")
    stats = read_json(run_dir / "statistics.json")
    assert stats["trajectories"]["entries"] == 8 and stats["merge_check"]["ok"] is True
    assert stats["tool_statistics"]["terminal"]["count"] == 8  # one tool call per prompt
    assert stats["merge"]["ahead_files"] == 2  # both batches merged ahead: at the last answer at the latest
    assert_as_recounted(run_dir, tmp_path)

    # batch_1.jsonl (indices 5-9) gains this invocation's lines after the first's; without the
    # figures the first end kept (as a directory of an older version), the first invocation's 8
    # lines are counted as the resume's 3 answers come: every file merged ahead
    (run_dir / FIGURES_FILE).unlink()
    prompts_dataset(dataset, [f"task {i}: list the files" for i in range(11)])
    resume = (f"--dataset_file={dataset}", "--batch_size=5", "--run_name=fold", "--num_workers=1", "--resume")
    second = cli.run(*resume)
    assert second.returncode == 0, second
    stats = read_json(run_dir / "statistics.json")
    assert stats["trajectories"]["entries"] == 11 and stats["merge_check"]["entries_checked"] == 3
    assert (stats["merge"]["ahead_files"], stats["merge"]["in_place_files"]) == (3, 0)
    assert_as_recounted(run_dir, tmp_path)

    # with them, trajectories.jsonl is continued: batch_2's new lines appended after its own
    prompts_dataset(dataset, [f"task {i}: list the files" for i in range(13)])
    third = cli.run(*resume)
    assert third.returncode == 0, third
    stats = read_json(run_dir / "statistics.json")
    assert stats["trajectories"]["entries"] == 13 and stats["merge"]["in_place_files"] == 3
    assert_as_recounted(run_dir, tmp_path)


def scripted_run(tmp_path: Path, keep: str) -> Path:
    """Four prompts on the scripted backend (no entry verified) under `--keep=keep`."""
    config = scripted_config(
        tmp_path, [f"prompt {i}" for i in range(4)], "kept", verify=VerifyOptions(keep=keep)
    )
    run_scripted(config)
    return config.run_dir


def test_entries_keep_moves_out_at_the_end_are_counted_again_from_the_files(tmp_path: Path) -> None:
    run_dir = scripted_run(tmp_path, keep="passing")  # none passed: every counted entry moves out
    stats = read_json(run_dir / "statistics.json")
    assert stats["trajectories"]["entries"] == 0 and stats["keep"]["not_kept"] == {"not_passing": 4}
    assert stats["reasoning_statistics"]["discarded_entries"]["assistant_turns"] == 4
    assert_as_recounted(run_dir, tmp_path)


def test_the_simulated_endpoint_says_when_it_last_replied(sim_endpoint: SimulatedEndpoint) -> None:
    assert sim_endpoint.stats.last_reply_at is None
    client = OpenAI(base_url=sim_endpoint.base_url, api_key="sk-test")
    client.chat.completions.create(model="sim-model", messages=[{"role": "user", "content": "hi"}])
    stats = sim_endpoint.stats
    assert stats.first_request_at is not None and stats.last_reply_at is not None
    assert stats.last_reply_at >= stats.first_request_at


def test_the_report_sample_is_the_same_whatever_order_entries_come_in() -> None:
    def drawn(order: list[int]) -> list[str]:
        sample: StratifiedSample[str] = StratifiedSample(size=20, seed=0)
        for i in order:
            key = f"key {i}"
            sample.offer("rare" if i % 100 == 0 else "common", key, rank=sample_rank(key, 0))
        return sample.drawn()

    forward = list(range(5000))
    assert drawn(forward) == drawn(forward[::-1]) == drawn(random.Random(3).sample(forward, len(forward)))
    assert len(drawn(forward)) == 20 and sum(key.endswith("00") for key in drawn(forward)) == 10


def entry_line(key: str, index: int, tools: tuple[str, ...] = ()) -> bytes:
    entry = {
        "prompt_index": index,
        "conversations": [{"from": "human", "value": key}, {"from": "gpt", "value": "done"}],
        "tool_stats": {name: {"count": 1, "success": 1, "failure": 0} for name in tools},
        "metadata": {"prompt_key": key, "outcome": "completed"},
    }
    return (json.dumps(entry) + "\n").encode()


def test_the_merge_copies_the_lines_this_process_counted_without_counting_them_again(tmp_path: Path) -> None:
    earlier = tmp_path / "batch_0.jsonl"
    earlier.write_bytes(entry_line("old", 3))  # an earlier invocation's line: read and counted
    seen: list[str] = []
    with RunDirectory(tmp_path) as store:
        store.lock()
        for key, index in (("b", 2), ("a", 0), ("c", 4)):
            store.append_result(0, entry_line(key, index))
        store.append_result(1, entry_line("d", 5, tools=("invented",)))
        assert [line.key for _entry, line in store.take_appended()] == ["b", "a", "c", "d"]
        merged = store.merge({"terminal"}, lambda e: seen.append(e["metadata"]["prompt_key"]), counted=True)
        assert seen == ["old"] and merged.written == 5 and merged.labelled == 1
        out = [
            entry["metadata"]["prompt_key"] for _line, entry in read_lines(tmp_path / "trajectories.jsonl")
        ]
        assert out == ["a", "b", "old", "c", "d"]  # prompt_index order, as before
        assert store.scan().done == {"a", "b", "c", "d", "old"}

        edited = (tmp_path / "batch_1.jsonl").read_bytes().replace(b'"done"', b'"DONE"')
        (tmp_path / "batch_1.jsonl").write_bytes(edited)  # the same size: its mtime tells
        with pytest.raises(ShardChanged):
            store.merge({"terminal"}, None, counted=True)
        merged = store.merge({"terminal"}, lambda e: seen.append(e["metadata"]["prompt_key"]))
        assert merged.written == 5 and seen[1:] == ["a", "b", "old", "c", "d"]  # every line read again
