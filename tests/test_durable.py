"""The one torn-last-line rule, through both of its callers: the run directory's `repair()`
and the single-query CLI's `save_trajectory`. Each case is a file's bytes before; both
callers must leave the same bytes and move the same bytes aside."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from agent.export.samples_file import save_trajectory
from agent.store.directory import RunDirectory

GOOD = b'{"n": 1}\n'
LONG_TORN = b'{"v": "' + b"a" * 200_000  # longer than one backwards-scan step

# (id, bytes before, bytes after the repair, bytes moved to `<file>.torn` or None)
CASES = [
    ("empty", b"", b"", None),
    ("whole lines", GOOD + b'{"n": 2}\n', GOOD + b'{"n": 2}\n', None),
    ("blank last line", GOOD + b"\n", GOOD + b"\n", None),
    ("object missing only its newline", GOOD + b'{"n": 2}', GOOD + b'{"n": 2}\n', None),
    ("torn object", GOOD + b'{"conversations": [{"fr', GOOD, b'{"conversations": [{"fr\n'),
    ("only line torn", b'{"partial": tr', b"", b'{"partial": tr\n'),
    ("terminated line that is no object", GOOD + b"12\n", GOOD, b"12\n"),
    ("unterminated JSON that is no object", GOOD + b"[1, 2]", GOOD, b"[1, 2]\n"),
    ("not UTF-8", GOOD + b'{"x": "\xff\xfe', GOOD, b'{"x": "\xff\xfe\n'),
    ("torn line longer than a scan step", GOOD + LONG_TORN, GOOD, LONG_TORN + b"\n"),
]
IDS = [case[0] for case in CASES]


@pytest.mark.parametrize(("name", "before", "after", "torn"), CASES, ids=IDS)
def test_run_directory_repair(
    tmp_path: Path, name: str, before: bytes, after: bytes, torn: bytes | None
) -> None:
    path = tmp_path / "run" / "batch_0.jsonl"
    with RunDirectory(tmp_path / "run") as run:
        run.lock()
        path.write_bytes(before)
        notes = run.repair()
    assert path.read_bytes() == after
    side = path.with_name("batch_0.jsonl.torn")
    assert (side.read_bytes() if side.exists() else None) == torn
    assert len(notes) == (0 if after == before else 1)
    if torn is not None:
        assert notes == [
            f"batch_0.jsonl: moved a torn last line ({len(before) - len(after)} bytes) to {side.name}"
        ]


@pytest.mark.parametrize(("name", "before", "after", "torn"), CASES, ids=IDS)
def test_save_trajectory_repairs_before_appending(
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    name: str,
    before: bytes,
    after: bytes,
    torn: bytes | None,
) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(before)
    with caplog.at_level(logging.WARNING, logger="agent.export.samples_file"):
        save_trajectory([{"from": "human", "value": "hi"}], "m", True, filename="x.jsonl", directory=tmp_path)
    content = path.read_bytes()
    assert content.startswith(after)
    appended = content[len(after) :]
    assert appended.count(b"\n") == 1 and json.loads(appended)["model"] == "m"
    side = tmp_path / "x.jsonl.torn"
    assert (side.read_bytes() if side.exists() else None) == torn
    warnings = [r.getMessage() for r in caplog.records if r.name == "agent.export.samples_file"]
    assert len(warnings) == (0 if after == before else 1)
    if torn is not None:
        assert warnings == [
            f"{tmp_path}/x.jsonl: moved a torn last line ({len(before) - len(after)} bytes) to x.jsonl.torn"
        ]


def test_a_second_torn_line_is_appended_to_the_side_file(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(GOOD + b'{"first')
    save_trajectory([], "m", True, filename="x.jsonl", directory=tmp_path)
    with path.open("ab") as handle:
        handle.write(b'{"second')
    save_trajectory([], "m", True, filename="x.jsonl", directory=tmp_path)
    assert (tmp_path / "x.jsonl.torn").read_bytes() == b'{"first\n{"second\n'
    assert len(path.read_bytes().splitlines()) == 3
