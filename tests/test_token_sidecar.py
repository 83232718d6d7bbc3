"""The parent side of --capture_tokens on the real run directory: each entry's sidecar line in
tokens_<batch>.jsonl before the entry's own line (fsynced first), and the merge's tokens.jsonl,
line i holding the tokens of trajectories.jsonl's entry i, chosen by metadata.tokens.id."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent.batch.completion import Completion
from agent.batch.recovery import write_answer
from agent.common.redaction import Redactor
from agent.protocols.tokens import TokenRecord, floats
from agent.report.digest import RunDigest
from agent.report.sections import summary
from agent.store.directory import RunDirectory
from agent.store.layout import batch_files
from agent.store.summary_lines import token_capture_lines
from agent.store.token_merge import token_capture
from tests.support.run_dirs import opened
from tests.support.token_entries import discarded, entry, finished, key_of, token_record


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def test_sidecar_lines_go_before_their_entry_in_the_entrys_shard(tmp_path: Path) -> None:
    with opened(tmp_path) as run:
        for n in (0, 1, 5):
            write_answer(run, finished(n, batch_size=4), 4, 0)
        write_answer(run, discarded(6, batch_size=4), 4, 0)
    assert [p.name for p in batch_files(tmp_path)] == ["batch_0.jsonl", "batch_1.jsonl"]
    zero = [json.loads(line)["tokens_id"] for line in _lines(tmp_path / "tokens_0.jsonl")]
    entries = _jsonl(tmp_path / "batch_0.jsonl")
    assert zero == [e["metadata"]["tokens"]["id"] for e in entries]
    # prompt 6's discard: its tokens in its entry's shard, where a recovery puts the entry back
    one = _jsonl(tmp_path / "tokens_1.jsonl")
    discard = _jsonl(tmp_path / "discarded.jsonl")[0]
    assert [r["tokens_id"] for r in one] == [
        _jsonl(tmp_path / "batch_1.jsonl")[0]["metadata"]["tokens"]["id"],
        discard["entry"]["metadata"]["tokens"]["id"],
    ]


def _record_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """From now on, the name of each file fsynced, in order (the fsyncs still happen)."""
    synced: list[str] = []
    real = os.fsync

    def recording(fd: int) -> None:
        synced.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real(fd)

    monkeypatch.setattr(os, "fsync", recording)
    return synced


def test_sidecars_are_fsynced_before_the_results_that_name_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with opened(tmp_path) as run:
        write_answer(run, finished(0, batch_size=1), 1, 0)
        write_answer(run, discarded(1, batch_size=1), 1, 0)
        synced = _record_fsyncs(monkeypatch)
        run.sync()
        monkeypatch.undo()
    files = [name for name in synced if name.endswith(".jsonl")]
    assert files[:2] == ["tokens_0.jsonl", "tokens_1.jsonl"]
    assert sorted(files[2:]) == ["batch_0.jsonl", "discarded.jsonl"]


def test_a_full_lru_syncs_the_sidecars_before_evicting_a_shard(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = RunDirectory(tmp_path, max_open_files=2)
    run.lock()
    synced = _record_fsyncs(monkeypatch)
    write_answer(run, finished(0, batch_size=1), 1, 0)  # tokens_0, batch_0 open and dirty
    write_answer(run, finished(1, batch_size=1), 1, 0)  # evicts both: every sidecar first
    monkeypatch.undo()
    run.close()
    assert synced == ["tokens_0.jsonl", "tokens_1.jsonl", "batch_0.jsonl"]


def _write(
    run: RunDirectory, batch: int, n: int, record: TokenRecord | None, *, sidecar: bool = True
) -> None:
    if record is not None and sidecar:
        run.append_tokens(batch, record.line(), b"{}")
    run.append_result(batch, entry(key_of(n), n, batch, record))


def test_the_merge_writes_one_line_per_entry_in_the_output_order(tmp_path: Path) -> None:
    records = {n: token_record(key_of(n), n, turns=1 + n % 3, drift=n == 4) for n in range(6)}
    with opened(tmp_path) as run:
        for n in (3, 1, 0, 2):  # finished out of order in shard 0 (batch_size 4)
            _write(run, 0, n, records[n])
        for n in (5, 4):
            _write(run, 1, n, records[n])
        report = run.merge(set())
    entries = _jsonl(tmp_path / "trajectories.jsonl")
    lines = _lines(tmp_path / "tokens.jsonl")
    assert [e["prompt_index"] for e in entries] == [0, 1, 2, 3, 4, 5]
    assert lines == [records[e["prompt_index"]].line() for e in entries]  # copied byte for byte
    assert report.tokens == {
        "trajectories": 6,
        "turns": sum(len(r.turns) for r in records.values()),
        "prompt_ids": sum(len(t.prompt_ids) for r in records.values() for t in r.turns),
        "completion_ids": sum(len(t.completion_ids) for r in records.values() for t in r.turns),
        "with_drift": 1,
        "missing": 0,
        "without": 0,
        "withheld": 0,
        "bytes": (tmp_path / "tokens.jsonl").stat().st_size,
    }
    assert "tokens" not in report.as_dict()  # the merge section keeps its keys


def test_lines_no_merged_entry_names_are_never_merged(tmp_path: Path) -> None:
    """A crashed attempt's line (no result followed), a duplicate result's, a withdrawn entry's
    and a discarded entry's: none reaches tokens.jsonl; the first line of an id wins."""
    kept, crashed, second = (token_record(key_of(n), n) for n in (0, 1, 0))
    withdrawn = token_record(key_of(2), 2)
    with opened(tmp_path) as run:
        run.append_tokens(0, crashed.line(), b"{}")  # killed before its result: rerun with a fresh id
        _write(run, 0, 0, kept)
        run.append_tokens(0, kept.line().replace(b'"turns":[', b'"turns":[{"bogus":1},', 1), b"{}")
        _write(run, 0, 0, second)  # a second result line of prompt 0: never merged
        _write(run, 0, 1, (rerun := token_record(key_of(1), 1)))
        _write(run, 0, 2, withdrawn)
        write_answer(run, discarded(3, batch_size=4), 4, 0)
        report = run.merge(set(), exclude={key_of(2)})
    assert report.duplicates == 1 and report.withdrawn == 1
    assert _lines(tmp_path / "tokens.jsonl") == [kept.line(), rerun.line()]


