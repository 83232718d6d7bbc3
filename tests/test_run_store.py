"""The run directory: lock, appends, group commit, torn-line repair, scan, merge, kill -9."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from agent.errors import RunLockedError
from agent.store.directory import RunDirectory, encode_line
from agent.store.keys import prompt_key

REPO = Path(__file__).resolve().parent.parent
TOOLS = {"terminal", "read_file", "write_file"}


def entry(
    prompt: str, occurrence: int = 0, *, keyed: bool = True, tools: dict[str, int] | None = None
) -> dict[str, Any]:
    """A trajectory entry shaped like the batch runner's."""
    metadata: dict[str, Any] = {"batch_num": 0, "model": "m"}
    if keyed:
        metadata["prompt_key"] = prompt_key(prompt, occurrence)
    stats = {name: {"count": n, "success": n, "failure": 0} for name, n in (tools or {"terminal": 1}).items()}
    return {
        "prompt_index": 0,
        "conversations": [{"from": "system", "value": "sys"}, {"from": "human", "value": prompt}],
        "metadata": metadata,
        "tool_stats": stats,
    }


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


@pytest.fixture
def run(tmp_path: Path) -> Iterator[RunDirectory]:
    directory = RunDirectory(tmp_path / "data" / "run")
    directory.lock()
    yield directory
    directory.close()


@contextmanager
def child(script: str) -> Iterator[subprocess.Popen[str]]:
    """A Python subprocess running `script`; killed and reaped on exit."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE, text=True, env=env
    ) as process:
        try:
            yield process
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()


# ---------------------------------------------------------------- appends and sync


def test_appends_write_one_utf8_json_line_per_record_to_the_right_file(run: RunDirectory) -> None:
    run.append_result(3, entry("café ☕"))
    run.append_result(3, entry("b"))
    run.append_result(10, entry("c"))
    run.append_discard({"prompt_key": "k1", "reason": "no_reasoning"})
    run.append_failure({"prompt_key": "k2", "error_class": "timeout"})
    batch = lines_of(run.path / "batch_3.jsonl")
    assert len(batch) == 2 and all(line.endswith(b"\n") for line in batch)
    assert "café ☕".encode() in batch[0]  # ensure_ascii=False
    assert json.loads(batch[1]) == entry("b")
    assert json.loads(lines_of(run.path / "batch_10.jsonl")[0]) == entry("c")
    assert json.loads(lines_of(run.path / "discarded.jsonl")[0])["reason"] == "no_reasoning"
    assert json.loads(lines_of(run.path / "failures.jsonl")[0])["error_class"] == "timeout"


def test_a_record_that_is_not_json_raises_before_writing_anything(run: RunDirectory) -> None:
    run.append_result(0, entry("a"))
    for bad in ({"x": float("nan")}, {"x": object()}):
        with pytest.raises((ValueError, TypeError)):
            run.append_result(0, bad)
    assert len(lines_of(run.path / "batch_0.jsonl")) == 1


def test_a_line_encoded_by_a_worker_is_written_as_it_is(run: RunDirectory) -> None:
    line = encode_line(entry("café ☕"))
    run.append_result(2, line)
    assert lines_of(run.path / "batch_2.jsonl") == [line]
    for bad in (line.rstrip(b"\n"), line + line, b"{}\n{}", b"\n", b"[1]\n"):
        with pytest.raises(ValueError, match="one newline-terminated JSON object line"):
            run.append_result(2, bad)
    assert lines_of(run.path / "batch_2.jsonl") == [line]


def test_more_files_than_open_handles_still_get_every_line(tmp_path: Path) -> None:
    with RunDirectory(tmp_path / "run", max_open_files=2) as run:
        for i in range(20):
            run.append_result(i % 5, entry(f"p{i}"))
        run.sync()
        assert [len(lines_of(run.path / f"batch_{n}.jsonl")) for n in range(5)] == [4] * 5


def test_sync_fsyncs_each_file_written_since_the_last_sync_once(
    run: RunDirectory, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    for i in range(5):
        run.append_result(0, entry(f"p{i}"))
        run.append_discard({"prompt_key": f"k{i}"})
    assert synced == []  # appends do not fsync: the parent groups them
    run.sync()
    assert len(synced) == 3  # batch_0, discarded, and the directory (new names)
    synced.clear()
    run.sync()
    assert synced == []
    run.append_result(0, entry("again"))
    run.write_json("checkpoint.json", {"n": 1})  # syncs the log before the checkpoint
    # batch_0, the table of names the line records use (first saved: a temp file, the
    # directory), then the checkpoint's temp file and the directory of the rename
    assert len(synced) == 5
    synced.clear()
    run.append_result(0, entry("and again"))
    run.write_json("checkpoint.json", {"n": 2})
    assert len(synced) == 3  # the table did not grow: batch_0, the checkpoint and its rename


# ---------------------------------------------------------------- json files


def test_write_json_replaces_atomically_and_read_json_tolerates_missing_or_corrupt(
    run: RunDirectory, caplog: pytest.LogCaptureFixture
) -> None:
    assert run.read_json("checkpoint.json") is None
    run.write_json("checkpoint.json", {"run_name": "r", "done": ["é"]})
    run.write_json("checkpoint.json", {"run_name": "r", "done": ["é", "x"]})
    assert run.read_json("checkpoint.json") == {"run_name": "r", "done": ["é", "x"]}
    assert [p.name for p in run.path.iterdir() if p.name.endswith(".tmp")] == []
    (run.path / "statistics.json").write_text('{"half": ', encoding="utf-8")
    assert run.read_json("statistics.json") is None
    assert "statistics.json: ignoring a corrupt file" in caplog.text
    with pytest.raises(ValueError, match="not a plain file name"):
        run.write_json("../escape.json", {})


# ---------------------------------------------------------------- lock

HOLD_LOCK = """
    import time
    from pathlib import Path
    from agent.store.directory import RunDirectory
    run = RunDirectory(Path({path!r}))
    run.lock()
    print("locked", flush=True)
    time.sleep(600)
