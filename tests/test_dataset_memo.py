"""The dataset scan remembered in the run directory (`agent.batch.dataset_memo`): `--resume` of
an unchanged dataset takes it instead of scanning again, and anything the scan depended on
that changed makes it scan again (issue 26: a resume finds its place in seconds)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from agent.batch.dataset import DatasetRow, DatasetScan, iter_rows, scan_dataset
from agent.batch.dataset_memo import MEMO_FILE, identity, remember, scan_for_run
from agent.batch.job_feed import as_scanned, forgetting
from agent.batch.planned import PlannedUnits
from agent.common import redaction
from agent.config.dataset_config import DatasetOptions
from agent.errors import DatasetError

OPTIONS = DatasetOptions()


def write_dataset(path: Path, rows: int = 50) -> None:
    lines = [json.dumps({"prompt": f"task {i % 40}"}) for i in range(rows)]  # 10 repeated prompts
    lines[7] = '{"prompt": ""}'
    lines[20] = "not json"
    lines[30] = json.dumps({"prompt": "runs somewhere", "image": "python:3.12"})  # local runs no image
    path.write_text("\n".join(lines) + "\n\n")


def scanned(tmp_path: Path, *, resume: bool, **changes: object) -> DatasetScan:
    args: dict[str, object] = {"max_samples": None, "backend": "local", "options": OPTIONS}
    args.update(changes)
    return scan_for_run(
        tmp_path / "d.jsonl",
        args["max_samples"],  # type: ignore[arg-type]
        backend=args["backend"],  # type: ignore[arg-type]
        options=args["options"],  # type: ignore[arg-type]
        run_dir=tmp_path / "run",
        resume=resume,
    )


def same(a: DatasetScan, b: DatasetScan) -> None:
    assert a.keys is not None and b.keys is not None
    assert list(a.keys.iter_keys()) == list(b.keys.iter_keys())
    assert replace(a, keys=None, recalled=False) == replace(b, keys=None, recalled=False)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    write_dataset(tmp_path / "d.jsonl")
    (tmp_path / "run").mkdir()
    return tmp_path


def test_a_resume_of_an_unchanged_dataset_takes_the_remembered_scan(run: Path) -> None:
    first = scanned(run, resume=False)
    assert first.identity is not None and not first.recalled
    assert (first.valid, first.error_count, first.total_lines) == (47, 3, 51)
    assert [error.line_no for error in first.errors] == [8, 21, 31]
    remember(run / "run", first)
    recalled = scanned(run, resume=True)
    assert recalled.recalled
    same(recalled, scanned(run, resume=False))
    assert not scanned(run, resume=False).recalled  # a fresh run always scans


def _appended(run: Path) -> None:
    with (run / "d.jsonl").open("a") as handle:
        handle.write('{"prompt": "one more"}\n')


def _same_size_edit(run: Path) -> None:
    path = run / "d.jsonl"
    status = path.stat()
    path.write_bytes(path.read_bytes().replace(b"task 3", b"task 9"))
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))  # even its time put back


def _replaced(run: Path) -> None:
    data = (run / "d.jsonl").read_bytes()
    (run / "other.jsonl").write_bytes(data)
    os.replace(run / "other.jsonl", run / "d.jsonl")


def _memo_damaged(run: Path) -> None:
    memo = run / "run" / MEMO_FILE
    data = bytearray(memo.read_bytes())
    data[-1] ^= 1
    memo.write_bytes(bytes(data))


@pytest.mark.parametrize("change", [_appended, _same_size_edit, _replaced, _memo_damaged])
def test_a_changed_dataset_or_memo_is_scanned_again(run: Path, change: Callable[[Path], None]) -> None:
    remember(run / "run", scanned(run, resume=False))
    change(run)
    again = scanned(run, resume=True)
    assert not again.recalled
    same(again, scanned(run, resume=False))


@pytest.mark.parametrize(
    "changes",
    [{"max_samples": 10}, {"backend": "docker"}, {"options": DatasetOptions(prompt_field="question")}],
)
def test_other_scan_inputs_are_scanned_again(run: Path, changes: dict[str, object]) -> None:
    remember(run / "run", scanned(run, resume=False))
    again = scanned(run, resume=True, **changes)
    assert not again.recalled
    same(again, scanned(run, resume=False, **changes))


def test_only_a_local_file_is_remembered(tmp_path: Path) -> None:
    assert identity(tmp_path, None, "local", OPTIONS) is None  # a directory
    assert identity("hf://datasets/org/name", None, "local", OPTIONS) is None
    assert identity(tmp_path / "missing.jsonl", None, "local", OPTIONS) is None


def test_the_memo_holds_no_secret_and_one_redacted_is_not_recalled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "sk-live-0123456789abcdef"
    place = tmp_path / secret  # a secret in the dataset's path: the memo names the file
    place.mkdir()
    write_dataset(place / "d.jsonl")
    (place / "run").mkdir()
    monkeypatch.setattr(redaction, "_active", redaction.Redactor([secret]))
    remember(place / "run", scanned(place, resume=False))
    assert secret.encode() not in (place / "run" / MEMO_FILE).read_bytes()
    again = scanned(place, resume=True)
    assert not again.recalled and again.valid == 47


def test_an_edit_in_the_middle_of_a_large_file_with_its_time_set_back_is_scanned_again(run: Path) -> None:
    path = run / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"row {i:06d}"}) + "\n" for i in range(20_000)))
    remember(run / "run", scanned(run, resume=False))
    assert scanned(run, resume=True).recalled
    status = path.stat()
    with path.open("r+b") as handle:  # the middle, far from the first and last 64 KiB
        handle.seek(path.read_bytes().index(b"row 010000"))
        handle.write(b"row 9X9999")
    os.utime(path, ns=(status.st_atime_ns, status.st_mtime_ns))  # only the change time tells
    again = scanned(run, resume=True)
    assert not again.recalled and again.keys is not None
    same(again, scanned(run, resume=False))


def test_a_dataset_found_changed_by_the_job_feed_drops_the_memo(run: Path) -> None:
    remember(run / "run", scanned(run, resume=False))

    def rows() -> Iterator[DatasetRow]:
        yield from iter_rows(run / "d.jsonl")
        raise DatasetError("d.jsonl:3: the dataset changed since the run scanned it")

    with pytest.raises(DatasetError):
        list(forgetting(run / "run", rows()))
    assert not (run / "run" / MEMO_FILE).exists()


def test_a_dataset_read_whole_is_checked_row_by_row_against_its_scan(tmp_path: Path) -> None:
    """Where the feed reads every row (Parquet, the Hub, a JSONL file with more bad lines than
    its scan kept), each row's key is compared with the scan's for its position: an edited row
    or a dataset cut short stops the feed with DatasetError; a row appended is left over."""
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in "abc"), encoding="utf-8")
    scan = scan_dataset(path, keys=True)
    assert scan.keys is not None
    units = PlannedUnits(scan.keys)

    def fed(*prompts: str) -> list[str]:
        path.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in prompts), encoding="utf-8")
        return [row.prompt for row in as_scanned(iter_rows(path), units, "d.jsonl")]

    assert fed("a", "b", "c") == ["a", "b", "c"]
    assert fed("a", "b", "c", "d") == ["a", "b", "c"]  # for the next --resume
    with pytest.raises(DatasetError, match=r"^d\.jsonl:2: the dataset changed since the run scanned it"):
        fed("a", "x", "c")
    with pytest.raises(DatasetError, match=r"since the run scanned it \(it ends after 2 of its 3 rows\)"):
        fed("a", "b")