def test_an_entry_naming_tokens_its_sidecar_lacks_is_counted_missing(tmp_path: Path) -> None:
    lost, elsewhere, fine = (token_record(key_of(n), n) for n in range(3))
    with opened(tmp_path) as run:
        _write(run, 0, 0, lost, sidecar=False)
        run.append_tokens(1, elsewhere.line(), b"{}")  # another shard's sidecar: not this entry's
        _write(run, 0, 1, elsewhere, sidecar=False)
        _write(run, 0, 2, fine)
        run.append_result(0, entry(key_of(3), 3, 0, None))  # an entry with no token data
        report = run.merge(set())
    records = _jsonl(tmp_path / "tokens.jsonl")
    assert [r["prompt_key"] for r in records] == [key_of(n) for n in range(4)]
    assert records[0] == {
        "tokens_id": lost.tokens_id,
        "prompt_key": key_of(0),
        "prompt_index": 0,
        "turns": [],
        "drift": None,
        "missing": True,
    }
    assert records[1]["missing"] is True and records[1]["tokens_id"] == elsewhere.tokens_id
    assert records[2] == fine.to_json()
    assert records[3]["tokens_id"] is None and "missing" not in records[3]
    assert report.tokens is not None
    assert (report.tokens["missing"], report.tokens["without"], report.tokens["trajectories"]) == (2, 1, 1)
    done = Completion(missing_tokens=report.tokens["missing"])
    assert done.exit_code == 1
    assert done.next_step().startswith("Not done: 2 entries in trajectories.jsonl name token data")
    assert done.as_dict()["missing_tokens"] == 2
    assert "missing_tokens" not in Completion().as_dict() and Completion().exit_code == 0