"""


def test_a_second_runner_is_refused_until_the_holder_dies(tmp_path: Path) -> None:
    path = tmp_path / "run"
    with child(HOLD_LOCK.format(path=str(path))) as holder:
        assert holder.stdout is not None and holder.stdout.readline() == "locked\n"
        second = RunDirectory(path)
        with pytest.raises(RunLockedError) as info:
            second.lock()
        assert str(info.value) == (
            f"{path} is in use by another runner (pid {holder.pid}); wait for it or pick another --run_name"
        )
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        second.lock()  # the kernel released the dead holder's lock
        second.close()


def test_close_releases_the_lock_and_is_idempotent(tmp_path: Path) -> None:
    first = RunDirectory(tmp_path / "run")
    first.lock()
    with pytest.raises(RunLockedError):
        RunDirectory(tmp_path / "run").lock()
    first.close()
    first.close()
    with RunDirectory(tmp_path / "run") as second:
        second.lock()


def test_has_results_only_counts_result_logs_with_content(run: RunDirectory) -> None:
    assert not run.has_results()
    (run.path / "batch_0.jsonl").touch()
    run.write_json("checkpoint.json", {})
    assert not run.has_results()
    run.append_failure({"prompt_key": "k"})
    assert run.has_results()


# ---------------------------------------------------------------- repair


def test_repair_moves_a_torn_last_line_without_newline(run: RunDirectory) -> None:
    good = json.dumps(entry("a")).encode() + b"\n"
    torn = b'{"prompt_index": 1, "conversa'
    (run.path / "batch_3.jsonl").write_bytes(good + torn)
    assert run.repair() == [
        f"batch_3.jsonl: moved a torn last line ({len(torn)} bytes) to batch_3.jsonl.torn"
    ]
    assert (run.path / "batch_3.jsonl").read_bytes() == good
    assert (run.path / "batch_3.jsonl.torn").read_bytes() == torn + b"\n"
    assert run.repair() == []


def test_repair_moves_a_newline_terminated_line_that_does_not_parse(run: RunDirectory) -> None:
    good = b'{"prompt_key": "k0"}\n'
    for garbage in (b'{"prompt_key": "k1", "gl{"prompt_key": "k2"}\n', b"12\n"):
        (run.path / "failures.jsonl").write_bytes(good + garbage)
        assert run.repair() == [
            f"failures.jsonl: moved a torn last line ({len(garbage)} bytes) to failures.jsonl.torn"
        ]
        assert (run.path / "failures.jsonl").read_bytes() == good
    assert (
        run.path / "failures.jsonl.torn"
    ).read_bytes() == b'{"prompt_key": "k1", "gl{"prompt_key": "k2"}\n12\n'


def test_repair_keeps_a_complete_object_that_only_lacks_its_newline(run: RunDirectory) -> None:
    """Decision: the bytes are the whole record, so nothing was lost; the newline is added."""
    content = b'{"prompt_key": "k0"}\n{"prompt_key": "k1"}'
    (run.path / "discarded.jsonl").write_bytes(content)
    assert run.repair() == ["discarded.jsonl: added the missing newline after a complete last line"]
    assert (run.path / "discarded.jsonl").read_bytes() == content + b"\n"
    assert not (run.path / "discarded.jsonl.torn").exists()


def test_repair_handles_a_file_that_is_one_long_torn_line(run: RunDirectory) -> None:
    torn = b'{"value": "' + b"x" * 300_000  # longer than the backwards read chunk
    (run.path / "batch_0.jsonl").write_bytes(torn)
    (run.path / "batch_1.jsonl").write_bytes(json.dumps(entry("ok")).encode() + b"\n\n")
    assert run.repair() == [
        f"batch_0.jsonl: moved a torn last line ({len(torn)} bytes) to batch_0.jsonl.torn"
    ]
    assert (run.path / "batch_0.jsonl").read_bytes() == b""
    run.append_result(0, entry("after"))
    assert [json.loads(line) for line in lines_of(run.path / "batch_0.jsonl")] == [entry("after")]


def test_repair_refuses_to_run_without_the_lock(tmp_path: Path) -> None:
    with RunDirectory(tmp_path / "run") as run, pytest.raises(RuntimeError, match="needs the run lock"):
        run.repair()


def test_repair_removes_temp_files_left_by_an_interrupted_rewrite(run: RunDirectory) -> None:
    (run.path / ".trajectories.jsonl.4242.tmp").write_bytes(b'{"half')
    assert run.repair() == [".trajectories.jsonl.4242.tmp: removed a temp file left by an interrupted write"]
    assert not (run.path / ".trajectories.jsonl.4242.tmp").exists()


# ---------------------------------------------------------------- scan


def test_scan_reports_done_discarded_and_retryable_failures(run: RunDirectory) -> None:
    run.append_result(0, entry("a"))
    run.append_result(1, entry("a", 1))
    run.append_result(1, entry("b"))
    run.append_discard({"prompt_key": prompt_key("c", 0), "reason": "no_reasoning"})
    for key in (prompt_key("d", 0), prompt_key("d", 0), prompt_key("a", 0), prompt_key("c", 0)):
        run.append_failure({"prompt_key": key, "error_class": "timeout"})
    index = run.scan()
    assert index.done == {prompt_key("a", 0), prompt_key("a", 1), prompt_key("b", 0)}
    assert index.discarded == {prompt_key("c", 0)}
    assert index.failures == {prompt_key("d", 0): 2}  # a failure later done or discarded is settled
    assert (index.results, index.invalid_lines) == (3, 0)


def test_scan_counts_malformed_lines_and_keeps_reading(run: RunDirectory) -> None:
    good = [json.dumps(entry(p)).encode() for p in ("a", "b", "c")]
    bad = [b"123", b"[1]", b"null", b"{not json", b"\xff\xfe", b'{"conversations": []}', b'{"x": 1}']
    (run.path / "batch_0.jsonl").write_bytes(b"\n".join([good[0], *bad, good[1], b"", good[2]]) + b"\n")
    (run.path / "discarded.jsonl").write_bytes(b'"k"\n{"reason": "no key"}\n{"prompt_key": "d"}\n')
    index = run.scan()
    assert index.done == {prompt_key(p, 0) for p in "abc"}
    assert index.discarded == {"d"}
    assert (index.results, index.invalid_lines) == (3, len(bad) + 2)


def test_scan_derives_keys_from_the_human_turn_when_metadata_has_none(run: RunDirectory) -> None:
    """Files written by other tools: repeated texts are numbered in numeric file order."""
    (run.path / "batch_10.jsonl").write_text(json.dumps(entry("same", keyed=False)) + "\n", encoding="utf-8")
    (run.path / "batch_2.jsonl").write_text(
        json.dumps(entry("  same ", keyed=False)) + "\n" + json.dumps(entry("other", keyed=False)) + "\n",
        encoding="utf-8",
    )
    tombstone = {"prompt_index": 5, "discarded": "no_reasoning", "prompt": "dropped"}
    (run.path / "batch_11.jsonl").write_text(json.dumps(tombstone) + "\n", encoding="utf-8")
    index = run.scan()
    assert index.done == {prompt_key("same", 0), prompt_key("same", 1), prompt_key("other", 0)}
    assert index.discarded == {prompt_key("dropped", 0)}
    assert index.unrecorded == set()  # another tool's discard marker: no result line before it


# ---------------------------------------------------------------- merge


def test_merge_orders_numerically_dedupes_and_labels_unknown_tools(run: RunDirectory) -> None:
    run.append_result(10, entry("late"))
    run.append_result(2, entry("early"))
    run.append_result(2, entry("dup"))
    run.append_result(10, {**entry("dup"), "prompt_index": 99})  # a second result for "dup"
    run.append_result(3, entry("bad", tools={"terminal": 1, "hallucinated": 2, "rm_rf": 1}))
    run.append_result(3, entry("bad2", tools={"hallucinated": 1}))
    run.append_discard({"prompt_key": prompt_key("x", 0)})
    run.append_failure({"prompt_key": prompt_key("y", 0)})
    seen: list[dict[str, Any]] = []
    report = run.merge(TOOLS, on_entry=seen.append)
    merged = [json.loads(line) for line in lines_of(run.path / "trajectories.jsonl")]
    # an entry calling a tool the registry does not know is kept, never dropped without a record
    assert [e["conversations"][1]["value"] for e in merged] == ["early", "dup", "bad", "bad2", "late"]
    assert merged[1]["prompt_index"] == 0  # the first line per key wins
    assert seen == merged
    labels = [e["metadata"].get("discard_reasons") for e in merged]
    assert labels == [None, None, ["tool_not_offered"], ["tool_not_offered"], None]
    assert (report.files, report.written, report.duplicates, report.labelled) == (3, 5, 1, 2)
    assert report.unknown_tools == {"hallucinated": 2, "rm_rf": 1}
    assert report.invalid_lines == 0
    assert report.kept_keys == {prompt_key(p, 0) for p in ("early", "dup", "bad", "bad2", "late")}
    assert "kept_keys" not in report.as_dict()


def test_a_tombstone_after_a_result_withdraws_it_and_a_later_result_brings_it_back(run: RunDirectory) -> None:
    """A key's last line in its shard decides: result, tombstone (moved to discarded.jsonl),
    result again (recovered); the merge leaves out the keys it is told are withdrawn."""
    labelled = entry("flawed")
    labelled["metadata"]["discard_reasons"] = ["tool_not_offered"]
    key = prompt_key("flawed", 0)
    run.append_result(0, labelled)
    assert run.scan().labels == {key: ["tool_not_offered"]}
    run.append_result(0, {"prompt_key": key, "discarded": True, "metadata": {"prompt_key": key}})
    index = run.scan()
    assert key not in index.done and key in index.discarded and index.tombstoned == {key}
    assert index.unrecorded == {key}  # withdrawn, and no record in discarded.jsonl
    assert index.labels == {}
    report = run.merge(TOOLS, exclude=index.tombstoned)
    assert (report.written, report.withdrawn, report.tombstones) == (0, 1, 1)
    run.append_result(0, labelled)
    index = run.scan()
    assert key in index.done and index.tombstoned == set() and index.labels == {key: ["tool_not_offered"]}
    assert run.merge(TOOLS, exclude=index.tombstoned).written == 1


def test_merge_copies_lines_verbatim_and_terminates_each_one(run: RunDirectory) -> None:
    first = b'{"metadata": {"prompt_key": "k0"}, "tool_stats": {},   "spacing": "kept"}'
    second = b'{"metadata": {"prompt_key": "k1"}}'
    (run.path / "batch_0.jsonl").write_bytes(first)  # no trailing newline
    (run.path / "batch_1.jsonl").write_bytes(b"7\n{bad\n" + second + b"\r\n")
    report = run.merge(TOOLS)
    assert (run.path / "trajectories.jsonl").read_bytes() == first + b"\n" + second + b"\n"
    assert (report.written, report.invalid_lines) == (2, 2)


def test_merge_skips_tombstones_and_fallback_keys_dedupe_across_files(run: RunDirectory) -> None:
    (run.path / "batch_0.jsonl").write_text(
        json.dumps(entry("p", keyed=False))
        + "\n"
        + json.dumps({"discarded": "no_reasoning", "prompt": "q"})
        + "\n",
        encoding="utf-8",
    )
    (run.path / "batch_1.jsonl").write_text(
        json.dumps(entry("p", keyed=True, occurrence=1)) + "\n", encoding="utf-8"
    )
    report = run.merge(TOOLS)
    assert (report.written, report.tombstones, report.duplicates) == (2, 1, 0)


def test_a_merge_that_fails_midway_leaves_the_old_output_intact(run: RunDirectory) -> None:
    old = b'{"old": true}\n'
    (run.path / "trajectories.jsonl").write_bytes(old)
    for prompt in ("a", "b", "c"):
        run.append_result(0, entry(prompt))

    def explode(item: dict[str, Any]) -> None:
        if item["conversations"][1]["value"] == "b":
            raise RuntimeError("statistics failed")

    with pytest.raises(RuntimeError, match="statistics failed"):
        run.merge(TOOLS, on_entry=explode)
    assert (run.path / "trajectories.jsonl").read_bytes() == old
    assert [p.name for p in run.path.iterdir() if p.name.startswith(".trajectories")] == []
    assert run.merge(TOOLS).written == 3


# ---------------------------------------------------------------- kill -9

WRITER = """
    from pathlib import Path
    from agent.store.directory import RunDirectory
    run = RunDirectory(Path({path!r}))
    run.lock()
    start = {start}
    print("locked", flush=True)
    for i in range(start, start + 100_000):
        size = (i * 7919) % 400_000 if i % 5 else 8_000_000  # big writes can be cut by the kill
        run.append_result(i % 3, {{"metadata": {{"prompt_key": f"k{{i}}"}}, "i": i, "pad": "x" * size}})
        if i % 4 == 0:
            run.append_failure({{"prompt_key": f"k{{i}}", "i": i}})
        if i % 10 == 0:
            run.sync()
"""


def check_whole_lines(path: Path) -> list[int]:
    numbers: list[int] = []
    if not path.exists():  # killed before its first line (a shard is made by its first append)
        return numbers
    for line in lines_of(path):
        assert line.endswith(b"\n")
        record = json.loads(line)
        if "pad" in record:
            assert len(record["pad"]) == ((record["i"] * 7919) % 400_000 if record["i"] % 5 else 8_000_000)
        numbers.append(record["i"])
    return numbers


@pytest.mark.long
def test_kill_9_at_random_moments_leaves_only_whole_lines_after_repair(tmp_path: Path) -> None:
    path = tmp_path / "run"
    rng = random.Random(1234)
    next_i = 0
    for _round in range(6):
        with child(WRITER.format(path=str(path), start=next_i)) as writer:
            assert writer.stdout is not None and writer.stdout.readline() == "locked\n"
            try:
                writer.wait(timeout=rng.uniform(0.05, 0.5))
            except subprocess.TimeoutExpired:
                writer.send_signal(signal.SIGKILL)
            writer.wait()
        with RunDirectory(path) as run:
            run.lock()
            run.repair()
            index = run.scan()
            written = sorted(n for b in range(3) for n in check_whole_lines(path / f"batch_{b}.jsonl"))
            assert written == list(range(len(written)))  # every line up to the kill, each once
            assert len(written) >= next_i  # repair never drops a line that was whole
            assert index.done == {f"k{n}" for n in written}
            assert index.invalid_lines == 0
            check_whole_lines(path / "failures.jsonl")
            next_i = len(written)
    assert next_i > 0
    with RunDirectory(path) as run:
        run.lock()
        assert run.repair() == []
        run.append_result(0, {"metadata": {"prompt_key": "after"}, "i": -1})
        assert check_whole_lines(path / "batch_0.jsonl")[-1] == -1
        assert run.scan().done == {f"k{n}" for n in range(next_i)} | {"after"}
        assert run.merge(set()).written == next_i + 1


# ---------------------------------------------------------------- partial write rollback

FILL_DISK = """
    import resource, signal
    from pathlib import Path
    from agent.store.directory import RunDirectory
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # get EFBIG instead of being killed
    run = RunDirectory(Path({path!r}))
    run.lock()
    run.append_result(0, {{"metadata": {{"prompt_key": "small"}}}})
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
    try:
        run.append_result(0, {{"metadata": {{"prompt_key": "big"}}, "pad": "x" * 10_000}})
    except OSError as exc:
        print("refused", exc.errno, flush=True)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    run.append_result(0, {{"metadata": {{"prompt_key": "next"}}}})
    run.close()
"""


def test_a_write_cut_short_by_a_full_disk_is_taken_back(tmp_path: Path) -> None:
    """The file-size limit makes the kernel accept part of the line, then refuse the rest,
    as a full disk does; the partial line must not be glued to the next append."""
    path = tmp_path / "run"
    with child(FILL_DISK.format(path=str(path))) as writer:
        assert writer.stdout is not None
        assert writer.stdout.read().startswith("refused 27")  # EFBIG
        assert writer.wait() == 0
    keys = [json.loads(line)["metadata"]["prompt_key"] for line in lines_of(path / "batch_0.jsonl")]
    assert keys == ["small", "next"]