def test_a_torn_sidecar_line_is_repaired_and_no_sidecar_is_read_as_a_shard(tmp_path: Path) -> None:
    record = token_record(key_of(0), 0)
    with opened(tmp_path) as run:
        _write(run, 0, 0, record)
    torn = token_record(key_of(1), 1).line()[:40]
    with (tmp_path / "tokens_0.jsonl").open("ab") as handle:
        handle.write(torn)  # killed mid-append: its result line never came
    run = RunDirectory(tmp_path)
    run.lock()
    notes = run.repair()
    assert notes == ["tokens_0.jsonl: moved a torn last line (40 bytes) to tokens_0.jsonl.torn"]
    assert (tmp_path / "tokens_0.jsonl.torn").read_bytes() == torn + b"\n"
    index = run.scan()
    assert index.done == {key_of(0)} and index.invalid_lines == 0 and index.results == 1
    assert [p.name for p in batch_files(tmp_path)] == ["batch_0.jsonl"]
    run.merge(set())
    run.close()
    assert _lines(tmp_path / "tokens.jsonl") == [record.line()]


def test_tokens_json_is_replaced_atomically_and_absent_without_sidecars(tmp_path: Path) -> None:
    record = token_record(key_of(0), 0)
    with opened(tmp_path) as run:
        _write(run, 0, 0, record)
        run.merge(set())
        before = (tmp_path / "tokens.jsonl").read_bytes()
        _write(run, 0, 1, token_record(key_of(1), 1))

        def failing(_entry: dict[str, Any]) -> None:
            raise RuntimeError("merge interrupted")

        with pytest.raises(RuntimeError):
            run.merge(set(), on_entry=failing)
        assert (tmp_path / "tokens.jsonl").read_bytes() == before
        assert not list(tmp_path.glob(".*.tmp"))
        for sidecar in tmp_path.glob("tokens_*.jsonl"):
            sidecar.unlink()  # its sidecars gone: a stale tokens.jsonl would describe another output
        report = run.merge(set())
    assert report.tokens is None and not (tmp_path / "tokens.jsonl").exists()


def test_a_run_without_capture_gets_no_tokens_file_nor_section(tmp_path: Path) -> None:
    with opened(tmp_path) as run:
        _write(run, 0, 0, None)
        report = run.merge(set())
    assert report.tokens is None and not (tmp_path / "tokens.jsonl").exists()
    assert token_capture("vllm", report.tokens, None) is None


def test_the_statistics_section_names_the_api_and_the_report_shows_the_drift() -> None:
    counts = {"trajectories": 9, "with_drift": 2, "missing": 0, "turns": 20}
    assert token_capture("vllm", counts, None) == {"api": "vllm", **counts}
    previous = {"tokens": {"api": "sglang", "with_drift": 1}}
    section = token_capture(None, counts, previous)  # a merge without a probe (--rescore)
    assert section is not None and section["api"] == "sglang"
    stats = {"tokens": {"merged_output": {}, **section}, "completion": {}}
    html = summary(stats, RunDigest())
    assert "Trajectories with token drift</td><td>2 of 9" in html
    assert "9 trajectories (sglang)" in html
    assert "token drift" not in summary({"tokens": {"merged_output": {}}}, RunDigest())
    assert token_capture_lines(stats["tokens"]) == [
        "Token data (sglang): 9 trajectories · 20 turns · 0 prompt ids · 0 completion ids · 2 with drift"
    ]
    assert token_capture_lines({"merged_output": {}}) == []


def test_a_secret_of_digits_inside_a_logprob_spoils_no_sidecar_line(tmp_path: Path) -> None:
    """A token line holds numbers: replaced byte by byte, a secret of digits found inside a
    logprob by chance would leave a line that no longer parses (its entry's tokens lost)."""
    record = token_record(key_of(0), 0)
    first = record.turns[0]
    spoiled = dataclasses.replace(first, logprobs=floats([-0.123456789] * len(first.completion_ids)))
    record = dataclasses.replace(record, turns=(spoiled, *record.turns[1:]))
    run = RunDirectory(tmp_path, redactor=Redactor(["12345678"]))
    run.lock()
    run.append_tokens(0, record.line(), b'{"clean": true}')
    run.append_tokens(0, record.line(), b'{"text": "12345678"}')  # its entry held the secret
    run.close()
    kept, withheld = _jsonl(tmp_path / "tokens_0.jsonl")
    assert TokenRecord.of(kept).turns[0].logprobs == spoiled.logprobs
    assert withheld == {
        "tokens_id": record.tokens_id, "prompt_key": record.prompt_key, "prompt_index": 0, "turns": [],
        "drift": None, "withheld": True,
    }  # fmt: skip
